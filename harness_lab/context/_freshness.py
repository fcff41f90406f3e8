"""Staleness on the record: what an outside change makes stale, and what then leaves the view.

Private to the manager (:meth:`ContextManager.mark_stale`, :meth:`ContextManager.reselect` document
them for callers). A stale item is a new version (``freshness="stale"``); nothing becomes fresh again.
"""

from __future__ import annotations

from .items import ContextItem
from .record import BUILT_FROM_OTHERS, ItemRecord

__all__ = ["mark_stale", "reselect"]


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
