"""Parsing a raw proposal: what a proposer returned becomes a :class:`Proposal`.

A proposal is a claim, never a fact. :func:`parse_proposal` turns whatever a proposer returned
into a :class:`Proposal` whose ``action`` is a typed record (:mod:`harness_lab.records.actions`), or whose
``error`` says why not. Fields an action does not define (``verified: true``, ``"I checked all
sources"``) land in ``claims``: recorded, never trusted. Unknown kinds, bad arguments and malformed
proposals are data fed back to the proposer, never a crash. A proposal whose arguments are all plain
strings (most are) is checked and built without pydantic, with the same result (see :mod:`.flat`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .actions import (
    _FLAT_JSON,
    ACTION_FIELDS,
    ACTION_MODELS,
    EXTERNAL_KINDS,
    FLAT_SIZE,
    FLAT_SPECS,
    FORBIDDEN_KINDS,
    TOOL_KINDS,
    Action,
    ForbiddenAction,
    GatedAction,
)
from .flat import MISSING, REQUIRED, FlatSpec, built, flat_dump, flat_json, shared_fields

__all__ = ["Proposal", "ProposalError", "parse_proposal"]


class ProposalError(BaseModel):
    """Why a raw proposal could not become an action; fed back to the proposer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["proposal_error"] = "proposal_error"
    code: Literal["malformed", "unknown_kind", "bad_arguments"]
    message: str
    hint: str


_T = TypeVar("_T")


