"""The context's change log: what changed since the last checkpoint, and how to replay it.

A checkpoint stores the whole context state now and then and, in between, only what
:meth:`~harness_lab.context.ContextManager.take_changes` returns: the item versions written (an item
rewritten with its text unchanged, such as the interaction that left the window for L4, as a patch of
the fields that changed), the items retired, the stubs when they changed, the view's membership when
it changed (as ids dropped and added when the order allows, else whole), new stored outputs (by
sha256), the stale outputs' notes (whole, when one was added) and the scalars that changed. A step
then costs what it changed, not what the run remembers.
:func:`apply_changes` replays such logs onto a state; the result equals ``state(ref_texts=False)``
at that moment.

Versions: 1 carried every key in every log (no patches: a rewritten item whole, every scalar);
2 leaves out what did not change. Both replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CHANGES_VERSION", "apply_changes", "replay"]

CHANGES_VERSION = 2
_READABLE = frozenset({1, 2})
# Small fields, each copied whole into a change log when it changed.
SCALARS = ("budget_tokens", "output_cap_bytes", "low_water", "subtask", "window", "next", "segment", "retained")


def apply_changes(state: Mapping[str, Any], changes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``state`` (a context state) with ``changes`` (``take_changes`` outputs, oldest first) applied.

    Dict semantics give back the record's order exactly: a rewritten item keeps its place, a new
    one goes to the end, a retired one leaves."""
    return replay(state, changes)[0]


def replay(state: Mapping[str, Any],
           changes: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """:func:`apply_changes`, and the ``state``'s items by id as they were before (an item whose
    dict in the result is not the same object was rewritten, patched or retired since).

    One pass folds every log into the result (no intermediate state is built); a log's usual
    live_delta (nothing dropped) extends the view instead of rebuilding it, and its scalars are
    found by one set intersection (a restore may replay FULL_EVERY logs)."""
    if state.get("kind") != "context_state":
        raise ValueError(f"not a context state: kind={state.get('kind')!r}")
    before = {str(d["id"]): d for d in state["items"]}
    items = dict(before)
    live = list(state["live"])
    refs = list(state["refs"]["refs"])
    out = dict(state)
    for change in changes:
        get = change.get
        if get("kind") != "context_changes" or get("version") not in _READABLE:
            raise ValueError(f"not a context change log of version 1 or 2: kind={get('kind')!r}, "
                             f"version={get('version')!r}")
        for entry in change["items"]:
            items[str(entry["id"])] = entry
        for patch in get("patches", ()):
            item_id = str(patch["id"])
            if item_id not in items:
                raise ValueError(f"a change log patches item {item_id}, which its state does not hold")
            items[item_id] = {**items[item_id], **patch}
        for item_id in get("retired", ()):
            items.pop(item_id, None)
        if (whole := get("live")) is not None:
            live = list(whole)
        elif (delta := get("live_delta")) is not None:
            if (drop := delta.get("drop")) is not None and (dropped := set(drop)):
                live = [i for i in live if i not in dropped]
            live.extend(delta["add"])
        if (stubs := get("stubs")) is not None:
            out["stubs"] = stubs
        refs.extend(get("refs", ()))
        if (stale := get("stale_refs")) is not None:  # (whole, when it changed)
            out["stale_refs"] = stale
        for key in _SCALAR_KEYS.intersection(change):
            out[key] = change[key]
    out["items"] = list(items.values())
    out["live"] = live
    out["refs"] = {"kind": "ref_store", "refs": refs}
    return out, before


_SCALAR_KEYS = frozenset(SCALARS)


def plain_ids(ids: Iterable[str]) -> bool:
    """True when none of these ids needs escaping in JSON: ASCII letters and digits (every ``c123`` the
    record makes), so :func:`usual_log_json` may spell them as they are."""
    joined = "".join(ids)
    return not joined or (joined.isascii() and joined.isalnum())


def usual_log_json(patches: list[dict[str, Any]], added: list[str] | None, window: list[str] | None,
                   next: int | None) -> str:
    """The compact JSON (as pydantic_core's ``to_json`` spells it) of the usual step's change log but its
    items: layer patches, ids added to the view, the window, next, each left out when None or empty
    (patches) as take_changes leaves it out. Every id plain (:func:`plain_ids`)."""
    # (one string grown by +=: CPython extends it in place, cheaper than a list of parts and a join)
    out = _LOG_START
    if patches:
        if len(patches) == 1:  # a step demotes one interaction
            out += f',"patches":[{{"id":"{patches[0]["id"]}","layer":"{patches[0]["layer"]}"}}]'
        else:
            out += f',"patches":[{",".join([_PATCH.format(p["id"], p["layer"]) for p in patches])}]'
    if added is not None:
        out += (',"live_delta":{"add":["' + '","'.join(added) + '"]}') if added else ',"live_delta":{"add":[]}'
    if window is not None:  # (each list of ids spelled inline: a step writes two)
        out += (',"window":["' + '","'.join(window) + '"]') if window else ',"window":[]'
    if next is not None:
        out += f',"next":{next + 0}'
    return out + "}"


_LOG_START = f'{{"kind":"context_changes","version":{CHANGES_VERSION}'
_PATCH = '{{"id":"{}","layer":"{}"}}'
