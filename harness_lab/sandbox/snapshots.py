"""Content-addressed snapshots: records, the on-disk store, diff and rollback.

Layout of a snapshot directory (kept outside the workspace, so the model cannot edit it)::

    blobs/<sha[:2]>/<sha[2:]>     file contents, written once
    manifests/<id>.json           one per snapshot: info + either the full entry table or a delta
                                  against its parent (``base``, ``set``, ``drop``)

Deltas keep the cost of a snapshot proportional to what changed, not to the size of the tree; a
full table is written every ``_FULL_EVERY`` snapshots so no chain gets long. One live store at
a time uses a directory (it holds a flock on it; see ``_claim``).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness_lab.errors import SandboxEnvironmentError
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.mhash import hex_sum as _hex
from harness_lab.sandbox.mhash import line_hash as _line
from harness_lab.sandbox.mhash import manifest_hash
from harness_lab.sandbox.scan import Entry, Manifest

__all__ = ["SnapshotDiff", "SnapshotInfo", "SnapshotStore", "diff_manifests", "manifest_hash"]

_FULL_EVERY = 32


class SnapshotInfo(BaseModel):
    """One snapshot: which workspace files and which run state it holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    label: str
    created_seq: int
    files: int
    run_state: dict[str, Any] | None = None
    trigger: str | None = None  # e.g. "before delete_file notes/a.txt"; None for manual snapshots
    workspace_hash: str
    created_at: float
    hashed: int = 0  # files read to take this snapshot (the rest came from the stat cache)


class SnapshotDiff(BaseModel):
    """Paths that differ from snapshot ``a`` to snapshot ``b`` (directories carry a trailing '/')."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    a: str
    b: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]


def _display(path: str, entry: Entry) -> str:
    return path + "/" if entry[0] == "d" else path


def diff_manifests(a_id: str, a: Manifest, b_id: str, b: Manifest) -> SnapshotDiff:
    added = sorted(_display(p, e) for p, e in b.items() if p not in a)
    removed = sorted(_display(p, e) for p, e in a.items() if p not in b)
    changed = sorted(_display(p, b[p]) for p in a.keys() & b.keys() if a[p] != b[p])
    return SnapshotDiff(a=a_id, b=b_id, added=tuple(added), removed=tuple(removed), changed=tuple(changed))


def _claim(directory: str) -> int:
    """Lock ``directory`` for one store; a clear error when another live store holds it.

    Two live stores in one directory would number from the same ``snap-0001`` and overwrite each
    other's manifests, so a rollback could restore the other workspace's files. Refusing the
    second (rather than interleaving ids) is what a user expects: ``snapshots()`` and ``diff`` of
    one sandbox would otherwise list the other's snapshots of another tree. Reopening a directory
    whose sandbox is gone stays allowed (a store persists). flock on the directory itself, not a
    pid file: the kernel drops the lock when its holder closes it or dies (nothing stale after a
    killed harness), and nothing is written until the first snapshot.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxEnvironmentError(f"snapshot_dir {directory!r} cannot be opened: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise SandboxEnvironmentError(
                f"snapshot_dir {directory!r} is in use by another live sandbox (process {holder}); "
                "give each sandbox its own snapshot_dir") from None
        raise SandboxEnvironmentError(f"snapshot_dir {directory!r} cannot be locked: {exc.strerror}") from exc
    return fd


