"""Staleness on the record: what an outside change makes stale, and what then leaves the view.

:class:`ContextManager` inherits :class:`Freshness` (its methods are the manager's public API). A stale
item is a new version (``freshness="stale"``); nothing becomes fresh again.
"""

from __future__ import annotations

from ._inputs import text_arg
from .items import ContextItem
from .record import BUILT_FROM_OTHERS, ItemRecord
from .refs import RefStore

__all__ = ["Freshness", "mark_stale", "reselect"]


class Freshness:
    """Outside changes of a :class:`ContextManager` (its base class; not used on its own)."""

    _rec: ItemRecord  # set by ContextManager.__init__
    _refs: RefStore

    def mark_stale(self, key_or_source: str) -> list[ContextItem]:
        """Mark items whose key or source matches (``source`` equal, or equal after its ``tool:``
        prefix, e.g. ``config.yaml`` matches ``read_file:config.yaml``) stale, along with summaries
        and conclusions built from them, and the stored outputs of those items or of that key or source
        (:meth:`read_ref` says so from then on). Returns the stale versions of the items still in the view."""
        key_or_source = text_arg("key_or_source", key_or_source)
        refs: list[str] = []
        marked = mark_stale(self._rec, key_or_source, refs)
        last = next(reversed(self._rec.archive.values()), None)  # the latest item made: "after round N"
        self._refs.mark_stale(key_or_source, refs, None if last is None else last.round)
        return marked

    def reselect(self) -> None:
        """Take stale items out of the view (L0/L1 and pinned ones stay, shown stale); all stay recorded.

        A stale compression summary gives back the fresh anomalies it carried, verbatim and pinned.
        """
        reselect(self._rec)


def mark_stale(rec: ItemRecord, key_or_source: str, refs: list[str]) -> list[ContextItem]:
    """Mark matching items and the summaries/conclusions built from them stale (see the manager);
    the stored outputs (ref ids) of the items hit are appended to *refs*."""
    hit = {i for i, (key, source) in rec.stubs.items()
           if key_or_source in (key, source, source.split(":", 1)[-1])}
    marked: list[ContextItem] = []
    # One pass suffices: the record is in creation order and a summary only covers older items,
    # so staleness reaches summaries of summaries too.
    for item in list(rec.archive.values()):
        tail = item.source.split(":", 1)[-1]
        if key_or_source in (item.key, item.source, tail) or (
            item.role in BUILT_FROM_OTHERS and hit.intersection(item.covers)
        ):
            hit.add(item.id)
            if item.ref_id is not None:
                refs.append(item.ref_id)
            if item.freshness != "stale":
                item = rec.restamp(item, freshness="stale")
                rec.store(item)
            if item.id in rec.live:
                marked.append(item)
    return marked


def reselect(rec: ItemRecord) -> None:
    """Drop stale unpinned L2-L5 items from the view; restore fresh anomalies a summary carried."""
    for item in list(rec.live.values()):
        if item.freshness == "stale" and item.layer.compressible and not item.pinned:
            rec.remove(item.id)
            if item.is_compression_summary:  # it went stale with one source, not with all
                for carried in (rec.archive[c] for c in item.carries):
                    if carried.freshness == "fresh":
                        rec.put(rec.restamp(carried, layer=item.layer, pinned=True))
