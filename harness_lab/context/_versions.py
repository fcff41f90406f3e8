"""Making item versions fast: a positional builder, a replace, a patch between versions, the count.

A no-op step makes one item and demotes another, and a checkpoint logs what changed between two
versions of an item; these helpers do that without the dataclass's keyword machinery. They are
private to the record (:mod:`~harness_lab.context.record`), which decides when a version is made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from itertools import compress
from operator import attrgetter, is_not
from typing import Any

from .items import (
    _DEFAULTS,
    _LAYER_NAMES,
    ContextItem,
    Freshness,
    Layer,
    Role,
    Status,
    _ItemFill,
    item_header,
    shown_text,
)
from .tokens import approx_token_count

__all__ = ["INIT_FIELDS", "INIT_SET", "REQUIRED", "build", "count", "counted", "patch", "relayered", "replace"]

INIT_FIELDS = tuple(f.name for f in fields(ContextItem) if f.init)
INIT_SET = frozenset(INIT_FIELDS)
REQUIRED = INIT_SET - _DEFAULTS.keys()
_init_values = attrgetter(*INIT_FIELDS)
_INDEX = {name: i for i, name in enumerate(INIT_FIELDS)}


def build(id: str, layer: Layer, text: str, source: str, round: int, tokens: int, seq: int,
           role: Role = "note", pinned: bool = False, anomaly: bool = False, key: str | None = None,
           freshness: Freshness = "fresh", status: Status = "current", ref_id: str | None = None,
           supersedes: str | None = None, superseded_by: str | None = None, covers: tuple[str, ...] = (),
           carries: tuple[str, ...] = (), segment: int = 0, kind: str = "context_item") -> ContextItem:
    # What ContextItem(...) does (it has no __post_init__). Same parameters, order and defaults as the
    # dataclass (a test holds them equal).
    item = _fill(id, layer, text, source, round, tokens, seq, role, pinned, anomaly, key, freshness, status,
                 ref_id, supersedes, superseded_by, covers, carries, segment, kind, "")
    item.__class__ = ContextItem
    made: ContextItem = item
    return made


def counted(counter: Callable[[str], int], id: str, layer: Layer, text: str, source: str, round: int,
            seq: int, role: Role, anomaly: bool, key: str | None, ref_id: str | None, segment: int) -> ContextItem:
    """``count(build(...))`` of an unpinned, fresh, current item: the header and count are set before
    the item is one (a step adds an interaction)."""
    item = _fill(id, layer, text, source, round, 0, seq, role, False, anomaly, key, "fresh", "current", ref_id,
                 None, None, (), (), segment, "context_item", "")
    item._header = header = item_header(item)
    if counter is approx_token_count and "[L" not in text and text.isascii() and header.isascii():
        # the default count of render() without making it: ASCII, so its UTF-8 bytes are its characters
        item.tokens = -(-(len(header) + len(text) + 2) // 4)
    else:
        item.tokens = counter(f"{header}\n{text if '[L' not in text else shown_text(text)}\n")  # (render())
    item.__class__ = ContextItem
    made: ContextItem = item
    return made


def relayered(item: ContextItem, layer: Layer, header: str) -> ContextItem:
    """*item* in *layer*, with this header and its token count (ItemRecord.relayer decides both)."""
    new = _fill(item.id, layer, item.text, item.source, item.round, item.tokens, item.seq, item.role, item.pinned,
                item.anomaly, item.key, item.freshness, item.status, item.ref_id, item.supersedes,
                item.superseded_by, item.covers, item.carries, item.segment, item.kind, header)
    new.__class__ = ContextItem
    made: ContextItem = new
    return made


def _fill(id: str, layer: Layer, text: str, source: str, round: int, tokens: int, seq: int, role: Role,
          pinned: bool, anomaly: bool, key: str | None, freshness: Freshness, status: Status,
          ref_id: str | None, supersedes: str | None, superseded_by: str | None, covers: tuple[str, ...],
          carries: tuple[str, ...], segment: int, kind: str, header: str) -> Any:
    # The fields stored on a slot twin (items._ItemFill), which the caller makes a ContextItem: the
    # dataclass's generated __init__ (21 object.__setattr__ calls) costs ~5x this, and every step makes
    # one item and demotes another.
    item: Any = _ItemFill()
    item.id = id
    item.layer = layer
    item.text = text
    item.source = source
    item.round = round
    item.tokens = tokens
    item.seq = seq
    item.role = role
    item.pinned = pinned
    item.anomaly = anomaly
    item.key = key
    item.freshness = freshness
    item.status = status
    item.ref_id = ref_id
    item.supersedes = supersedes
    item.superseded_by = superseded_by
    item.covers = covers
    item.carries = carries
    item.segment = segment
    item.kind = kind
    item._header = header
    return item


def replace(item: ContextItem, changes: Mapping[str, Any]) -> ContextItem:
    # dataclasses.replace without its per-call introspection (~7 -> ~1.5 µs; a step restamps at least once).
    # ContextItem has no __post_init__, so building it from every init field is what __init__ would do.
    if not changes.keys() <= INIT_SET:
        raise TypeError(f"not fields of ContextItem: {sorted(set(changes) - INIT_SET)}")
    values = list(_init_values(item))
    for name, value in changes.items():
        values[_INDEX[name]] = value
    return build(*values)


# The fields a patch compares (text is compared first: a new text makes a whole item, not a patch).
_PATCHED = tuple(name for name in INIT_FIELDS if name not in ("id", "text", "kind"))
assert _PATCHED[0] == "layer"  # patch() looks at it first
_patched_values = attrgetter(*_PATCHED)
_PATCHED_INDEXES = range(len(_PATCHED))


def patch(before: ContextItem, after: ContextItem) -> dict[str, Any] | None:
    """The fields of *after* that differ from *before* (same id and text), spelled as in to_dict."""
    old, new = _patched_values(before), _patched_values(after)
    if old[1:] == new[1:]:  # all but the layer equal (a demotion, every step): one comparison in C
        return None if old[0] == new[0] else {"id": after.id, "layer": _LAYER_NAMES[new[0]]}
    out: dict[str, Any] | None = None
    # A new version shares the objects of the fields it kept: the identity test picks, in C, the few
    # fields that may differ (a demotion: the layer), and only those are compared.
    for i in compress(_PATCHED_INDEXES, map(is_not, old, new)):
        value = new[i]
        if old[i] != value:
            if out is None:
                out = {"id": after.id}
            name = _PATCHED[i]
            out[name] = _LAYER_NAMES[value] if name == "layer" else list(value) if isinstance(value, tuple) else value
    return out


def count(item: ContextItem, counter: Callable[[str], int]) -> None:
    # Set once, right after the item is made and before anyone else holds it: the count depends on
    # the rendered header, which needs the finished item, and a second dataclass copy costs ~10 us.
    object.__setattr__(item, "_header", item_header(item))
    object.__setattr__(item, "tokens", counter(item.render()))
