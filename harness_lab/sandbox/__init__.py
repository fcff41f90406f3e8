"""The sandbox: workspace boundary, run_command under limits, snapshots with rollback.

``Sandbox(root)`` applies the default :class:`SandboxPolicy` (workspace-write, network off); every
tool call returns a :class:`~harness_lab.records.tools.ToolResult`. Modules:

* :mod:`.policy`    the stated policy and quotas
* :mod:`.boundary`  path resolution beneath the root (openat2, O_NOFOLLOW walk fallback)
* :mod:`.fileops`   read_file / write_file / list_dir / delete_file
* :mod:`.command`   run_command: namespaces, rlimits, uid drop, timeout, output cap
* :mod:`.process`   collecting output, ending the child and everything it started
* :mod:`._reaper`   without a pid namespace: the command's parent, which kills what it leaves behind
* :mod:`.netallow`  the network allowlist: validation, and the harness's relay to the listed host:port pairs
* :mod:`._netrelay` inside the namespace: listens on the listed pairs and hands each connection to the relay
* :mod:`.scan`      manifests with a stat cache (full walk, or only what was written since)
* :mod:`.journal`   the change journal (inotify): which paths anyone wrote, so scans skip the rest
* :mod:`.mhash`     the workspace hash, updated by what changed
* :mod:`.blobs`     content-addressed file contents
* :mod:`.snapshots` snapshot records, the manifest store (deltas), diff
* :mod:`.restore`   rollback / materialize: write only what differs, never through links
* :mod:`.sandbox`   the facade
"""

from __future__ import annotations

from harness_lab.sandbox.policy import Quotas, SandboxPolicy
from harness_lab.sandbox.sandbox import Sandbox
from harness_lab.sandbox.snapshots import SnapshotDiff, SnapshotInfo

__all__ = ["Quotas", "Sandbox", "SandboxPolicy", "SnapshotDiff", "SnapshotInfo"]
