"""The manager's change log spelled out: the dict :meth:`ContextManager.take_changes` returns, and the
usual step's log as JSON without that dict (:meth:`ContextManager.take_changes_json`).

The record says what changed (:meth:`ItemRecord.take_changes`); this module adds the stored outputs and
scalars and leaves out what says nothing (see :mod:`~harness_lab.context.changes` for the format).
Private to the manager, which keeps the scalars as the last log gave them.
"""

from __future__ import annotations

from typing import Any

from .changes import CHANGES_VERSION, SCALARS, usual_log_json
from .items import ContextItem
from .record import ItemRecord
from .refs import RefStore, _entry

__all__ = ["RecordChanges", "live_delta", "log_dict", "usual_json"]

# ItemRecord.take_changes: items written, patches, ids retired, the view's membership change, stubs.
RecordChanges = tuple[list[ContextItem], list[dict[str, Any]], list[str],
                      tuple[list[str] | None, list[str]] | None, list[list[Any]] | None]


def usual_json(changes: RecordChanges, values: tuple[Any, ...], logged: tuple[Any, ...] | None, plain_ids: bool,
               refs: RefStore) -> str | None:
    """The compact JSON of all but the items of the usual step's log (new items, layer patches, ids added
    to the view, window and next), spelled from its pieces; None when the log is not the usual step's.
    *values* are the scalars now, *logged* as the last log gave them."""
    _, patches, retired, live, stubs = changes
    if (retired or stubs is not None or logged is None or not plain_ids or refs.has_new() or refs.stale_changed
            or (live is not None and live[0] is not None)):
        return None
    budget, cap, low_water, subtask, window, next, segment, retained = values  # (SCALARS' order)
    if (budget != logged[0] or cap != logged[1] or low_water != logged[2] or subtask != logged[3]
            or segment != logged[6] or retained != logged[7]):
        return None
    for p in patches:
        if len(p) != 2 or "layer" not in p:
            return None
    return usual_log_json(patches, None if live is None else live[1], window if window != logged[4] else None,
                          next if next != logged[5] else None)


def log_dict(rec: ItemRecord, refs: RefStore, changes: RecordChanges, raw_items: bool, values: tuple[Any, ...],
             logged: tuple[Any, ...] | None) -> dict[str, Any]:
    """take_changes' dict of the record's *changes*; the outputs stored (and marked stale) since the last
    log are taken from *refs*."""
    items, patches, retired, live, stubs = changes
    out: dict[str, Any] = {"kind": "context_changes", "version": CHANGES_VERSION,
                           "items": items if raw_items else [i.to_dict() for i in items]}
    if patches:
        out["patches"] = patches
    if retired:
        out["retired"] = retired
    if live is not None:
        before, after = live
        if before is None:  # ids appended only (the record knows): live_delta's usual case
            out["live_delta"] = {"add": after}
        elif (delta := live_delta(before, after)) is not None:
            out["live_delta"] = delta
        else:
            out["live"] = after
    if stubs is not None:
        out["stubs"] = stubs
    if refs.has_new():
        out["refs"] = [_entry(info, None) for info, _ in refs.take_new()]
    if refs.stale_changed:
        out["stale_refs"] = dict(refs.stale)
        refs.stale_changed = False
    if logged is None:
        out.update(zip(SCALARS, values, strict=True))
    elif values[:4] == logged[:4] and values[6:] == logged[6:]:  # the usual step: at most these two
        if values[4] != logged[4]:
            out["window"] = values[4]
        if values[5] != logged[5]:
            out["next"] = values[5]
    else:
        for key, value, was in zip(SCALARS, values, logged, strict=False):  # (all of length 8)
            if value != was:
                out[key] = value
    return out


def live_delta(before: list[str], after: list[str]) -> dict[str, list[str]] | None:
    """``after`` as ``before`` minus ``drop`` plus ``add`` at the end, when that is what happened
    (the usual step: one interaction in, maybe one out); None when the order changed otherwise.
    An empty ``drop`` is left out."""
    if after[: len(before)] == before:  # nothing dropped (most steps): one comparison in C
        return {"add": after[len(before) :]}
    kept = set(after)
    rest = [i for i in before if i in kept]
    if after[: len(rest)] != rest:
        return None
    return {"drop": [i for i in before if i not in kept], "add": after[len(rest) :]}
