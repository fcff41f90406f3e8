"""The sandbox: workspace boundary, run_command under limits, snapshots with rollback.

``Sandbox(root)`` applies the default :class:`SandboxPolicy` (workspace-write, network off); every
tool call returns a :class:`~harness_lab.tools.ToolResult`. Modules:

* :mod:`.policy`    the stated policy and quotas
* :mod:`.boundary`  path resolution beneath the root (openat2, O_NOFOLLOW walk fallback)
* :mod:`.fileops`   read_file / write_file / list_dir / delete_file
* :mod:`.command`   run_command: namespaces, rlimits, uid drop, timeout, output cap
* :mod:`.scan`      manifests with a stat cache, content-addressed blobs
* :mod:`.snapshots` snapshot records, store, diff, rollback
* :mod:`.sandbox`   the facade
"""

from __future__ import annotations

from harness_lab.sandbox.policy import Quotas, SandboxPolicy
from harness_lab.sandbox.sandbox import Sandbox
from harness_lab.sandbox.snapshots import SnapshotDiff, SnapshotInfo

__all__ = ["Quotas", "Sandbox", "SandboxPolicy", "SnapshotDiff", "SnapshotInfo"]
