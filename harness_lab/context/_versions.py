"""Making item versions fast: a positional builder, a replace, a patch between versions, the count.

A no-op step makes one item and demotes another, and a checkpoint logs what changed between two
versions of an item; these helpers do that without the dataclass's keyword machinery. They are
private to the record (:mod:`~harness_lab.context.record`), which decides when a version is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any

from .items import _DEFAULTS, _LAYER_NAMES, ContextItem, Freshness, Layer, Role, Status, item_header

__all__ = ["INIT_FIELDS", "INIT_SET", "REQUIRED", "build", "count", "patch", "replace"]

INIT_FIELDS = tuple(f.name for f in fields(ContextItem) if f.init)
INIT_SET = frozenset(INIT_FIELDS)
REQUIRED = INIT_SET - _DEFAULTS.keys()
_new_item = object.__new__
_set = object.__setattr__


def build(id: str, layer: Layer, text: str, source: str, round: int, tokens: int, seq: int,
           role: Role = "note", pinned: bool = False, anomaly: bool = False, key: str | None = None,
           freshness: Freshness = "fresh", status: Status = "current", ref_id: str | None = None,
           supersedes: str | None = None, superseded_by: str | None = None, covers: tuple[str, ...] = (),
           carries: tuple[str, ...] = (), segment: int = 0, kind: str = "context_item") -> ContextItem:
    # What ContextItem(...) does (it has no __post_init__), unrolled: its generated __init__ costs ~2x
    # this, a loop over the field names ~1.5x, and every step makes one item and demotes another.
    # Same parameters, order and defaults as the dataclass (a test holds them equal).
    item = _new_item(ContextItem)
    _set(item, "id", id)
    _set(item, "layer", layer)
    _set(item, "text", text)
    _set(item, "source", source)
    _set(item, "round", round)
    _set(item, "tokens", tokens)
    _set(item, "seq", seq)
    _set(item, "role", role)
    _set(item, "pinned", pinned)
    _set(item, "anomaly", anomaly)
    _set(item, "key", key)
    _set(item, "freshness", freshness)
    _set(item, "status", status)
    _set(item, "ref_id", ref_id)
    _set(item, "supersedes", supersedes)
    _set(item, "superseded_by", superseded_by)
    _set(item, "covers", covers)
    _set(item, "carries", carries)
    _set(item, "segment", segment)
    _set(item, "kind", kind)
    _set(item, "_header", "")
    return item


def replace(item: ContextItem, changes: Mapping[str, Any]) -> ContextItem:
    # dataclasses.replace without its per-call introspection (~7 -> ~4 µs; a step restamps at least once).
    # ContextItem has no __post_init__, so setting every init field is what __init__ would do.
    if not changes.keys() <= INIT_SET:
        raise TypeError(f"not fields of ContextItem: {sorted(set(changes) - INIT_SET)}")
    new = _new_item(ContextItem)
    for name in INIT_FIELDS:
        _set(new, name, changes[name] if name in changes else getattr(item, name))
    _set(new, "_header", "")
    return new


# The fields a patch compares (text is compared first: a new text makes a whole item, not a patch).
_PATCHED = tuple(name for name in INIT_FIELDS if name not in ("id", "text", "kind"))
_patched_values = attrgetter(*_PATCHED)


def patch(before: ContextItem, after: ContextItem) -> dict[str, Any] | None:
    """The fields of *after* that differ from *before* (same id and text), spelled as in to_dict."""
    out: dict[str, Any] | None = None
    for name, old, new in zip(_PATCHED, _patched_values(before), _patched_values(after), strict=True):
        if old is not new and old != new:
            if out is None:
                out = {"id": after.id}
            out[name] = _LAYER_NAMES[new] if name == "layer" else list(new) if isinstance(new, tuple) else new
    return out


def count(item: ContextItem, counter: Callable[[str], int]) -> None:
    # Set once, right after the item is made and before anyone else holds it: the count depends on
    # the rendered header, which needs the finished item, and a second dataclass copy costs ~10 us.
    object.__setattr__(item, "_header", item_header(item))
    object.__setattr__(item, "tokens", counter(item.render()))