class _Once(Generic[_T]):
    """``functools.cached_property`` without the lock Python 3.11 takes on every first read (~1 µs a
    read; a step first reads a proposal's JSON, canonical form and description once each). The value
    lands in the instance ``__dict__``, as cached_property's does."""

    def __init__(self, make: Callable[[Any], _T]) -> None:
        self._make, self._name = make, make.__name__
        self.__doc__ = make.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Once[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> _T | _Once[_T]:
        if obj is None:
            return self
        value = obj.__dict__[self._name] = self._make(obj)
        return value


class Proposal(BaseModel):
    """One decision of the proposer, as parsed by the runtime."""

    model_config = ConfigDict(frozen=True, extra="forbid", ignored_types=(_Once,))

    kind: Literal["proposal"] = "proposal"
    raw: Any
    action: Action | None = None
    error: ProposalError | None = None
    claims: dict[str, Any] = Field(default_factory=dict)

    @_Once
    def action_json(self) -> dict[str, Any] | None:
        """The action as JSON-native data (``model_dump(mode="json")``), made once per proposal."""
        action = self.action
        if action is None:
            return None
        size = FLAT_SIZE.get(type(action))
        flat = flat_dump(action.__dict__, size) if size is not None else None
        return action.model_dump(mode="json") if flat is None else flat

    @_Once
    def canonical(self) -> str:
        """The action (or the raw proposal) as sorted-key JSON: what is hashed and compared."""
        action = self.action
        if (known := _ACTION_TEXTS.get(id(action))) is not None and known[0] is action:
            return known[1]  # a call parsed before (see _parse_flat)
        template = _FLAT_JSON.get(type(action)) if action is not None else None
        if template is not None and action is not None and (text := flat_json(action.__dict__, template)) is not None:
            return text
        payload = self.action_json
        return _CANONICAL.encode(self.raw if payload is None else payload)

    @property
    def args_sha256(self) -> str:
        """Hash of the exact action to run: what a human approves is what executes."""
        return hashlib.sha256(self.canonical.encode()).hexdigest()

    @property
    def arguments(self) -> dict[str, Any]:
        """The call's arguments as one flat mapping, without ``kind``: what ``run.edit_pending(name=...)``
        and ``run.approve(edited={name: ...})`` replace field by field (a gated external call's ``args``
        flat, as proposed; a call refused for its arguments: its raw fields)."""
        action = self.action
        if isinstance(action, GatedAction):
            return dict(action.args)
        if action is not None:
            return {k: v for k, v in (self.action_json or {}).items() if k != "kind"}
        raw = self.raw
        return {k: v for k, v in raw.items() if k != "kind"} if isinstance(raw, dict) else {}

    def describe(self) -> str:
        """The call as one line, e.g. ``read_file(path='notes.md')`` (made once: every observation shows it)."""
        action = self.action
        if (known := _ACTION_TEXTS.get(id(action))) is not None and known[0] is action:
            return known[2]  # a call parsed before (see _parse_flat): not even its _Once
        return self._described

    @_Once
    def _described(self) -> str:
        action = self.action
        if action is None:
            return f"invalid proposal ({self.error.code if self.error else '?'})"
        shown = _flat_shown(action.__dict__, size) if (size := FLAT_SIZE.get(type(action))) is not None else None
        if shown is None:
            args = self.action_json or {}
            shown = ", ".join(f"{k}={_short(v)}" for k, v in args.items() if k != "kind")
        return f"{action.kind}({shown})"


def _flat_shown(values: dict[str, Any], size: int) -> str | None:
    """The arguments part of ``describe()`` read off a flat action's fields (its JSON form is those
    very values, so no dump is made for it); None if they are not all plain str."""
    if len(values) != size:
        return None
    shown = []
    for key, value in values.items():
        if type(value) is not str:
            return None
        if key != "kind":
            text = repr(value)  # _short(value), inlined: describe() runs every step
            shown.append(f"{key}={text}" if len(text) <= 60 else f"{key}={text[:57]}...")
    return ", ".join(shown)


# json.dumps builds an encoder per call when given options; one shared encoder gives the same text.
_CANONICAL = json.JSONEncoder(sort_keys=True, default=str)


def parse_proposal(raw: object) -> Proposal:
    """Parse whatever a proposer returned; never raises."""
    try:
        if type(raw) is dict:  # the usual proposal first: a dict of a flat kind (see _parse_flat)
            kind = raw.get("kind")
            if type(kind) is str and (spec := FLAT_SPECS.get(kind)) is not None:
                if (again := _said_again(raw)) is not None:
                    return again
                if (flat := _parse_flat(raw, kind, spec)) is not None:
                    # its arguments are ASCII: only claims beside them may hold a lone surrogate
                    return _utf8(flat) if flat.claims else flat
        return _utf8(_parse(raw))
    except Exception as exc:  # a mapping whose methods raise, say: still data, never a crash
        return Proposal(raw=_safe_repr(raw), error=ProposalError(
            code="malformed", message=f"the proposal could not be read: {type(exc).__name__}: {_short(str(exc))}",
            hint='propose plain JSON data, e.g. {"kind": "read_evidence", "id": "..."}'))


def _parse(raw: object) -> Proposal:
    if type(raw) is dict:  # the usual proposal first: a dict of a flat kind (see _parse_flat)
        kind = raw.get("kind")
        if type(kind) is str and (spec := FLAT_SPECS.get(kind)) is not None:
            if (flat := _parse_flat(raw, kind, spec)) is not None:
                return flat
    elif isinstance(raw, Proposal):  # judged by its raw: a hand-built one's action may say otherwise
        return _parse(raw.raw)
    # type(raw) is dict first: isinstance against the Mapping ABC costs ~0.5 µs, and most are dicts
    if not (type(raw) is dict or isinstance(raw, Mapping)) or not isinstance(raw.get("kind"), str):
        return Proposal(raw=_jsonable(raw), error=ProposalError(
            code="malformed", message=f"a proposal must be a mapping with a string 'kind', got {_short(raw)}",
            hint='propose e.g. {"kind": "read_evidence", "id": "..."}'))
    raw_map = raw if type(raw) is dict else dict(raw)  # read only here: no copy needed
    kind = raw_map["kind"]
    if bad := [k for k in raw_map if not isinstance(k, str)]:  # JSON names are strings; so are argument names
        return Proposal(raw=_jsonable(raw_map), error=ProposalError(
            code="malformed", message=f"{kind}: argument names must be strings, got {_short(bad[0])}",
            hint="name every argument with a string, as JSON does"))
    if kind in FORBIDDEN_KINDS:
        args = {k: _jsonable(v) for k, v in raw_map.items() if k != "kind"}
        return Proposal(raw=_jsonable_map(raw_map), action=ForbiddenAction(requested_kind=kind, args=args))
    if kind in EXTERNAL_KINDS:
        args = {k: _jsonable(v) for k, v in raw_map.items() if k != "kind"}
        # JSON has no NaN/inf: the approval request (JSON) would show null, and its hash be null's,
        # while the action run carried NaN. What is approved must be what executes: refuse them.
        if (odd := next((k for k, v in args.items() if not _finite(v)), None)) is not None:
            return Proposal(raw=_jsonable_map(raw_map), error=ProposalError(
                code="bad_arguments", message=f"{kind}: argument {odd}: not a finite number (NaN and infinity are not JSON)",
                hint="give numbers as finite values, or as strings"))
        return Proposal(raw=_jsonable_map(raw_map), action=GatedAction.model_validate({"kind": kind, "args": args}))
    model = ACTION_MODELS.get(kind)
    if model is None:
        return Proposal(raw=_jsonable_map(raw_map), error=ProposalError(
            code="unknown_kind", message=f"unknown action kind {kind!r}",
            hint="allowed kinds: " + ", ".join(sorted(TOOL_KINDS))))
    fields = ACTION_FIELDS[kind]
    args = {k: v for k, v in raw_map.items() if k in fields}
    claims = {k: _jsonable(v) for k, v in raw_map.items() if k not in fields} if len(args) < len(raw_map) else {}
    try:
        # The kind is known: validate against its model directly (the union's tag lookup costs ~2 µs).
        action = model.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or kind
        return Proposal(raw=_jsonable_map(raw_map), claims=claims, error=ProposalError(
            code="bad_arguments", message=f"{kind}: argument {where}: {first['msg']}",
            hint=f"{kind} takes: " + ", ".join(sorted(fields - {'kind'})) if fields - {"kind"} else f"{kind} takes no arguments"))
    return Proposal(raw=_jsonable_map(raw_map), action=action, claims=claims)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(proposal: Proposal) -> Proposal:
    """``proposal``, or its refusal when its raw holds a lone surrogate (``json.loads('"\\ud800"')``
    makes one): no UTF-8 encoder takes it, so the step's row, ``--json`` and the trace could not be
    written (a traceback at the checkpoint). The raw is kept with U+FFFD in its place; a forbidden kind
    still blocks."""
    if _clean(proposal.raw):
        return proposal
    raw, claims = _repaired(proposal.raw), _repaired(proposal.claims)
    action = proposal.action
    if isinstance(action, ForbiddenAction):
        return Proposal(raw=raw, action=ForbiddenAction(requested_kind=_repaired(action.requested_kind),
                                                        args=_repaired(action.args)), claims=claims)
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return Proposal(raw=raw, claims=claims, error=ProposalError(
        code="bad_arguments" if isinstance(kind, str) else "malformed",
        message=f"{kind + ': ' if isinstance(kind, str) else ''}holds text that is not UTF-8 (a lone surrogate such "
                "as \\ud800)", hint="send valid UTF-8 text; a character outside the BMP as its pair of surrogates"))


def _clean(value: Any) -> bool:
    """No lone surrogate in any str of JSON-native ``value`` (keys included)."""
    if type(value) is str:
        return value.isascii() or _SURROGATE.search(value) is None
    if type(value) is dict:
        return all(_clean(k) and _clean(v) for k, v in value.items())
    if type(value) is list:
        return all(_clean(v) for v in value)
    return True


def _repaired(value: Any) -> Any:
    if type(value) is str:
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_repaired(k): _repaired(v) for k, v in value.items()}
    if type(value) is list:
        return [_repaired(v) for v in value]
    return value


