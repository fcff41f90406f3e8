"""The snapshot half of :class:`~harness_lab.sandbox.Sandbox`: take, list, diff, roll back,
materialize and share blobs. ``Sandbox`` inherits this and supplies the attributes declared here
(read :mod:`harness_lab.sandbox.sandbox` first).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from harness_lab.errors import SandboxEnvironmentError
from harness_lab.sandbox.boundary import Boundary
from harness_lab.sandbox.restore import apply_manifest
from harness_lab.sandbox.scan import Manifest, Scanner
from harness_lab.sandbox.snapshots import SnapshotDiff, SnapshotInfo, SnapshotStore, diff_manifests

__all__ = ["SnapshotOps"]


class SnapshotOps:
    """Snapshots of one sandbox's workspace, with the run state ``_state_provider`` returns."""

    root: str
    _boundary: Boundary
    _scanner: Scanner
    _store: SnapshotStore
    _state_provider: Callable[[], dict[str, Any]] | None
    _uid: int | None
    manifest: Callable[[], Manifest]  # Sandbox.manifest (declared, not imported: sandbox.py imports this module)

    def _owner(self) -> tuple[int, int] | None:
        return (self._uid, self._uid) if self._uid is not None else None

    def _take(self, label: str, trigger: str | None, owner: tuple[int, int] | None = None,
              full: bool = False) -> SnapshotInfo:
        entries = self._scanner.scan(owner, full=full)
        state = self._state_provider() if self._state_provider is not None else None
        try:
            return self._store.save(entries, label, trigger, state, self._scanner.hashed_last,
                                    self._scanner.take_changes())
        except BaseException:
            self._scanner.lose_changes()
            raise

    def snapshot(self, label: str = "manual", *, rescan: bool = False) -> SnapshotInfo:
        """Take a snapshot of the workspace (and the run state) now.

        Looks only at the paths written since the last scan (by the sandbox's tools and, with the
        change journal, by anyone); walks the tree in full (stat cache: only changed files are
        read) on the first snapshot, after every ``run_command`` and when ``rescan`` is true.
        Without a journal, pass ``rescan=True`` when something outside the sandbox may have
        written to the workspace.
        """
        return self._take(label, None, full=rescan)

    def snapshots(self) -> list[SnapshotInfo]:
        """All snapshots of this store, oldest first."""
        return self._store.infos()

    def _entries(self, snap_id: str) -> Manifest:
        if self._store.info(snap_id) is None:
            raise KeyError(f"unknown snapshot {snap_id!r}; known: {[i.id for i in self._store.infos()]}")
        return self._store.entries(snap_id)

    def diff(self, a_id: str, b_id: str) -> SnapshotDiff:
        """Paths added, removed and changed from snapshot ``a_id`` to ``b_id``."""
        return diff_manifests(a_id, self._entries(a_id), b_id, self._entries(b_id))

    def rollback(self, snapshot_id: str) -> SnapshotInfo:
        """Restore the workspace to ``snapshot_id`` byte for byte; the caller restores ``run_state``."""
        target = self._entries(snapshot_id)
        apply_manifest(self._boundary.root_fd, self._scanner, self._store.blobs, target, self._owner(),
                       since=self._store.changed_since(snapshot_id))
        info = self._store.info(snapshot_id)
        assert info is not None
        return info

    def materialize(self, snapshot_id: str, dest: str | os.PathLike[str]) -> SnapshotInfo:
        """Write snapshot ``snapshot_id`` into ``dest`` (new or empty), e.g. to fork a run from it.

        The returned info carries the snapshot's ``run_state`` for the forked run; this sandbox's
        workspace is not touched.
        """
        target = self._entries(snapshot_id)
        path = os.fspath(dest)
        real = os.path.realpath(path)
        if real == self.root or real.startswith(self.root.rstrip("/") + "/"):
            raise SandboxEnvironmentError("cannot materialize a snapshot inside the workspace it came from")
        os.makedirs(path, exist_ok=True)
        if os.listdir(path):
            raise SandboxEnvironmentError(f"cannot materialize into {path!r}: it is not empty")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            apply_manifest(fd, Scanner(fd, self._store.blobs), self._store.blobs, target, None)
        finally:
            os.close(fd)
        info = self._store.info(snapshot_id)
        assert info is not None
        return info

    def hold_blobs(self, limit: int, share: SnapshotOps | None = None) -> None:
        """Keep the contents the next scans store in memory, up to ``limit`` bytes in all (0: stop), each
        written to the snapshot store only when a rollback, a materialize or another store needs it;
        past the budget, linked from ``share``'s store when it holds them (see :meth:`adopt_blobs`).
        For a fork: its first scan reads (and proves) every file it was just given, but need not store
        them all again. The scan still reads and hashes every file: nothing is taken on trust."""
        self._store.blobs.hold(limit, share._store.blobs if share is not None else None)

    def adopt_blobs(self, source: SnapshotOps, snapshot_id: str | None = None) -> int:
        """Share the stored contents of ``source``'s files (its current manifest, or snapshot
        ``snapshot_id``) with this sandbox's snapshot store, e.g. after copying its workspace here
        for a fork. The next scan still reads and hashes every file here (nothing is taken on
        trust); a file whose hash is among these is just not stored a second time. Returns how
        many blobs are shared; stops at the first one that cannot be linked."""
        entries = source.manifest() if snapshot_id is None else source._entries(snapshot_id)
        mine, theirs = self._store.blobs, source._store.blobs
        shared = 0
        for digest in {e[1] for e in entries.values() if e[0] == "f"}:
            if not mine.adopt(digest, theirs):
                break
            shared += 1
        return shared
