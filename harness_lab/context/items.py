r"""Typed context records: the layers and one item, and how an item is rendered for a model.

Layers (seed 003, section 3.2), highest priority first::

    L0  system prompt, tool definitions, safety constraints      never compressed
    L1  the user's task and its acceptance criteria               never compressed
    L2  current subtask + the last 3 interactions                 kept whole; compressed last
    L3  conclusions of finished subtasks, summaries               keep the conclusion, drop the process
    L4  early exploration (interactions older than the last 3)   compressed or dropped first
    L5  references to large tool outputs stored outside          reference + short summary

Items are immutable; the manager replaces an item (``dataclasses.replace`` + a recount) when its
layer, freshness or status changes, so a view taken earlier never changes under its reader. That frozen
view, :class:`~harness_lab.context.ContextView`, is defined in :mod:`~harness_lab.context._view` (which
imports this module; the order a view shows items in, :func:`view_order`, is here).

Rendering (what the model reads) is each item's header line, ``[L2 | round 3 | from ... | c7]``, then
its text. A header is the only line that begins with ``[L``: a line of item text that begins with
``[L`` (after any spaces or tabs, after any line break ``str.splitlines`` knows, ``\r`` and U+2028
included) is shown with a backslash in front, ``\[L0 | ...``, so a tool output cannot forge an item
(a fake L0 instruction or harness feedback). Within a header, a field value (the source, an id) shows
``\\``, ``|`` and ``]`` with a backslash in front and an unprintable character (a line break) as its
escape code, so a value cannot add a field (`` | pinned``) or end the header early, and the header stays
one line (:func:`item_header`). Only the rendering changes: ``text``, ``source``, the stored outputs
and the state keep their values byte for byte; token counts are of the rendered form. Most texts hold
no ``[L`` at all, and rendering them costs one ``in`` test (:func:`shown_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import IntEnum
from itertools import compress
from json.encoder import encode_basestring
from operator import attrgetter, is_not
from typing import Any, Literal, get_args

from ._escape import HEADERLIKE, escape_field, header_field, shown_text

__all__ = [
    "COMPRESSION_SOURCE_PREFIX",
    "ContextItem",
    "Freshness",
    "Layer",
    "Role",
    "Status",
    "compact_json",
    "item_header",
    "shown_text",
    "view_order",
]

Freshness = Literal["fresh", "stale"]
Status = Literal["current", "superseded"]
# What produced an item; compression and the self-check treat roles differently.
Role = Literal[
    "note",  # ctx.add()
    "interaction",  # ctx.add_interaction()
    "feedback",  # ctx.add_feedback(): a failure reason from validation (pinned, anomaly)
    "summary",  # ctx.summarize() or a compression pass
    "conclusion",  # ctx.finish_subtask()
    "subtask",  # ctx.begin_subtask(): the current subtask's goal
    "resume",  # ctx.add_resume_note()
]


# Source of the summaries compression makes; such a summary can be unpacked into the anomalies it carries.
COMPRESSION_SOURCE_PREFIX = "compress:"


class Layer(IntEnum):
    """Context layers; a lower number is kept longer (L0/L1 are never compressed)."""

    L0 = 0
    L1 = 1
    L2 = 2
    L3 = 3
    L4 = 4
    L5 = 5

    @property
    def compressible(self) -> bool:
        return self >= 2  # L2 (an enum member's class lookup costs ~90 ns; this is asked per item)


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One entry of the context, with where it came from and how current it is.

    ``tokens`` counts the item as rendered (header line + text + newline), computed once when the
    item is made. ``covers`` lists the ids a summary or conclusion replaced; ``carries`` the
    anomaly items whose text a summary holds verbatim.
    """

    id: str
    layer: Layer
    text: str
    source: str
    round: int
    tokens: int
    seq: int  # position within its layer (a summary takes the place of the oldest item it covers)
    role: Role = "note"
    pinned: bool = False
    anomaly: bool = False
    key: str | None = None
    freshness: Freshness = "fresh"
    status: Status = "current"
    ref_id: str | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    covers: tuple[str, ...] = ()
    carries: tuple[str, ...] = ()
    segment: int = 0  # which subtask span the item belongs to (finish_subtask closes one)
    kind: Literal["context_item"] = "context_item"
    # The header line, cached by the manager when it counts tokens (views are rendered every step).
    # Not an init field, so dataclasses.replace() leaves it empty and a new version recomputes it.
    _header: str = field(default="", init=False, repr=False, compare=False)

    @property
    def protected(self) -> bool:
        """True for what no compression may lose: L0/L1, pinned facts, anomalies, failure reasons
        (feedback is made pinned and anomalous; a superseded one is released)."""
        return self.layer <= 1 or self.pinned or self.anomaly  # L0/L1 (a plain int: see compressible)

    @property
    def is_compression_summary(self) -> bool:
        return self.source.startswith(COMPRESSION_SOURCE_PREFIX)

    def render(self) -> str:
        text = self.text
        if "[L" in text:  # (shown_text, inline: most texts hold none)
            text = HEADERLIKE.sub("\\\\", text)
        return f"{self._header or item_header(self)}\n{text}\n"

    def to_dict(self, *, compact: bool = False) -> dict[str, Any]:
        """Every field; ``compact`` leaves out those at their default (a checkpoint row's form:
        :meth:`from_dict` fills them in). ``kind`` and ``id`` lead either way."""
        if compact:
            out: dict[str, Any] = {
                "kind": self.kind, "id": self.id, "layer": _LAYER_NAMES[self.layer], "text": self.text,
                "source": self.source, "round": self.round, "tokens": self.tokens, "seq": self.seq,
            }
            # One C-level fetch of the optional fields; most are at their default, and an identity test
            # in C (compress over is_not) leaves only the others (and equal copies) to look at.
            values = _optional(self)
            if values[1:] == _DEFAULT_TAIL:  # all but the role at their default (most items): one test in C
                if values[0] != "note":
                    out["role"] = values[0]
                return out
            for i in compress(_DEFAULT_INDEXES, map(is_not, values, _DEFAULT_VALUES)):
                value = values[i]
                if value != _DEFAULT_VALUES[i]:
                    out[_DEFAULT_NAMES[i]] = list(value) if isinstance(value, tuple) else value
            return out
        return {
            "kind": self.kind,
            "id": self.id,
            "layer": _LAYER_NAMES[self.layer],
            "text": self.text,
            "source": self.source,
            "round": self.round,
            "tokens": self.tokens,
            "seq": self.seq,
            "role": self.role,
            "pinned": self.pinned,
            "anomaly": self.anomaly,
            "key": self.key,
            "freshness": self.freshness,
            "status": self.status,
            "ref_id": self.ref_id,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "covers": list(self.covers),
            "carries": list(self.carries),
            "segment": self.segment,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextItem:
        if data.get("kind") != "context_item":
            raise ValueError(f"not a context item: kind={data.get('kind')!r}")
        # What cls(id=..., ...) does (no __post_init__), without the generated keyword __init__ of a
        # frozen dataclass (see _ItemFill): ~7 -> ~2 µs, and a fork or resume builds every item.
        item: Any = _ItemFill()
        item.id = str(data["id"])
        item.layer = _LAYER_BY_NAME[str(data["layer"])]
        item.text = str(data["text"])
        item.source = str(data["source"])
        item.round = int(data["round"])
        item.tokens = int(data["tokens"])
        item.seq = int(data["seq"])
        get = data.get  # fields at their default may be left out (to_dict(compact=True))
        item.role = get("role", "note")
        item.pinned = bool(get("pinned", False))
        item.anomaly = bool(get("anomaly", False))
        item.key = get("key")
        item.freshness = get("freshness", "fresh")
        item.status = get("status", "current")
        item.ref_id = get("ref_id")
        item.supersedes = get("supersedes")
        item.superseded_by = get("superseded_by")
        item.covers = tuple(get("covers", ()))
        item.carries = tuple(get("carries", ()))
        item.segment = int(get("segment", 0))
        item.kind = "context_item"
        item._header = ""
        item.__class__ = cls
        made: ContextItem = item
        return made


def compact_json(item: ContextItem) -> str | None:
    """The compact JSON of ``item.to_dict(compact=True)`` (as pydantic_core's ``to_json`` spells it) for
    the usual item, else None: ASCII strings (no surrogate, which ``to_json`` refuses), plain ints,
    every optional field but the role at its default. A step dumps its new interaction: ~1.9 -> ~1 µs."""
    text, source, item_id, role = item.text, item.source, item.id, item.role
    if not (text.isascii() and source.isascii() and item_id.isalnum() and item.kind == "context_item"
            and type(item.round) is int and type(item.tokens) is int and type(item.seq) is int
            and _optional_tail(item) == _DEFAULT_TAIL and (role == "note" or role in _ROLES)):
        return None
    # (an alphanumeric id and a role's name need no escaping)
    head = (f'{{"kind":"context_item","id":"{item_id}","layer":"{_LAYER_NAMES[item.layer]}",'
            f'"text":{encode_basestring(text)},"source":{encode_basestring(source)},"round":{item.round},'
            f'"tokens":{item.tokens},"seq":{item.seq}')
    return f'{head}}}' if role == "note" else f'{head},"role":"{role}"}}'


class _ItemFill:
    """ContextItem's slot layout without its frozen ``__setattr__``. A new item is filled here with plain
    attribute stores and then becomes a ContextItem by ``__class__`` assignment, which CPython allows
    between classes of the same slot layout: 21 ``object.__setattr__`` calls cost ~2 µs, these ~0.4 µs,
    and a step makes two items. Nothing else ever holds an _ItemFill."""

    __slots__ = ContextItem.__slots__


# The constructor's fields that have a default, with it, in declaration order (to_dict's order): the
# compact form leaves out those at their default; ItemRecord.make fills them in.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(ContextItem) if f.init and f.default is not MISSING}
_DEFAULT_NAMES = tuple(_DEFAULTS)
_DEFAULT_VALUES = tuple(_DEFAULTS.values())
_optional = attrgetter(*_DEFAULT_NAMES)
_DEFAULT_INDEXES = range(len(_DEFAULT_NAMES))
_DEFAULT_TAIL = _DEFAULT_VALUES[1:]
_optional_tail = attrgetter(*_DEFAULT_NAMES[1:])
_ROLES = frozenset(get_args(Role))
assert _DEFAULT_NAMES[0] == "role" and _DEFAULT_VALUES[0] == "note"  # to_dict(compact=True) looks at it first
_LAYER_BY_NAME = {layer.name: layer for layer in Layer}  # Layer[name] is a Python-level lookup: ~0.3 µs

_LAYER_NAMES = {layer: layer.name for layer in Layer}  # Enum.name is a Python-level descriptor: ~0.4 µs

# Stable sort by (layer, seq); ties keep insertion order, which the state preserves.
_ORDER = attrgetter("layer", "seq")


def view_order(items: Iterable[ContextItem]) -> tuple[ContextItem, ...]:
    """Items in view order: the current resume note first, then by layer and position."""
    ordered = sorted(items, key=_ORDER)
    resume = [i for i in ordered if i.role == "resume" and i.status == "current"]
    if resume:
        ordered = resume + [i for i in ordered if i not in resume]
    return tuple(ordered)


def item_header(item: ContextItem) -> str:
    """The one-line stamp in front of every item: layer, round, source, freshness, status.

    Field values (the source, the ids) are shown escaped where they hold ``|``, ``]``, ``\\`` or an
    unprintable character, so a value from outside (a tool's name, a path) can neither add a field nor
    end the header early: read with the escape rule, the header gives back exactly the item's fields."""
    source, item_id = item.source, item.id
    if "|" in source or "]" in source or "\\" in source or not source.isprintable():  # header_field, inline
        source = escape_field(source)
    if not item_id.isalnum():  # (ids are c1, c2, ...; a loaded state may hold any)
        item_id = header_field(item_id)
    if (item.status == "current" and not (item.supersedes or item.ref_id or item.anomaly or item.pinned)):
        # the usual item, as the general path below renders it
        return f"[{_LAYER_NAMES[item.layer]} | round {item.round} | from {source} | {item.freshness} | current | {item_id}]"
    parts = [_LAYER_NAMES[item.layer], f"round {item.round}", f"from {source}", item.freshness]
    if item.status == "superseded":
        parts.append(f"superseded by {header_field(item.superseded_by)}" if item.superseded_by else "superseded")
    else:
        parts.append("current")
    if item.supersedes:
        parts.append(f"supersedes {header_field(item.supersedes)}")
    if item.ref_id:
        parts.append(f"ref {header_field(item.ref_id)}")
    if item.anomaly:
        parts.append("anomaly")
    if item.pinned:
        parts.append("pinned")
    parts.append(item_id)
    return "[" + " | ".join(parts) + "]"