def _parse_flat(raw_map: dict[Any, Any], kind: str, spec: FlatSpec) -> Proposal | None:
    """What the validating path below returns for a flat kind, built without pydantic; None when
    pydantic must judge (or word the error). One function, no helpers: it runs every step."""
    values: dict[str, Any] = {"kind": kind}  # what model_validate stores, in field order
    given = ["kind"]  # and its fields set
    for name, min_length, default in spec:
        value = raw_map.get(name, MISSING)
        if value is MISSING:
            if default is REQUIRED:
                return None
            values[name] = default
        elif type(value) is str and len(value) >= min_length and value.isascii():  # lone surrogates: pydantic
            values[name] = value
            given.append(name)
        else:
            return None
    claims: dict[str, Any] = {}
    if len(given) < len(raw_map):  # keys beyond the arguments: claims (other keys than str: pydantic refuses)
        fields = ACTION_FIELDS[kind]
        for key, value in raw_map.items():
            if key not in fields:
                if type(key) is not str:
                    return None
                claims[key] = _jsonable(value)
        copied = _jsonable_map(raw_map)
    else:
        for key in raw_map:
            if type(key) is not str:
                copied = _jsonable(raw_map)
                break
        else:  # str keys, and every value was checked a plain str: the JSON copy is a plain copy
            copied = dict(raw_map)
    # A loop proposes the same few calls again and again: the action (frozen, plain str fields) is made
    # once per distinct call, and so are what a step reads of it (see _ACTION_TEXTS).
    kept = sum(map(len, values.values())) <= _SEEN_CHARS  # a long text (a report, a file) is not kept
    key = (tuple(given), *values.values())  # (the kind fixes how many values follow)
    action = _FLAT_SEEN.get(key) if kept else None
    if action is None:
        action = built(ACTION_MODELS[kind], values, shared_fields(given))
        if kept:
            _keep(key, action, kind, values)
    if kept and not claims:  # every key and value a str, as checked above: the same words again parse alike
        _SAID_SEEN[tuple(copied.items())] = action
    return built(Proposal, {"kind": "proposal", "raw": copied, "action": action, "error": None, "claims": claims},
                 _PROPOSAL_SET)


def _said_again(raw: dict[Any, Any]) -> Proposal | None:
    """What _parse_flat makes of ``raw`` when it parsed the same words before (keys in the same order, every
    key and value a str, no claims), without parsing them again; None otherwise."""
    try:
        action = _SAID_SEEN.get(items := tuple(raw.items()))
    except TypeError:  # an unhashable value: not a flat call of str arguments
        return None
    if action is None:
        return None
    for key, value in items:  # equal is not enough: a str subclass, or 1 == 1.0 == True, parses otherwise
        if type(key) is not str or type(value) is not str:
            return None
    return built(Proposal, {"kind": "proposal", "raw": dict(raw), "action": action, "error": None, "claims": {}},
                 _PROPOSAL_SET)


