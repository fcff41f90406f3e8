"""The store for large tool outputs (layer L5): the context keeps a reference and a short summary.

An output larger than the cap never enters the view. It is kept here unchanged and addressed by a
short id (``ref_001``, ``ref_002``, ... in order of storage); :meth:`RefStore.read` returns a slice.
Offsets are **character** offsets into the stored ``str`` (Python slice semantics: ``end=None`` means
to the end, negative values count from the end, out-of-range values clamp), so a slice never splits
a UTF-8 sequence. ``read(ref_id)`` with no offsets returns the stored text exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .anomaly import anomaly_lines

__all__ = ["RefInfo", "RefStore", "describe_large_output"]

# How much of a large output its in-view summary may show.
_HEAD_CHARS = 200
_MAX_ANOMALY_LINES = 5
_MAX_LINE_CHARS = 300


@dataclass(frozen=True, slots=True)
class RefInfo:
    """What is known about one stored output without reading it."""

    ref_id: str
    source: str
    round: int
    n_chars: int
    n_bytes: int
    n_lines: int
    sha256: str
    kind: Literal["ref_info"] = "ref_info"


class RefStore:
    """In-memory store of large outputs, keyed by ref id; serialises with the context state."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._infos: dict[str, RefInfo] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, ref_id: object) -> bool:
        return ref_id in self._texts

    def put(self, text: str, *, source: str, round: int) -> RefInfo:
        ref_id = f"ref_{len(self._texts) + 1:03d}"
        data = text.encode("utf-8")
        info = RefInfo(
            ref_id=ref_id,
            source=source,
            round=round,
            n_chars=len(text),
            n_bytes=len(data),
            n_lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        self._texts[ref_id] = text
        self._infos[ref_id] = info
        return info

    def info(self, ref_id: str) -> RefInfo:
        try:
            return self._infos[ref_id]
        except KeyError:
            raise KeyError(f"no stored output with id {ref_id!r}") from None

    def read(self, ref_id: str, start: int = 0, end: int | None = None) -> str:
        """Characters ``[start:end]`` of a stored output, unchanged."""
        try:
            text = self._texts[ref_id]
        except KeyError:
            raise KeyError(f"no stored output with id {ref_id!r}; known: {sorted(self._texts)}") from None
        return text[start:end]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "ref_store",
            "refs": [
                {"ref_id": i.ref_id, "source": i.source, "round": i.round, "text": self._texts[i.ref_id]}
                for i in self._infos.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RefStore:
        store = cls()
        for entry in data["refs"]:
            info = store.put(str(entry["text"]), source=str(entry["source"]), round=int(entry["round"]))
            if info.ref_id != entry["ref_id"]:  # ids are positional; a reordered state is corrupt
                raise ValueError(f"ref store out of order: expected {info.ref_id}, got {entry['ref_id']}")
        return store


def _clip(line: str) -> str:
    return line if len(line) <= _MAX_LINE_CHARS else line[:_MAX_LINE_CHARS] + " ..."


def describe_large_output(action: str, text: str, info: RefInfo) -> str:
    """The short in-view stand-in for a stored output: size, head, and its first anomaly lines."""
    head = text[:_HEAD_CHARS].replace("\n", " / ")
    lines = [
        f"> {action}" if action else f"> output of {info.source}",
        f"[output stored as {info.ref_id}: {info.n_bytes} bytes, {info.n_chars} chars, "
        f"{info.n_lines} lines, sha256 {info.sha256[:12]}; read_ref('{info.ref_id}', start, end) "
        "returns characters start..end unchanged]",
        f"head: {_clip(head)}",
    ]
    found = anomaly_lines(text)
    if found:
        lines.append(f"anomaly lines ({len(found)}):")
        offset = 0
        shown = 0
        for line in found:
            if shown == _MAX_ANOMALY_LINES:
                break
            pos = text.find(line, offset)
            offset = pos + len(line) if pos >= 0 else offset
            lines.append(f"  @{pos}: {_clip(line)}")
            shown += 1
        if len(found) > shown:
            lines.append(f"  ... {len(found) - shown} more anomaly lines in {info.ref_id}")
    return "\n".join(lines)
