"""The stored outputs side of the context manager: reading a large output back, and where the texts
live (in memory, or behind a loader such as a store's blobs).

An output over the cap never enters the view: the manager stores it in a
:class:`~harness_lab.context.refs.RefStore` and shows an L5 reference. :class:`ContextManager` inherits
these methods (they are its public API).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._inputs import require_int
from .refs import RefInfo, RefStore

__all__ = ["StoredOutputs"]


class StoredOutputs:
    """Large outputs of a :class:`ContextManager` (its base class; not used on its own)."""

    _refs: RefStore  # set by ContextManager.__init__
    output_cap_bytes: int

    def read_ref(self, ref_id: str, start: int = 0, end: int | None = None) -> str:
        """Characters ``[start:end]`` of a stored large output, or of a recorded context item's text by its
        id (``c12``, as :meth:`search_history` names it), unchanged (Python slice semantics); if
        its source was marked stale (:meth:`mark_stale`), after a first line that says so. An unknown id is a
        ``KeyError``; a known one whose text cannot be loaded (its store lacks it) a
        :class:`~harness_lab.errors.StoreError`."""
        if not isinstance(ref_id, str):  # None or 3 read as "no stored output with id None"
            raise ValueError(f"ref_id must be a str, got {ref_id!r} ({type(ref_id).__name__})")
        require_int("start", start)
        require_int("end", end, or_none=True)
        if ref_id not in self._refs and (item_text := self._archived_text(ref_id)) is not None:
            return item_text[start:end]  # an item id from search_history: its recorded text
        text = self._refs.read(ref_id, start, end)
        note = self._refs.stale.get(ref_id)
        return text if note is None else f"{note}\n{text}"

    def _archived_text(self, item_id: str) -> str | None:
        """The recorded text of a context item by id (None: no such item); the manager's."""
        return None

    def ref_text(self, ref_id: str) -> str:
        """The whole stored output exactly as stored, stale or not (a checkpoint's blob holds this)."""
        return self._refs.read(ref_id)

    def ref_info(self, ref_id: str) -> RefInfo:
        return self._refs.info(ref_id)

    def attach_ref_loader(self, loader: Callable[[str], str | None]) -> None:
        """Where stored outputs not in memory are read from (sha256 -> text; a store's blobs)."""
        self._refs.loader = loader

    def release_ref_texts(self, sha256s: Iterable[str]) -> None:
        """Drop these stored outputs' texts from memory (only when a ref loader can fetch them again)."""
        self._refs.release_texts(sha256s)

    def _too_large(self, text: str) -> bool:
        # A str of n chars encodes to n..4n bytes; only encode when the answer is not obvious.
        if len(text) * 4 <= self.output_cap_bytes:
            return False
        return len(text) > self.output_cap_bytes or len(text.encode("utf-8")) > self.output_cap_bytes