def _keep(key: tuple[Any, ...], action: Any, kind: str, values: dict[str, Any]) -> None:
    """Keep a short call's action for the next parse of it, with its canonical JSON and description."""
    if len(_FLAT_SEEN) >= 256:
        _FLAT_SEEN.clear()
        _ACTION_TEXTS.clear()
        _SAID_SEEN.clear()
    _FLAT_SEEN[key] = action
    canonical, shown = flat_json(values, _FLAT_JSON[type(action)]), _flat_shown(values, len(values))
    if canonical is not None and shown is not None:
        _ACTION_TEXTS[id(action)] = (action, canonical, f"{kind}({shown})")


_PROPOSAL_SET = shared_fields(("raw", "action", "claims"))
# (fields given, the action's values) -> the action _parse_flat made of them, shared by every proposal of it;
# only short calls, so the 256 kept hold at most ~1 MiB
_FLAT_SEEN: dict[tuple[Any, ...], Any] = {}
_SEEN_CHARS = 4096
# A kept call's raw (its items, in order) -> its action: a loop says the same words again and again.
_SAID_SEEN: dict[tuple[tuple[str, str], ...], Any] = {}
# id(action) -> (that action, its canonical JSON, its description): what Proposal.canonical and describe()
# would make again for each proposal of it (the action is kept alive by its entry: the id stays its own)
_ACTION_TEXTS: dict[int, tuple[Any, str, str]] = {}


def _jsonable(value: object) -> Any:
    plain = _plain_copy(value)
    if plain is not _NOT_PLAIN:
        return plain
    try:
        return json.loads(json.dumps(value, default=_safe_repr))
    except (TypeError, ValueError, RecursionError):  # a cycle, or nesting deeper than the encoder goes
        return _safe_repr(value)


def _jsonable_map(raw_map: Mapping[str, Any]) -> Any:
    """``_jsonable`` of a mapping with string keys, value by value when the whole will not encode
    (a cycle): the raw then reads back to the same action, not to one repr string."""
    plain = _plain_copy(raw_map if type(raw_map) is dict else dict(raw_map))
    if plain is not _NOT_PLAIN:
        return plain
    return {key: _jsonable(value) for key, value in raw_map.items()}


class _Repr(reprlib.Repr):
    """The fallback spelling: depth-limited, and an object whose repr raises is named by its type."""

    def repr_instance(self, obj: Any, level: int) -> str:
        try:
            text = repr(obj)
        except Exception:  # no address in it (reprlib's own fallback has one): hashes stay stable
            return f"<{type(obj).__name__}: repr failed>"
        return text if len(text) <= self.maxother else text[: self.maxother - 3] + "..."


_FALLBACK = _Repr()
_FALLBACK.maxlevel, _FALLBACK.maxstring, _FALLBACK.maxother = 8, 200, 200


def _safe_repr(value: object) -> str:
    """``repr(value)``; for an object whose repr raises or recurses too deep, a bounded spelling."""
    try:
        return repr(value)
    except Exception:  # RecursionError included
        return _FALLBACK.repr(value)


def _finite(value: object) -> bool:
    """No NaN or infinity anywhere in JSON-like data (``_jsonable``'s output)."""
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is dict:
        return all(_finite(item) for item in value.values())
    if type(value) is list:
        return all(_finite(item) for item in value)
    return True


_NOT_PLAIN = object()
_SCALARS = (str, int, float, bool, type(None))


def _plain_copy(value: object, depth: int = 0) -> Any:
    """A copy of JSON-native data (exact str/int/float/bool/None, lists, str-keyed dicts), equal to
    what the JSON round trip returns, built without it; ``_NOT_PLAIN`` for anything else (and for
    deep nesting, which may be a cycle: the round trip reports those). Plain loops, no generators:
    a proposal's arguments are copied every step."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > 32:
        return _NOT_PLAIN
    if kind is dict:
        copied: dict[str, Any] = {}
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return _NOT_PLAIN
            if type(item) not in _SCALARS and (item := _plain_copy(item, depth + 1)) is _NOT_PLAIN:
                return _NOT_PLAIN
            copied[key] = item
        return copied
    if kind is list:
        out: list[Any] = []
        for item in value:  # type: ignore[attr-defined]
            if type(item) not in _SCALARS and (item := _plain_copy(item, depth + 1)) is _NOT_PLAIN:
                return _NOT_PLAIN
            out.append(item)
        return out
    return _NOT_PLAIN


def _short(value: object, limit: int = 60) -> str:
    text = _safe_repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
