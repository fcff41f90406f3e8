"""Walking the workspace into a manifest, hashing only what changed (a stat cache).

A manifest maps a relative path to an entry tuple:

* ``("f", sha256_hex, mode)`` a regular file, content in the blob store;
* ``("l", target, 0)``        a symbolic link (never followed, its text is the content);
* ``("d", "", mode)``         a directory;
* ``("s", "", 0)``            a FIFO, socket or device: listed so rollback can remove it, never read
  and never stored in a snapshot.

How a directory is read and when a file is hashed again (stat key, racily clean): :mod:`._walk`.
"""

from __future__ import annotations

import os
import time

from harness_lab.sandbox._dirs import ancestors as _ancestors
from harness_lab.sandbox._dirs import open_dirs as _open_dirs
from harness_lab.sandbox._walk import _RACY_NS, Entry, Manifest, TreeWalk, WalkPass, _key
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.journal import Journal, open_journal
from harness_lab.sandbox.mhash import hex_sum, line_hash

__all__ = ["Entry", "Manifest", "Scanner"]


class Scanner(TreeWalk):
    """Produces manifests of one workspace; remembers hashes between scans.

    Two ways to bring the manifest up to date. A *full* walk stats every entry (hashing only
    those whose stat key changed). An *incremental* refresh re-examines only the paths the
    sandbox's own file tools touched and, with a journal, the paths the journal reports; it is
    used only while the manifest is known to be complete, i.e. after a full walk and before
    anything the journal cannot see could have changed the tree (:meth:`invalidate` is called
    around every ``run_command``; an overflowing journal forces a walk).
    """

    def __init__(self, root_fd: int, blobs: BlobStore, journal: bool = False) -> None:
        self.root_fd = root_fd
        self.blobs = blobs
        self._cache = {}  # path -> (stat key, sha256 hex): see TreeWalk
        self._sizes = {}
        self._dirty: set[str] = set()
        self._fresh: set[str] = set()  # directories the journal saw appear: walk them whole
        # The last manifest, updated in place by every scan (a walk changes only the entries that
        # differ, so the hash sum and the change set follow the change, not the tree); _proven:
        # whether it is known to be current (False: the next scan walks).
        self._manifest: Manifest = {}
        self._proven = False
        # Paths whose entries changed since take_changes(); None: unknown (a full walk happened).
        self._changed: set[str] | None = None
        self._memo: dict[str, tuple[Entry, int]] = {}  # path -> (entry, its term of the hash sum)
        self._specials: set[str] = set()  # FIFOs, sockets, devices: in the manifest, never in a snapshot
        self._sum = 0
        self._hex: tuple[int, str] | None = None  # the last sum spelled, with its spelling
        self.hashed_last = 0  # files actually read by the last scan (the benchmark reports it)
        self.full_last = False  # whether the last scan walked the whole tree
        self.examined_last = 0  # entries the last walk looked at one by one (the rest: directories taken whole)
        self._journal: Journal | None = None
        self._journal_no = 0  # which journal the directory records' file watches belong to
        self._records = {}
        # Files this process wrote itself, path -> when (see prime): their hash is taken from the writer once.
        self._primed: dict[str, int] = {}
        self._pending: list[str] | None = None  # the files a walk within a quota has yet to hash (see scan)
        self._within = 0  # the total the last walk_within found
        self.tracking = "walk (no change journal requested)"
        if journal:
            self._open_journal()

    def _open_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self._journal_no += 1
        opened = open_journal()
        self._journal = opened if isinstance(opened, Journal) else None
        self.tracking = "inotify" if isinstance(opened, Journal) else f"walk ({opened})"
        self._proven = False  # a new journal has no watches yet: the next scan walks and adds them

    @property
    def journaled(self) -> bool:
        """True when outside writes reach incremental scans (the manifest is proven by the journal)."""
        return self._journal is not None

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def workspace_hash(self) -> str:
        """The hash of the manifest of the last scan (see :mod:`.mhash`)."""
        # Asked every step, and most steps change nothing: spell a sum once (~0.25 µs).
        if self._hex is None or self._hex[0] != self._sum:
            self._hex = (self._sum, hex_sum(self._sum))
        return self._hex[1]

    def invalidate(self) -> None:
        """Something other than the sandbox's file tools may have changed the tree."""
        self._proven = False

    def mark_dirty(self, path: str) -> None:
        """A sandbox tool changed ``path`` (and maybe created its parents): look at them again."""
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            self._dirty.add("/".join(parts[:i]))

    def note_content(self, path: str, st: os.stat_result, digest: str) -> None:
        """Record a hash computed elsewhere (e.g. rollback just wrote these bytes)."""
        self._remember(path, st, digest, time.time_ns())
        self._sizes[path] = st.st_size

    def prime(self, path: str, st: os.stat_result, digest: str, written_at: int) -> None:
        """``path`` was just written by this process with bytes of sha256 ``digest``, its stat ``st`` taken
        from the written descriptor (a fork's files, from the store): the next full walk takes that hash
        while the file's stat key is still ``st``'s, instead of reading the file back. Past that walk the
        racily-clean rule applies as to any file (see :meth:`_unprime`)."""
        self._cache[path] = (_key(st), digest)
        self._sizes[path] = st.st_size
        self._primed[path] = written_at

    def _unprime(self) -> None:
        """After the walk that used them: a primed hash whose file was written within a clock tick of now
        is proven again by the next walk (as _remember does), and its directory's record goes with it."""
        for path, written_at in self._primed.items():
            hit = self._cache.get(path)
            if hit is not None and written_at - max(hit[0][1], hit[0][2]) <= _RACY_NS:
                del self._cache[path]
                self._records.pop(path.rpartition("/")[0], None)
        self._primed.clear()

    def file_bytes(self) -> int:
        """The total size of the workspace's regular files, from a scan as :meth:`snapshot
        <harness_lab.sandbox.Sandbox.snapshot>` makes it (with the journal: what changed since the last scan)."""
        return self._total(self.scan())

    def settle(self, changes: dict[str, Entry | None]) -> None:
        """Rollback just set these paths (``None``: removed) from the last scan's manifest."""
        for path, entry in changes.items():
            if entry is None:
                self._manifest.pop(path, None)
            else:
                self._manifest[path] = entry
        self._account(changes)

    def lose_changes(self) -> None:
        """A snapshot that consumed take_changes() was not stored: the next one must diff in full."""
        self._changed = None

    def since_last_save(self) -> set[str] | None:
        """Paths where the last scan's manifest may differ from the last snapshot stored from it."""
        return None if self._changed is None else self._changed | self._specials

    def take_changes(self) -> set[str] | None:
        """Paths that may have changed since the last call (``None``: anything may have)."""
        changed, self._changed = self._changed, set()
        return changed

    def current(self) -> Manifest:
        """The current manifest, proven: from the journal when there is one, else by a full walk."""
        return self.scan(full=self._journal is None)

    def _pull(self) -> bool:
        """Fold the journal's events into the dirty set; False when it lost track."""
        assert self._journal is not None
        got = self._journal.drain()
        if got.lost:
            return False
        self._dirty |= got.paths
        self._fresh |= got.fresh_dirs
        return True

    def walk_within(self, quota: int) -> int:
        """A full walk (as :meth:`scan` makes after a command) that reads no new content unless the workspace
        fits ``quota``: the total size of its regular files, from the sizes the walk stats. Within it, the walk
        is done (the next scan follows the journal); past it, nothing new or changed was read or stored and the
        next scan walks again (``Quotas.workspace_bytes``: the sandbox undoes the command first)."""
        self.scan(full=True, within=quota)
        return self._within

    def scan(self, owner: tuple[int, int] | None = None, full: bool = False, within: int | None = None) -> Manifest:
        """The current manifest (do not mutate it). ``owner``: chown entries (see command.py); ``within``:
        see :meth:`walk_within`."""
        self.hashed_last = 0
        full = full or owner is not None or not self._proven
        last = self._manifest
        if not full and not self._dirty and self._journal is not None and self._journal.quiet():
            self.full_last = False  # nothing written since the last scan, proven by the journal
            return last
        if not full and self._journal is not None and not self._pull():
            full = True
        if not full:
            self.full_last = False
            walked: set[str] = set()  # new directories walked whole: skip what lies beneath them
            touched: set[str] = set()
            for rel in sorted(self._dirty, key=lambda p: p.count("/")):
                if not any(a in walked for a in _ancestors(rel)):
                    self._refresh(rel, last, walked, touched)
            self._dirty.clear()
            self._fresh.clear()
            self._account({p: last.get(p) for p in touched})
            return last
        if self._journal is not None:
            if self._journal.lost:
                self._open_journal()  # start over: every watch is added again by the walk
            else:
                self._journal.drain()  # the walk sees all of it; keep only the watch bookkeeping
        # The walk updates the last manifest in place and notes what differs: an unchanged file costs
        # one fstatat and a compare, and the hash sum, the change set and the snapshot's delta follow
        # the change, not the tree.
        self._proven = False
        journal = self._journal
        walk = WalkPass(records={}, dirty_dirs=frozenset(p.rpartition("/")[0] for p in self._dirty),
                        stamp=(self._journal_no, journal.unbound if journal is not None else 0))
        changes = walk.changes
        stack: list[tuple[int, str]] = [(os.dup(self.root_fd), "")]
        # Within a quota, a file to hash is only noted by the walk (entry without a hash, see _digest), and
        # hashed once the total is known to fit: the stat walk and the snapshot's walk are one walk.
        pending: list[str] | None = [] if within is not None else None
        self._pending = pending
        proven = True
        try:
            while stack:
                dfd, prefix = stack.pop()
                try:
                    self._scan_dir(dfd, prefix, last, stack, owner, walk)
                finally:
                    os.close(dfd)
            if walk.met() != len(last):  # some entry was not met: gone (or not readable any more)
                for gone in last.keys() - walk.met_paths():
                    del last[gone]
                    changes[gone] = None
                    self._cache.pop(gone, None)
                    self._sizes.pop(gone, None)
            if pending is not None:
                self._pending = None
                assert within is not None
                self._within = self._total(last)
                if self._within > within:
                    for rel in pending:  # not read: out of the manifest until a walk finds them again
                        del last[rel]
                        changes[rel] = None
                        self._sizes.pop(rel, None)
                    return last
                proven = self._hash_pending(pending, last, changes)
        finally:
            self._pending = None
            for dfd, _ in stack:
                os.close(dfd)
            self._account(changes)  # also after a failed walk: the sum and change set match the manifest
        assert walk.records is not None
        self._records.update(walk.records)  # after _account: these hold the entries as they are now
        if self._primed:
            self._unprime()
        self.examined_last = len(walk.seen)
        self._dirty.clear()
        self._fresh.clear()
        self._proven = proven
        self.full_last = True
        return last

    def _hash_pending(self, pending: list[str], last: Manifest, changes: dict[str, Entry | None]) -> bool:
        """The files a walk within a quota left unhashed, hashed now that the total fits; False when one
        became a directory since (its entries were not walked: the next scan walks)."""
        proven = True
        for rel in pending:
            *dirs, name = rel.split("/")
            entry: Entry | None = None
            try:
                dfd = _open_dirs(self.root_fd, dirs)
            except OSError:
                dfd = -1  # its directory is gone since: so is the file
            if dfd >= 0:
                try:
                    entry = self._entry(dfd, name, rel, os.stat(name, dir_fd=dfd, follow_symlinks=False))
                except OSError:
                    entry = None
                finally:
                    os.close(dfd)
            if entry is not None and entry[0] == "d":
                proven = False
            if entry is None:  # gone since the walk met it
                last.pop(rel, None)
                self._sizes.pop(rel, None)
            changes[rel] = entry
            if entry is not None:
                last[rel] = entry
        return proven

    def _total(self, manifest: Manifest) -> int:
        """The total size of the regular files of ``manifest``, as the scans that made it saw them."""
        sizes, blobs = self._sizes, self.blobs
        total = 0
        for path, entry in manifest.items():
            if entry[0] == "f":
                size = sizes.get(path)
                total += size if size is not None else os.stat(blobs.path(entry[1])).st_size
        return total

    def _account(self, changes: dict[str, Entry | None]) -> None:
        memo, records = self._memo, self._records
        if self._changed is not None:
            self._changed.update(changes)
        for path, entry in changes.items():
            if records:  # the next walk looks at these directories entry by entry
                records.pop(path.rpartition("/")[0], None)
                records.pop(path, None)
            if entry is not None and entry[0] == "s":
                self._specials.add(path)
            else:
                self._specials.discard(path)
            old = memo.pop(path, None)
            if old is not None:
                self._sum -= old[1]
            if entry is not None and entry[0] != "s":
                line = old[1] if old is not None and old[0] == entry else line_hash(path, entry)
                memo[path] = (entry, line)
                self._sum += line
