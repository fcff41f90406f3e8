"""The store for large tool outputs (layer L5): the context keeps a reference and a short summary.

An output larger than the cap never enters the view. It is kept here unchanged and addressed by a
short id (``ref_001``, ``ref_002``, ... in order of storage); :meth:`RefStore.read` returns a slice.
Offsets are **character** offsets into the stored ``str`` (Python slice semantics: ``end=None`` means
to the end, negative values count from the end, out-of-range values clamp), so a slice never splits
a UTF-8 sequence. ``read(ref_id)`` with no offsets returns the stored text exactly.

With a ``loader`` (sha256 -> text; a checkpoint store's blob table), texts need not stay in memory:
a state written with ``texts=False`` names each output by its sha256 only, and
:meth:`RefStore.release_texts` drops the texts already kept durably; a read fetches the text again.

An output whose source changed outside the run since it was stored is *stale*
(:meth:`RefStore.mark_stale`, with a one-line note: which ref, since when, why). The store keeps its
text unchanged; the manager's ``read_ref`` puts the note in front of what it returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import StoreError
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
    key: str | None = None  # the external state it was read from (a file path): mark_stale finds it by that too
    kind: Literal["ref_info"] = "ref_info"


class RefStore:
    """Store of large outputs, keyed by ref id; serialises with the context state."""

    def __init__(self, loader: Callable[[str], str | None] | None = None) -> None:
        self._texts: dict[str, str] = {}  # in memory; without a loader, every text
        self._infos: dict[str, RefInfo] = {}
        self.loader = loader
        self._taken = 0  # refs handed out by take_new
        self.stale: dict[str, str] = {}  # ref id -> the note read_ref puts first (the first mark's)
        self.stale_changed = False  # since the change log last took them

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, ref_id: object) -> bool:
        return ref_id in self._infos

    def ids(self) -> list[str]:
        """Every stored output's id, in order of storage."""
        return list(self._infos)

    def put(self, text: str, *, source: str, round: int, key: str | None = None) -> RefInfo:
        ref_id = f"ref_{len(self._infos) + 1:03d}"
        data = text.encode("utf-8")
        info = RefInfo(
            ref_id=ref_id,
            source=source,
            round=round,
            n_chars=len(text),
            n_bytes=len(data),
            n_lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            sha256=hashlib.sha256(data).hexdigest(),
            key=key,
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
        if ref_id not in self._infos:
            raise KeyError(f"no stored output with id {ref_id!r}; known: {sorted(self._infos)}")
        return self.text(ref_id)[start:end]

    def text(self, ref_id: str) -> str:
        """The whole stored output (fetched through the loader when it is not in memory); a known output
        whose text is neither is a :class:`StoreError` (a broken environment), not a ``KeyError`` (a wrong id)."""
        text = self._texts.get(ref_id)
        if text is None:
            info = self.info(ref_id)
            text = self.loader(info.sha256) if self.loader is not None else None
            if text is None:
                raise StoreError(f"stored output {ref_id} (sha256 {info.sha256[:12]}) is not in memory "
                                 "and its store does not hold it")
        return text

    def mark_stale(self, cause: str, ref_ids: Iterable[str], last_round: int | None) -> None:
        """Note that these outputs, and those stored from source or with key *cause* (the source equal, or
        equal after its ``tool:`` prefix: the item that showed one may be retired by now), may no longer match their
        source, changed outside the run (after *last_round*, the latest round recorded). An output
        keeps the note of its first mark."""
        by_source = [i.ref_id for i in self._infos.values()
                     if cause in (i.source, i.source.split(":", 1)[-1]) or cause == i.key]
        for ref_id in (*ref_ids, *by_source):
            if ref_id in self.stale:
                continue
            info = self.info(ref_id)
            since = info.round if last_round is None else max(info.round, last_round)
            self.stale[ref_id] = (
                f"[stale: {ref_id} (stored in round {info.round}, from {info.source!r}) was marked stale after "
                f"round {since} by an outside change ({cause!r}); its source may no longer match this text: "
                "re-read it before relying on it]")
            self.stale_changed = True

    def release_texts(self, sha256s: Iterable[str]) -> None:
        """Forget these outputs' texts in memory (only with a loader: it reads them back on demand)."""
        if self.loader is None:
            return
        gone = set(sha256s)
        for ref_id in [r for r in self._texts if self._infos[r].sha256 in gone]:
            del self._texts[ref_id]

    def has_new(self) -> bool:
        """True when outputs were stored since the last :meth:`take_new`."""
        return self._taken != len(self._infos)

    def take_new(self) -> list[tuple[RefInfo, str]]:
        """The outputs stored since the last call, with their texts (what a checkpoint must persist)."""
        infos = list(self._infos.values())[self._taken :]
        self._taken = len(self._infos)
        return [(i, self.text(i.ref_id)) for i in infos]

    def to_dict(self, *, texts: bool = True) -> dict[str, Any]:
        """JSON-able; ``texts=False`` names each output by its sha256 (and sizes) instead of its text."""
        return {"kind": "ref_store", "refs": [_entry(i, self.text(i.ref_id) if texts else None)
                                              for i in self._infos.values()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], loader: Callable[[str], str | None] | None = None) -> RefStore:
        store = cls(loader)
        for entry in data["refs"]:
            store.load_entry(entry)
        store._taken = len(store._infos)
        return store

    def load_entry(self, entry: Mapping[str, Any]) -> RefInfo:
        """Add one :meth:`to_dict` entry (with its text, or by sha256 for the loader to fetch)."""
        key = None if entry.get("key") is None else str(entry["key"])
        if "text" in entry:
            info = self.put(str(entry["text"]), source=str(entry["source"]), round=int(entry["round"]), key=key)
        else:
            info = RefInfo(ref_id=f"ref_{len(self._infos) + 1:03d}", source=str(entry["source"]),
                           round=int(entry["round"]), n_chars=int(entry["n_chars"]), n_bytes=int(entry["n_bytes"]),
                           n_lines=int(entry["n_lines"]), sha256=str(entry["sha256"]), key=key)
            self._infos[info.ref_id] = info
        if info.ref_id != entry["ref_id"]:  # ids are positional; a reordered state is corrupt
            raise ValueError(f"ref store out of order: expected {info.ref_id}, got {entry['ref_id']}")
        return info


def _entry(info: RefInfo, text: str | None) -> dict[str, Any]:
    base = {"ref_id": info.ref_id, "source": info.source, "round": info.round}
    if info.key is not None:  # (left out when none: states written before keys were kept read the same)
        base["key"] = info.key
    if text is not None:
        return {**base, "text": text}
    return {**base, "n_chars": info.n_chars, "n_bytes": info.n_bytes, "n_lines": info.n_lines, "sha256": info.sha256}


# str.splitlines' line breaks: where anomaly_lines' lines begin and end.
_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _line_start(text: str, line: str, offset: int) -> int:
    """Where *line*, a whole line of *text* (from ``splitlines``), starts at or after *offset*; -1 if nowhere.
    Its first occurrence may be inside a longer line that is clean (``errors_total 0`` before ``error``)."""
    pos = text.find(line, offset)
    while pos >= 0:
        end = pos + len(line)
        if (pos == 0 or text[pos - 1] in _BREAKS) and (end == len(text) or text[end] in _BREAKS):
            return pos
        pos = text.find(line, pos + 1)
    return -1


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
            pos = _line_start(text, line, offset)
            offset = pos + len(line) if pos >= 0 else offset
            lines.append(f"  @{pos}: {_clip(line)}")
            shown += 1
        if len(found) > shown:
            lines.append(f"  ... {len(found) - shown} more anomaly lines in {info.ref_id}")
    return "\n".join(lines)