def _holder(fd: int) -> str:
    """The pid holding the flock on ``fd``'s inode, from /proc/locks (only for the error message)."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                f = line.split()
                if len(f) > 5 and f[1] == "FLOCK" and f[5] == key:
                    return f[4]
    except OSError:
        pass
    return "unknown"


class SnapshotStore:
    """Manifests and blobs of one workspace's snapshots; holds its directory's lock until closed."""

    def __init__(self, directory: str, *, unmade: bool = False) -> None:
        """``unmade``: ``directory`` does not exist yet and its name is this store's alone (a new random
        name): it is made (mode 0o700, failing if anything is there by then) and claimed when first
        written to, so a run that takes no snapshot makes no folder (a fork, most runs with a store)."""
        self.directory = os.path.abspath(directory)
        self.blobs = BlobStore(os.path.join(self.directory, "blobs"), before_make=self._make)
        self._mdir = os.path.join(self.directory, "manifests")  # made by the first save
        self._unmade = unmade
        self._lock_fd: int | None = None
        self._infos: dict[str, SnapshotInfo] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._cache: OrderedDict[str, Manifest] = OrderedDict()
        # The previous snapshot of this store: id, entries, chain depth, file count, hash sum.
        self._last: tuple[str, Manifest, int, int, int] | None = None
        # Snapshots saved by this object, in order, each with the paths it changed from the one
        # before (None: unknown). Their union bounds what differs between a snapshot and the last.
        self._order: list[str] = []
        self._deltas: dict[str, frozenset[str] | None] = {}
        if unmade:
            return  # nothing saved there yet: nothing to list
        if not os.path.isdir(self.directory):  # usually made already (mkdtemp): a stat, not a failing mkdir
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._lock_fd = _claim(self.directory)
        try:
            names = sorted(os.listdir(self._mdir))
        except FileNotFoundError:
            names = []  # nothing saved here yet
        try:
            for name in names:
                if name.endswith(".json"):
                    self._load_meta(name[:-5])
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        """Make and claim an ``unmade`` directory, before the first thing is written in it."""
        if not self._unmade:
            return
        try:
            os.mkdir(self.directory, mode=0o700)  # not exist_ok: a name taken meanwhile is not ours
        except OSError as exc:
            raise SandboxEnvironmentError(f"snapshot_dir {self.directory!r} cannot be made: {exc.strerror}") from exc
        self._lock_fd = _claim(self.directory)
        self._unmade = False

    def close(self) -> None:
        """Release the directory for another store (also when this process dies)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _load_meta(self, snap_id: str) -> dict[str, Any]:
        if snap_id not in self._meta:
            try:
                with open(os.path.join(self._mdir, snap_id + ".json"), encoding="utf-8") as fh:
                    doc: dict[str, Any] = json.load(fh)
            except (OSError, ValueError) as exc:
                raise SandboxEnvironmentError(f"snapshot manifest {snap_id} is unreadable: {exc}") from exc
            self._meta[snap_id] = doc
            self._infos[snap_id] = SnapshotInfo.model_validate(doc["info"])
        return self._meta[snap_id]

    def infos(self) -> list[SnapshotInfo]:
        return sorted(self._infos.values(), key=lambda i: i.created_seq)

    def info(self, snap_id: str) -> SnapshotInfo | None:
        return self._infos.get(snap_id)

    def entries(self, snap_id: str) -> Manifest:
        if snap_id in self._cache:
            self._cache.move_to_end(snap_id)
            return self._cache[snap_id]
        doc = self._load_meta(snap_id)
        if "entries" in doc:
            entries: Manifest = {p: (e[0], e[1], e[2]) for p, e in doc["entries"].items()}
        else:
            entries = dict(self.entries(doc["base"]))
            for p in doc["drop"]:
                entries.pop(p, None)
            entries.update({p: (e[0], e[1], e[2]) for p, e in doc["set"].items()})
        self._cache[snap_id] = entries
        if len(self._cache) > 8:
            self._cache.popitem(last=False)
        return entries

    def save(self, entries: Manifest, label: str, trigger: str | None, run_state: dict[str, Any] | None,
             hashed: int = 0, changed: set[str] | None = None) -> SnapshotInfo:
        """Store a snapshot. ``changed``: the paths that may differ from the previous snapshot taken
        by this store (``None``: unknown); with it the cost follows the change, not the tree."""
        seq = max((i.created_seq for i in self._infos.values()), default=0) + 1
        snap_id = f"snap-{seq:04d}"
        delta: tuple[str, dict[str, Entry], list[str]] | None = None
        if self._last is not None and changed is None:
            # Unknown change set (a full walk happened): find it by comparing with the parent,
            # which costs a dict lookup per entry but no hashing.
            base = self._last[1]
            changed = {p for p, e in entries.items() if base.get(p) != e}
            changed.update(base.keys() - entries.keys())
        if self._last is not None and changed is not None:
            base_id, base, depth, files, total = self._last
            kept = dict(base)
            upd: dict[str, Entry] = {}
            drop: list[str] = []
            for p in changed:
                new_e = entries.get(p)
                new_e = None if new_e is None or new_e[0] == "s" else new_e
                old_e = base.get(p)
                if new_e == old_e:
                    continue
                if old_e is not None:
                    total -= _line(p, old_e)
                    files -= old_e[0] != "d"
                    del kept[p]
                    if new_e is None:
                        drop.append(p)
                if new_e is not None:
                    total += _line(p, new_e)
                    files += new_e[0] != "d"
                    kept[p] = upd[p] = new_e
            delta = (base_id, upd, drop)
            self._deltas[snap_id] = frozenset(upd).union(drop)
        else:
            kept = {p: e for p, e in entries.items() if e[0] != "s"}
            files = sum(1 for e in kept.values() if e[0] != "d")
            total = sum(_line(p, e) for p, e in kept.items())
            depth = _FULL_EVERY
        info = SnapshotInfo(id=snap_id, label=label, created_seq=seq, files=files, run_state=run_state,
                            trigger=trigger, workspace_hash=_hex(total), created_at=time.time(), hashed=hashed)
        doc: dict[str, Any] = {"info": info.model_dump(mode="json")}
        if delta is not None and depth < _FULL_EVERY:
            doc["base"], doc["set"], doc["drop"] = delta
            depth += 1
        else:
            doc["entries"] = kept
            depth = 0
        path = os.path.join(self._mdir, snap_id + ".json")
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            if not self._order:
                self._make()
                os.makedirs(self._mdir, mode=0o700, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(doc, separators=(",", ":")))  # dumps: the C encoder (dump streams in Python)
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError) as exc:
            raise SandboxEnvironmentError(f"cannot write snapshot {snap_id}: {exc}") from exc
        self._meta[snap_id] = doc
        self._infos[snap_id] = info
        self._cache[snap_id] = kept
        self._last = (snap_id, kept, depth, files, total)
        self._order.append(snap_id)
        self._deltas.setdefault(snap_id, None)
        return info

    def changed_since(self, snap_id: str) -> set[str] | None:
        """Paths that may differ between ``snap_id`` and the last snapshot saved (``None``: unknown,
        e.g. ``snap_id`` was saved by another process); cost: the deltas in between."""
        try:
            at = self._order.index(snap_id)
        except ValueError:
            return None
        out: set[str] = set()
        for later in self._order[at + 1:]:
            delta = self._deltas[later]
            if delta is None:
                return None
            out |= delta
        return out
