"""The evidence catalogue: local notes, one per file, the file's stem being its id.

``data/evidence/<id>.md`` with ids matching ``[a-z0-9_-]+``. The shipped notes are test material
for the lab, not real sources.

Which files are notes: every visible ``*.md`` in the folder except ``README.md`` (any case). Hidden
files, whose name starts with ``.``, are skipped: editors leave them beside the note being edited
(Emacs's ``.#note.md`` lock, a ``.draft.md``) and a reader of the folder does not see them. A
visible ``*.md`` whose stem is not a valid id is a one-line :class:`ConfigError` naming the file and
the id rule, not silently skipped: it was meant as a note. Other names (``note.md~``,
``.note.md.swp``) are not ``*.md`` and never read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ._files import MAX_CONFIG_BYTES, read_regular_file, shown_path
from .errors import ConfigError

__all__ = ["EVIDENCE_ID", "EvidenceCatalogue", "EvidenceNote"]

EVIDENCE_ID = re.compile(r"[a-z0-9_-]+")


@dataclass(frozen=True)
class EvidenceNote:
    id: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class EvidenceCatalogue(Mapping[str, EvidenceNote]):
    """Read-only mapping id -> note."""

    def __init__(self, notes: Mapping[str, EvidenceNote]) -> None:
        self._notes = dict(notes)

    @classmethod
    def from_dir(cls, directory: str | Path) -> EvidenceCatalogue:
        directory = Path(directory)
        if not directory.is_dir():
            raise ConfigError(f"{directory}: evidence directory not found")
        notes: dict[str, EvidenceNote] = {}
        for path in sorted(directory.glob("*.md")):
            if path.name.lower() == "readme.md" or path.name.startswith("."):
                continue  # hidden: an editor's lock or draft (pathlib's glob matches dot files)
            if not EVIDENCE_ID.fullmatch(path.stem):
                raise ConfigError(f"{path}: evidence id {path.stem!r} must match [a-z0-9_-]+")
            try:  # a dangling symlink, a folder named *.md, no permission; a FIFO would block a plain read
                data = read_regular_file(path, MAX_CONFIG_BYTES + 1)
            except ConfigError as exc:
                reason = str(exc).removeprefix(f"{shown_path(path)}: ")
                raise ConfigError(f"{path}: cannot read evidence note: {reason}") from None
            if len(data) > MAX_CONFIG_BYTES:
                raise ConfigError(f"{path}: evidence note larger than {MAX_CONFIG_BYTES} bytes")
            notes[path.stem] = EvidenceNote(id=path.stem, data=data)
        return cls(notes)

    def __getitem__(self, key: str) -> EvidenceNote:
        return self._notes[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._notes)

    def __len__(self) -> int:
        return len(self._notes)
