"""The workspace's files beside the store rows, so that any step's files can be read back and forked
from without a snapshot: a row of a step that changed the workspace carries a manifest (each file's
sha256; the whole list every ``FULL_EVERY`` such rows, otherwise only what changed since the row
before) and the bytes of the files new to the run (:class:`~harness_lab.store.StepFiles`). A step that
changed nothing (the same workspace hash as the last row) costs one comparison.

Only regular files are kept (a directory is implied by its files; a symbolic link is refused by the
file tools anyway); their bytes are exact (the artifact itself), read through the sandbox's boundary,
so nothing outside the workspace is ever read. :func:`files_at` folds the rows back: at most
``FULL_EVERY`` of them, whatever the history's length.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from ..errors import RunStateError
from ..store import StepFiles, Store
from ..store.fold import loads
from .records import FileChange

if TYPE_CHECKING:
    from pathlib import Path

    from ..sandbox import Sandbox

__all__ = ["FULL_EVERY", "WITHHELD", "FileRows", "file_changes", "files_at", "restore_files", "write_files", "write_new"]

WITHHELD = "withheld when they hold a secret the contract's redaction rules catch"
FULL_EVERY = 16  # manifest rows between whole manifests: a read folds at most this many
_DIFF_LIMIT = 1 << 20  # a unified diff only for UTF-8 text under 1 MiB
_KNOWN = 4096  # sha256s remembered as already stored (bytes not read again); past this, forgotten


class FileRows:
    """What a checkpointer needs to write the files of each step that changed the workspace."""

    def __init__(self, stored: Iterable[str] = ()) -> None:
        """``stored``: sha256s whose bytes the store holds already (a fork's files, written from it)."""
        self._hash: str | None = None  # the workspace hash of the last row written with files
        self._files: dict[str, str] | None = None  # that row's files: path -> sha256
        self._base = -1
        self._since = 0  # change rows since the whole one
        self._stored: set[str] = set(stored)
        self._taken: tuple[str | None, dict[str, str], int, int] | None = None

    def take(self, step: int, workspace_hash: str | None, sandbox: Sandbox,
             clean: Callable[[str], bool]) -> StepFiles | None:
        """The files of the row of ``step`` (None: the workspace is as the last row left it). Nothing of
        this object changes until :meth:`written` says the row landed. A file whose text ``clean`` (the
        contract's redaction rules) finds a secret in is listed, its bytes withheld: the store never
        holds a secret, and the bytes are never altered either."""
        if workspace_hash is None or workspace_hash == self._hash:
            return None
        files: dict[str, str] = {}
        data: list[tuple[str, bytes]] = []
        before = self._files or {}
        for path, entry in sandbox.manifest().items():
            if entry[0] != "f":
                continue
            if entry[1] in self._stored:
                files[path] = entry[1]  # the scan's sha256 of bytes the store holds already: not read again
                continue
            raw = sandbox.read_bytes(path)
            if raw is None:  # gone or refused since the scan: not a file the step left
                continue
            sha = hashlib.sha256(raw).hexdigest()
            files[path] = sha
            if sha not in self._stored and clean(raw.decode("utf-8", "surrogateescape")):
                data.append((sha, raw))
        manifest: dict[str, str | None]
        whole = self._files is None or self._since + 1 >= FULL_EVERY
        if whole:
            manifest, base, since = dict(sorted(files.items())), step, 0
        else:
            delta: dict[str, str | None] = {p: s for p, s in files.items() if before.get(p) != s}
            delta.update({p: None for p in before if p not in files})
            manifest, base, since = dict(sorted(delta.items())), self._base, self._since + 1
        self._taken = (workspace_hash, files, base, since)
        return StepFiles(base, json.dumps(manifest, separators=(",", ":")), data)

    def written(self, files: StepFiles | None) -> None:
        """The row holding ``files`` (from :meth:`take`) committed."""
        if files is None or self._taken is None:
            return
        self._hash, self._files, self._base, self._since = self._taken
        self._taken = None
        if len(self._stored) > _KNOWN:
            self._stored.clear()
        self._stored.update(sha for sha, _ in files.data)
        self._stored.update(self._files.values())

    def forget(self) -> None:
        """The row did not land: the next one with files holds the whole list again."""
        self._taken, self._hash, self._files = None, None, None


def files_at(store: Store, run_id: str, step: int) -> dict[str, str] | None:
    """The workspace files (path -> sha256) after ``step``, folded from the manifest rows; None when no
    row at or before it holds files (a store written before schema 7, say)."""
    rows = store.manifests(run_id, step)
    if not rows:
        return None
    files: dict[str, str] = {}
    for _, text in rows:
        for path, sha in loads(text).items():
            if sha is None:
                files.pop(path, None)
            else:
                files[path] = sha
    return files


def file_changes(before: Mapping[str, str], after: Mapping[str, str],
                 data: Callable[[str], bytes | None]) -> list[FileChange]:
    """The files that differ between two file lists, in path order, each with a unified diff."""
    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        change = "added" if old is None else "removed" if new is None else "modified"
        changes.append(FileChange(path=path, change=change, before=old, after=new,
                                  diff=_diff(path, old, new, data)))
    return changes


def _diff(path: str, old: str | None, new: str | None, data: Callable[[str], bytes | None]) -> str:
    texts = []
    for sha in (old, new):
        if sha is None:
            texts.append("")
            continue
        raw = data(sha)
        if raw is None:
            return f"{path}: its bytes (sha256 {sha[:12]}) are not in the store ({WITHHELD})"
        if len(raw) >= _DIFF_LIMIT:
            return f"{path}: large ({len(raw)} bytes): no diff shown"
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return f"{path}: binary ({len(raw)} bytes): no diff shown"
    lines = difflib.unified_diff(texts[0].splitlines(keepends=True), texts[1].splitlines(keepends=True),
                                 fromfile=f"a/{path}" if old else "/dev/null", tofile=f"b/{path}" if new else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def restore_files(sandbox: Sandbox, files: dict[str, str], store: Store, what: str) -> None:
    """Make the workspace's regular files exactly ``files`` (path -> sha256), the bytes from the store,
    through the sandbox's file tools (never outside the workspace); other files are deleted. Every byte
    needed is read first: a file the store does not hold is refused before the workspace is touched."""
    sandbox.workspace_hash(rescan=True)  # what is there now, outside writes included
    current = sandbox.manifest()
    wanted: dict[str, bytes] = {}
    for path, sha in sorted(files.items()):
        if current.get(path, ("", "", 0))[1] == sha:
            continue
        data = store.file_data(sha)
        if data is None:
            raise RunStateError(f"{what}: the bytes of {path} (sha256 {sha[:12]}) are not in the store ({WITHHELD})")
        wanted[path] = data
    for path, entry in sorted(current.items(), reverse=True):
        if entry[0] != "d" and files.get(path) != entry[1]:
            _done(sandbox.call("delete_file", path=path), path, what)
    for path, data in wanted.items():
        # surrogateescape: the sandbox encodes it back to exactly these bytes, text or not
        _done(sandbox.call("write_file", path=path, content=data.decode("utf-8", "surrogateescape")), path, what)


def _done(result: object, path: str, what: str) -> None:
    ok = getattr(result, "ok", False)
    if not ok:
        raise RunStateError(f"{what}: could not restore {path}: {getattr(result, 'reason', result)}")


def write_files(root: Path, files: Mapping[str, str], store: Store, what: str, sandbox: Sandbox | None = None) -> None:
    """Write ``files`` (path -> sha256, bytes from the store) into ``root``, an empty folder the caller
    just made (a fork's workspace: nothing in it can be a link). A path that would leave it (absolute,
    ``..``, empty parts: an edited store) is refused in one line, before anything is written; so are bytes
    that are not their sha256's. ``sandbox``: see :func:`write_new`."""
    for path in files:
        parts = path.split("/")
        if path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
            raise RunStateError(f"{what}: the stored file path {path!r} is not a path inside the workspace")

    held = store.files_data(set(files.values()))  # one read for them all, before anything is written

    def fetched() -> Iterator[tuple[str, str, bytes, int | None]]:
        for path, sha in sorted(files.items()):
            data = held.get(sha)
            if data is None:
                raise RunStateError(f"{what}: the bytes of {path} (sha256 {sha[:12]}) are not in the store ({WITHHELD})")
            if hashlib.sha256(data).hexdigest() != sha:  # an edited store: the workspace would not be the step's
                raise RunStateError(f"{what}: the stored bytes of {path} are not those of its sha256 {sha[:12]} "
                                    "(an edited or damaged store)")
            yield path, sha, data, None

    write_new(root, fetched(), sandbox)


def write_new(root: Path, files: Iterable[tuple[str, str, bytes, int | None]], sandbox: Sandbox | None = None) -> None:
    """Create each file ``(path, sha256, bytes, mode)`` (mode None: the default, 0o644 under the umask) in
    ``root``, a folder the caller just made, its paths checked, the sha256 that of the bytes. ``sandbox``:
    the sandbox of ``root``, told what was written, so its first scan need not read every file back
    (:meth:`Sandbox.note_written <harness_lab.sandbox.Sandbox.note_written>`)."""
    made = {root}
    for path, sha, data, mode in files:
        target = root / path
        if target.parent not in made:  # one mkdir per folder, not per file
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        written_at = time.time_ns()
        with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644),
                       "wb") as out:
            out.write(data)
            out.flush()
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            if sandbox is not None:
                sandbox.note_written(path, os.fstat(out.fileno()), sha, data, written_at)
