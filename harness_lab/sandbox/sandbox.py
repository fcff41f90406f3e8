"""The facade: one object through which every workspace tool call of a run goes.

``Sandbox.call(tool, **args)`` always returns a :class:`~harness_lab.records.tools.ToolResult`: an unknown
tool or bad arguments give ``status="error"``, a refusal (path escape, tool not allowed by the
policy) gives ``status="denied"``. Before every irreversible call (``delete_file``, a ``write_file``
that overwrites, ``run_command``) the sandbox takes a snapshot; if that snapshot fails the call is
not executed. Snapshots also store what ``state_provider()`` returns, so a rollback hands back the
run's state and context of that moment together with the files.

Cost model (what the sandbox wrote itself is known; an outside write is what must be detected):
with the change journal (``capabilities["change_tracking"] == "inotify"``, the default on Linux)
the kernel reports every write to the workspace, by anyone, so ``snapshot()``, ``rollback()``,
``workspace_hash()`` and ``manifest()`` look only at the paths written since the last scan: their
cost follows the change, not the tree, and an outside write between two calls is still seen. The
tree is walked in full (stat cache: unchanged files are not read) only on the first scan, after
every ``run_command`` (its code may write through shared memory maps, which inotify does not
report), when the journal overflows and on request (``rescan=True``). Without a journal
(``change_tracking="walk"`` or no inotify) ``rollback``, ``workspace_hash`` and ``manifest`` walk
every time, and ``snapshot()`` looks only at what the sandbox's own tools touched: someone who
writes behind its back must then pass ``rescan=True``.

Isolation: ``policy.isolation`` "required" (bwrap or unshare) or a named wrapper that does not work here
is a :class:`~harness_lab.errors.SandboxEnvironmentError` at construction, one line naming what is missing;
"auto" falls back to none, and ``capabilities["missing"]`` says what that gives up (the CLI warns). With
none the harness process is made non-dumpable (see :func:`~harness_lab.sandbox.command.hide_harness_process`).

Workspace quota (``quotas.workspace_bytes``): a ``write_file`` that would pass it is refused; a ``run_command``
that leaves the workspace past it is an error result (``workspace_quota_exceeded``) and its changes are rolled
back to the snapshot taken before it. After a command the scanner's walk (the one the next snapshot needs)
is made at once and sums the sizes it stats, hashing what is new only once the total fits
(:meth:`Scanner.walk_within <harness_lab.sandbox.scan.Scanner.walk_within>`); only past the quota does the
stat walk of :mod:`._quota` say what to take away.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

from harness_lab.errors import SandboxEnvironmentError
from harness_lab.records.tools import ToolResult
from harness_lab.sandbox import fileops
from harness_lab.sandbox._dirs import open_dirs
from harness_lab.sandbox._quota import file_sizes
from harness_lab.sandbox._snapshot_ops import SnapshotOps
from harness_lab.sandbox.boundary import Boundary, Refusal
from harness_lab.sandbox.command import (
    check_isolation,
    check_network_allow,
    hide_harness_process,
    run_command,
    sandbox_uid,
)
from harness_lab.sandbox.netallow import parse_allowlist
from harness_lab.sandbox.policy import TOOLS, SandboxPolicy
from harness_lab.sandbox.scan import Manifest, Scanner
from harness_lab.sandbox.snapshots import SnapshotInfo, SnapshotStore

__all__ = ["Sandbox"]

StateProvider = Callable[[], dict[str, Any]]

_ARGS: dict[str, tuple[frozenset[str], frozenset[str]]] = {  # tool -> (required, optional)
    "read_file": (frozenset({"path"}), frozenset()),
    "write_file": (frozenset({"path", "content"}), frozenset()),
    "list_dir": (frozenset(), frozenset({"path"})),
    "delete_file": (frozenset({"path"}), frozenset()),
    "run_command": (frozenset({"argv"}), frozenset({"timeout", "tool_type"})),
}


class Sandbox(SnapshotOps):
    """A workspace root plus a stated policy; see the module docstring (snapshots: :mod:`._snapshot_ops`)."""

    def __init__(self, root: str | os.PathLike[str], policy: SandboxPolicy | None = None,
                 snapshot_dir: str | os.PathLike[str] | None = None,
                 state_provider: StateProvider | None = None, snapshot_dir_new: bool = False) -> None:
        """``snapshot_dir_new``: ``snapshot_dir`` is a new name of the caller's, not made yet: it is made
        (and locked) when the first snapshot or blob is written, so a sandbox that keeps none makes no folder."""
        self.policy = policy if policy is not None else SandboxPolicy()
        self._boundary = Boundary(os.fspath(root), self.policy.path_resolution)
        self._finalizer = weakref.finalize(self, Boundary.close, self._boundary)
        self.root = self._boundary.real_root
        if snapshot_dir is None:
            snapshot_dir = tempfile.mkdtemp(prefix="harness-lab-snapshots-")
        snap = os.path.realpath(os.fspath(snapshot_dir))
        if snap == self.root or snap.startswith(self.root.rstrip("/") + "/"):
            self.close()
            raise SandboxEnvironmentError("snapshot_dir must lie outside the workspace the model can write")
        try:
            self._store = SnapshotStore(snap, unmade=snapshot_dir_new)
        except BaseException:
            self.close()
            raise
        self._store_finalizer = weakref.finalize(self, SnapshotStore.close, self._store)
        self._scanner = Scanner(self._boundary.root_fd, self._store.blobs,
                                journal=self.policy.change_tracking == "auto")
        self._journal_finalizer = weakref.finalize(self, Scanner.close, self._scanner)
        self._state_provider = state_provider
        self.last_auto_snapshot: SnapshotInfo | None = None
        try:
            iso = check_isolation(self.policy.isolation, os.geteuid())
            check_network_allow(self.policy.network_allow, iso)  # never the host network instead
        except SandboxEnvironmentError:
            self.close()
            raise
        self._allow = parse_allowlist(self.policy.network_allow)
        self._iso = iso
        if iso["kind"] == "none":  # no pid namespace: a command could read this process's environ
            hide_harness_process()
        self._uid = (self.policy.run_as_uid or sandbox_uid(self.root)) if os.geteuid() == 0 else None
        self.capabilities: dict[str, Any] = {
            "path_resolution": self._boundary.mechanism,
            "openat2": self._boundary.mechanism == "openat2",
            "isolation": iso["kind"],
            "network_namespace": iso["kind"] != "none",
            "pid_namespace": iso["kind"] != "none",
            "mount_namespace": iso["kind"] != "none",
            # bytes per private scratch tmpfs (/tmp, /var/tmp, /dev/shm, /run); None: unbounded or none
            "scratch_size_limit": self.policy.quotas.scratch_bytes if iso["scratch_sized"] else None,
            "uid_drop": self._uid,
            "process_limit": ("RLIMIT_NPROC under a dedicated unprivileged uid" if self._uid is not None
                              else "RLIMIT_NPROC per user (not root: approximate)"),
            "rlimits": ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC"],
            "network_allow": list(self.policy.network_allow),  # TCP host:port pairs reachable (netallow)
            "missing": list(iso["missing"]),
            "snapshot_dir": snap,
            "change_tracking": self._scanner.tracking,
        }

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Release the root directory descriptor, the journal and the snapshot_dir (also done when collected)."""
        if hasattr(self, "_journal_finalizer"):
            self._journal_finalizer()
        if hasattr(self, "_store_finalizer"):
            self._store_finalizer()
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tool calls ------------------------------------------------------------------------
    def call(self, tool: str, **args: Any) -> ToolResult:
        """Run one tool call under the policy; never raises for anything the caller passes."""
        if not isinstance(tool, str) or tool not in TOOLS:
            return ToolResult.failure(str(tool), f"unknown tool {tool!r}", f"use one of {sorted(TOOLS)}")
        if not self.policy.allows(tool):
            why = "read-only mode" if self.policy.mode == "read-only" else "policy allow-list"
            return ToolResult.failure(tool, f"{tool} is not allowed by the sandbox policy ({why})",
                                      f"allowed tools: {sorted(t for t in TOOLS if self.policy.allows(t))}",
                                      status="denied")
        required, optional = _ARGS[tool]
        missing, unknown = required - args.keys(), args.keys() - required - optional
        if missing or unknown:
            return ToolResult.failure(tool, f"bad arguments: missing {sorted(missing)}, unknown {sorted(unknown)}",
                                      f"{tool} takes {sorted(required)} and optionally {sorted(optional)}")
        try:
            return self._dispatch(tool, args)
        except Refusal as r:
            return ToolResult.failure(tool, r.reason, r.hint, status="denied" if r.status == "denied" else "error",
                                      retryable=r.hint == "retry the call")
        except OSError as exc:  # an unexpected filesystem error is still data, never a traceback
            return ToolResult.failure(tool, f"{tool} failed: {exc.strerror or exc.__class__.__name__}",
                                      "check the path and try a different approach")
        except (UnicodeError, ValueError) as exc:  # e.g. text with unpaired surrogates
            return ToolResult.failure(tool, f"invalid argument: {exc.__class__.__name__}",
                                      "pass plain UTF-8 text")

    def _dispatch(self, tool: str, args: dict[str, Any]) -> ToolResult:
        b = self._boundary
        if tool == "read_file":
            return fileops.read_file(b, args["path"], self.policy.quotas.output_bytes)
        if tool == "list_dir":
            return fileops.list_dir(b, args.get("path", "."), self.policy.quotas.output_bytes)
        if tool == "write_file":
            content = args["content"]
            if not isinstance(content, str):
                return ToolResult.failure(tool, "content must be a string", "pass content='text'")
            data = content.encode("utf-8", errors="surrogateescape")
            if len(data) > self.policy.quotas.file_size_bytes:
                return ToolResult.failure(tool, f"content is {len(data)} bytes, over the file size quota "
                                          f"of {self.policy.quotas.file_size_bytes}", "write a smaller file")
            target = fileops.inspect_target(b, args["path"], tool)
            if (refused := self._write_over_quota(target.names, len(data))) is not None:
                return refused
            auto = self._auto_snapshot(f"before write_file {target.path}") if target.exists else None
            if isinstance(auto, ToolResult):
                return auto
            try:
                result = fileops.write_file(b, target, data, self._owner())
            finally:  # even a failed write may have created parent directories
                self._scanner.mark_dirty("/".join(target.names))
            return _with_snapshot(result, auto)
        if tool == "delete_file":
            target = fileops.inspect_target(b, args["path"], tool)
            auto = self._auto_snapshot(f"before delete_file {target.path}")
            if isinstance(auto, ToolResult):
                return auto
            try:
                result = fileops.delete_file(b, target)
            finally:
                self._scanner.mark_dirty("/".join(target.names))
            return _with_snapshot(result, auto)
        return self._run_command(args)

    def _run_command(self, args: dict[str, Any]) -> ToolResult:
        tool = "run_command"
        argv = args["argv"]
        if (not isinstance(argv, (list, tuple)) or not argv
                or not all(isinstance(a, str) and a and "\x00" not in a for a in argv[:1])
                or not all(isinstance(a, str) and "\x00" not in a for a in argv)):
            return ToolResult.failure(tool, "argv must be a non-empty list of strings without NUL bytes",
                                      "pass argv=['ls', '-l']")
        tool_type = args.get("tool_type", "default")
        limit = self.policy.timeouts.get(tool_type) if isinstance(tool_type, str) else None
        if limit is None:
            return ToolResult.failure(tool, f"unknown tool_type {tool_type!r}",
                                      f"use one of {sorted(self.policy.timeouts)}")
        timeout = args.get("timeout")
        if timeout is None:  # absent or None (RunCommand's default): the tool type's limit
            timeout = limit
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            return ToolResult.failure(tool, "timeout must be a positive number of seconds", "pass timeout=10")
        # A caller may shorten the policy's limit, never extend it (compared before float(): 10**400 overflows).
        timeout = float(min(timeout, limit))
        read_only = self.policy.mode == "read-only"
        if read_only and self._iso["kind"] != "bwrap":
            return ToolResult.failure(tool, "read-only mode needs bubblewrap to mount the workspace read-only",
                                      "install bubblewrap, or use workspace-write mode", status="denied")
        auto = self._auto_snapshot(f"before run_command {' '.join(argv)[:200]}", take_ownership=not read_only)
        if isinstance(auto, ToolResult):
            return auto
        self._scanner.invalidate()  # the command may change anything: the next snapshot walks the tree
        result = run_command(list(argv), ws=self.root, timeout=timeout, quotas=self.policy.quotas,
                             iso=self._iso, network=False, read_only=read_only, uid=self._uid,
                             allow=self._allow)
        return _with_snapshot(self._command_over_quota(result, auto), auto)

    def _write_over_quota(self, names: tuple[str, ...], size: int) -> ToolResult | None:
        """A refusal when writing ``size`` bytes at ``names`` would take the workspace past its quota."""
        quota = self.policy.quotas.workspace_bytes
        total = self._scanner.file_bytes() + size  # as snapshot() sees it: with the journal, cost follows the change
        if total <= quota:
            return None
        with contextlib.suppress(Refusal, OSError):  # an overwrite replaces what is there
            fd, st = self._boundary.open_regular(names, "/".join(names))
            os.close(fd)
            total -= st.st_size
        if total <= quota:
            return None
        refused = ToolResult.failure("write_file", f"workspace_quota_exceeded: this write would bring the workspace "
                                     f"to {total} bytes, over its quota of {quota}; nothing was written",
                                     "delete files the task no longer needs, or write less")
        return refused.model_copy(update={"data": {"workspace_quota_exceeded": {"bytes": total, "quota": quota}}})

    def _command_over_quota(self, result: ToolResult, before: SnapshotInfo) -> ToolResult:
        """After a command: a workspace past its quota is put back as it was before the command (the
        snapshot ``before``), and the result is an error saying so. Files that are new or changed in size
        are removed first, so the rollback's walk never reads (nor stores) the excess; the rest is
        restored from ``before`` byte for byte."""
        quota = self.policy.quotas.workspace_bytes
        # The walk the next snapshot needs anyway, made now: it stats every entry, and hashes what is new
        # only once the total is known to fit (one walk, not a stat walk and then the snapshot's).
        if self._scanner.walk_within(quota) <= quota:
            return result
        sizes = file_sizes(self._boundary.root_fd)  # over: which files to take away before the rollback
        total = sum(sizes.values())
        was = self._entries(before.id)
        blobs = self._store.blobs
        removed = 0
        for path, size in sizes.items():
            entry = was.get(path)
            if entry is None or entry[0] != "f" or os.stat(blobs.path(entry[1])).st_size != size:
                removed += _unlink(self._boundary.root_fd, path)
        self.rollback(before.id)
        data = {**result.data, "workspace_quota_exceeded": {"bytes": total, "quota": quota,
                                                            "rolled_back_to": before.id, "removed": removed}}
        return result.model_copy(update={
            "status": "error", "data": data, "retryable": False,
            "reason": f"workspace_quota_exceeded: the command left {total} bytes in the workspace, over its quota "
                      f"of {quota}; its changes were rolled back to snapshot {before.id}",
            "hint": "write less, or delete files the task no longer needs before making new ones"})

    def _auto_snapshot(self, trigger: str, take_ownership: bool = False) -> SnapshotInfo | ToolResult:
        tool = trigger.split()[1]
        # Before a command the walk also hands the tree to the sandbox uid, so files that appeared
        # behind the sandbox's back (owned by root) are writable by the command too.
        owner = self._owner() if take_ownership else None
        try:
            if owner is not None:
                os.fchown(self._boundary.root_fd, owner[0], owner[1])
            info = self._take("auto", trigger, owner)
        except (OSError, SandboxEnvironmentError) as exc:
            return ToolResult.failure(tool, f"the snapshot before this irreversible call failed ({exc}); "
                                      "the call was not executed", "retry later or report the problem",
                                      retryable=True)
        self.last_auto_snapshot = info
        return info

    def read_bytes(self, path: str, limit: int | None = None) -> bytes | None:
        """The bytes of a regular file in the workspace, resolved like the file tools (no link in any
        component, no special or hard-linked file); None when it is missing or refused. The validator
        reads the artifact through this, so it sees exactly what the file tools would. With ``limit``,
        at most that many bytes are read (a caller passes its own limit + 1 to tell 'too large')."""
        try:
            fd, _ = self._boundary.open_regular(self._boundary.parts(path), path)
        except (Refusal, OSError):
            return None
        try:
            chunks, size = [], 0
            while (limit is None or size < limit) and (chunk := os.read(fd, 1 << 16 if limit is None else min(1 << 16, limit - size))):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def file_sha256(self, path: str) -> str | None:
        """The sha256 of a regular file in the workspace, opened as :meth:`read_bytes` does (no link,
        no FIFO or device, non-blocking) and hashed as it streams, so a huge file costs no memory;
        None when it is missing or refused. The checkpoint and resume hash artifacts through this: a
        command may have left a FIFO, a link to /dev/zero or to a secret where the report was."""
        try:
            fd, _ = self._boundary.open_regular(self._boundary.parts(path), path)
        except (Refusal, OSError):
            return None
        digest = hashlib.sha256()
        try:
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        return digest.hexdigest()

    def note_written(self, path: str, st: os.stat_result, digest: str, data: bytes, written_at: int) -> None:
        """``path`` was just created in this (new, empty) workspace by the caller with ``data``, whose sha256
        ``digest`` it checked (a fork's files, from the store), ``st`` its descriptor's stat after the write,
        ``written_at`` (``time.time_ns()``) taken before it. The next scan takes the hash from here while the
        file's stat key is unchanged, instead of reading every file back (see :meth:`Scanner.prime
        <harness_lab.sandbox.scan.Scanner.prime>`); the bytes go to the snapshot store (held, see
        :meth:`hold_blobs`), as the scan would have put them."""
        self._store.blobs.put_bytes(data, digest)
        self._scanner.prime(path, st, digest, written_at)

    def workspace_hash(self, *, rescan: bool = False) -> str:
        """sha256-based hash of the current workspace manifest (path, kind, content hash, mode).

        Proven, not remembered: with the change journal it costs the paths written since the last
        scan (an outside write is among them); without one, or with ``rescan``, a full walk.
        """
        self._scanner.scan(full=rescan or not self._scanner.journaled)
        return self._scanner.workspace_hash()

    def manifest(self) -> Manifest:
        """The current workspace manifest, path -> (kind, content hash, mode): what workspace_hash hashes."""
        return dict(self._scanner.current())


def _unlink(root_fd: int, path: str) -> int:
    """Remove one file beneath ``root_fd`` (directories opened without following links); 1 if removed."""
    *dirs, name = path.split("/")
    try:
        dfd = open_dirs(root_fd, dirs)
    except OSError:
        return 0
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        return 0
    finally:
        os.close(dfd)
    return 1


def _with_snapshot(result: ToolResult, auto: SnapshotInfo | None) -> ToolResult:
    if auto is None:
        return result
    return result.model_copy(update={"data": {**result.data, "snapshot_before": auto.id}})
