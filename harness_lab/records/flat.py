"""Flat actions (every argument a plain ``str``, at most a minimum length): checked, built and spelled
as JSON here, in Python, with exactly the results pydantic and ``json`` give for them, in a fraction of
the time (parse ~1.4 µs of validation and ~2.2 µs of ``Proposal`` validation; the canonical JSON ~3 µs).
A step parses, fingerprints and describes one proposal, and most proposals are flat.

Whatever is not plainly flat (a non-``str`` value, a non-ASCII string, which pydantic may refuse when it
holds a lone surrogate; a missing argument; a short one) returns None here and takes the pydantic path,
which also words the error. tests/loop/test_gates_fast_paths.py pins the equality over generated input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any, Literal, TypeVar, get_args, get_origin

from annotated_types import MinLen
from pydantic import BaseModel

__all__ = ["MISSING", "RECORD_SLOTS", "REQUIRED", "FlatSpec", "JsonTemplate", "SharedFieldsSet", "built", "flat_dump",
           "flat_json", "flat_spec", "json_template", "shared_fields"]

_M = TypeVar("_M", bound=BaseModel)
REQUIRED = object()
MISSING = object()

# (name, minimum length, default or REQUIRED) per argument, in field order
FlatSpec = tuple[tuple[str, int, object], ...]


def flat_spec(model: type[BaseModel], kind: str) -> FlatSpec | None:
    """The model's arguments when it is flat: a ``kind`` literal, plain ``str`` fields (at most a minimum
    length), no validators, serializers, aliases, exclusions, factories or config beyond frozen and
    extra="forbid"; None for any other model (it keeps the pydantic path)."""
    decorators = model.__pydantic_decorators__
    if (decorators.validators or decorators.field_validators or decorators.root_validators
            or decorators.model_validators or decorators.field_serializers or decorators.model_serializers
            or decorators.computed_fields or model.__pydantic_post_init__ or model.__private_attributes__):
        return None
    if set(model.model_config) - {"frozen", "extra"} or model.model_config.get("extra") != "forbid":
        return None
    spec: list[tuple[str, int, object]] = []
    for name, info in model.model_fields.items():
        if (info.alias is not None or info.validation_alias is not None or info.serialization_alias is not None
                or info.default_factory is not None or info.exclude):
            return None
        if name == "kind":
            if get_origin(info.annotation) is not Literal or get_args(info.annotation) != (kind,) or info.metadata:
                return None
            continue
        lengths = [m.min_length for m in info.metadata if isinstance(m, MinLen)]
        if info.annotation is not str or len(lengths) != len(info.metadata):
            return None
        default = REQUIRED if info.is_required() else info.default
        if default is not REQUIRED and type(default) is not str:
            return None
        spec.append((name, lengths[0] if lengths else 0, default))
    return tuple(spec)


class SharedFieldsSet(set[str]):
    """One fields set for every record built alike (a step makes six records, each with a set the
    collector must track): read-only, so no record can change another's; a copy is a plain set, which
    is what pydantic's ``model_copy`` copies and updates."""

    def _read_only(self, *args: object) -> Any:
        raise TypeError("a shared fields set is read-only: copy it first")

    add = discard = remove = pop = clear = _read_only
    update = intersection_update = difference_update = symmetric_difference_update = _read_only
    __ior__ = __iand__ = __isub__ = __ixor__ = _read_only

    def copy(self) -> set[str]:
        return set(self)

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: object) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[type[set[str]], tuple[list[str]]]:
        return set, (list(self),)


def shared_fields(names: Iterable[str]) -> SharedFieldsSet:
    """The shared fields set holding ``names`` (one per combination; a run sees a handful)."""
    key = frozenset(names)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = SharedFieldsSet(key)
    return found


_SHARED: dict[frozenset[str], SharedFieldsSet] = {}


def built(model: type[_M], values: dict[str, Any], fields_set: set[str]) -> _M:
    """An instance holding exactly what validation would have stored: what ``model_construct`` does,
    at a fifth of the cost (it walks aliases and defaults; this sets pydantic's four slots directly)."""
    instance = _new(model)
    _set_dict(instance, values)
    _set_fields_set(instance, fields_set)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


_new = object.__new__
# The setters of pydantic's four slots (__dict__, fields set, extra, private); the step's record
# builders (harness_lab.loop._step_records) inline built() with them.
RECORD_SLOTS = tuple(BaseModel.__dict__[slot].__set__ for slot in (
    "__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"))
_set_dict, _set_fields_set, _set_extra, _set_private = RECORD_SLOTS


# A flat kind's sorted-key JSON as constant text around its str values: for think
# ("think", (('{"kind": "think", "thought": ', "thought"),), "}"), so a fingerprint is a few concatenations
JsonTemplate = tuple[str, tuple[tuple[str, str], ...], str]


def json_template(spec: FlatSpec, kind: str) -> JsonTemplate:
    """The kind, each str value's name with the constant text before it, and the text after the last."""
    pending, parts = "{", []
    for i, key in enumerate(sorted(["kind", *(s[0] for s in spec)])):
        pending += ("" if i == 0 else ", ") + encode_basestring_ascii(key) + ": "
        if key == "kind":
            pending += encode_basestring_ascii(kind)
        else:
            parts.append((pending, key))
            pending = ""
    return kind, tuple(parts), pending + "}"


def flat_json(values: Mapping[str, Any], template: JsonTemplate) -> str | None:
    """``json.dumps(values, sort_keys=True)`` for a flat action's fields; None unless they are exactly
    its kind and plain str values."""
    kind, parts, tail = template
    if len(values) != len(parts) + 1 or type(given := values.get("kind")) is not str or given != kind:
        return None
    text = ""
    for before, name in parts:
        value = values.get(name)
        if type(value) is not str:
            return None
        text += before + encode_basestring_ascii(value)
    return text + tail


def flat_dump(values: Mapping[str, Any], size: int) -> dict[str, Any] | None:
    """``model_dump(mode="json")`` of a flat action (its fields, in field order, all plain ``str``:
    the JSON form is the values themselves); None if a value is not a str."""
    if len(values) != size:
        return None
    for value in values.values():
        if type(value) is not str:
            return None
    return dict(values)
