"""The control contract: six fields, each with one owner, one copy every layer reads.

| field          | owner                | here                                        |
|----------------|----------------------|---------------------------------------------|
| trigger        | external system      | :class:`Trigger`                            |
| goal           | user approves        | :class:`Goal`                               |
| verification   | project validators   | :class:`Verification` (layers and checks)   |
| stop + budget  | scheduler            | :class:`Stop`, :class:`Budget`              |
| memory         | checkpoint store     | :class:`Memory` (what to persist / exclude) |
| human_gate     | user approves        | :class:`HumanGate`                          |

An optional seventh section, ``sandbox`` (:class:`SandboxDemand`), lets a contract demand isolation for
the commands a run executes (``sandbox: {isolation: required}``: a bwrap or unshare namespace, or the run
refuses before its first step) and name the TCP destinations they may reach (``network_allow:
["127.0.0.1:8001"]``, see :mod:`harness_lab.sandbox.netallow`).

The version is the sha256 of the canonical JSON form, so any change of any field (even one a model
only *suggested*) yields a different version, visible in every receipt and checkpoint. A ``sandbox``
section left at its default is not part of that form (nor of ``model_dump``): contracts written before
it existed keep their versions.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import weakref
from collections.abc import Collection
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)

from ._files import validate_file
from .contract_fields import AllChecksPass, SameRootCause, parse_allowlist, parse_failure, parse_success
from .records.actions import GATE_CATEGORIES
from .records.redaction import SECRET_CATEGORIES

__all__ = [
    "DEFAULT_GATED_KINDS",
    "RUN_STATE_EMPTY",
    "VERIFICATION_LAYERS",
    "Budget",
    "ControlContract",
    "FunctionalCheck",
    "Goal",
    "HumanGate",
    "Memory",
    "PERSIST_CATEGORIES",
    "ReportContract",
    "SandboxDemand",
    "Stop",
    "Trigger",
    "TriggerCheck",
    "Verification",
    "canonical_json",
    "load_contract",
]

DEFAULT_GATED_KINDS: tuple[str, ...] = (
    "push",
    "release",
    "delete",
    "production_write",
    "send_message",
    "escalate_permission",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Numbers and switches are taken as written: lax parsing read `max_decisions: true` as 1 and
# `min_distinct_citations: "2"` as 2, a mistyped field silently becoming a limit (an int is a float).
_Count = Annotated[int, Field(strict=True)]
_Seconds = Annotated[float, Field(strict=True)]
# A section name a heading can carry: not blank (a blank name matched an empty '#' heading).
_SectionName = Annotated[str, Field(pattern=r"\S")]


class TriggerCheck(BaseModel):
    """``still_valid: {check: <name>, <param>: <value>, ...}``: a check the run looks up by name in the
    mapping it was given (:data:`harness_lab.loop.triggers.DEFAULT_TRIGGER_CHECKS` by default) and runs at
    start and at resume; its other keys are the check's parameters (``path: ticket.open``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    check: Annotated[str, Field(strict=True, pattern=r"^\S+$")]

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Trigger(_Frozen):
    source: str = "manual"
    condition: str = "a user asked for this run"
    # A static switch, or a check re-verified at start and at resume (harness_lab.loop.triggers).
    still_valid: TriggerCheck | Annotated[bool, Field(strict=True)] = True

    @field_validator("still_valid", mode="before")
    @classmethod
    def _switch_or_check(cls, value: object) -> object:
        if isinstance(value, (bool, TriggerCheck)):
            return value
        if isinstance(value, dict):  # checked here: a union's errors would name its members, not the field
            if not isinstance(value.get("check"), str) or not value["check"].strip():
                raise ValueError(f"a check needs its name as 'check: <name>', got {value!r}")
            for key, param in value.items():
                if not isinstance(param, (str, int, float, bool)):
                    raise ValueError(f"parameter {key!r} of check {value['check']!r} must be a string, number "
                                     f"or switch, got {type(param).__name__}")
            return TriggerCheck.model_validate(value)
        raise ValueError(f"a switch (true or false) or {{check: <name>, <param>: <value>}}, got {value!r}")


class Goal(_Frozen):
    text: str
    approved_by: str = "user"


def _workspace_path(value: str) -> str:
    parts = value.replace("\\", "/").split("/")
    if not value.strip() or not parts[0] or ".." in parts or ":" in parts[0]:
        raise ValueError(f"must be a relative path inside the workspace, got {value!r}")
    return value


class ReportContract(_Frozen):
    """Seed 004's task contract for a research report."""

    path: str = "report.md"
    # Each section is a list of accepted names (English and Chinese), matched case-insensitively.
    sections: tuple[Annotated[tuple[_SectionName, ...], Field(min_length=1)], ...] = (
        ("Conclusion", "结论"),
        ("Evidence", "证据"),
        ("Limitations", "局限"),
    )
    min_distinct_citations: _Count = Field(default=2, ge=0)

    @field_validator("path")
    @classmethod
    def _inside_the_workspace(cls, value: str) -> str:
        # The validator reads the report through the sandbox, which refuses any other path: such a
        # contract could never be met (every finish 'report missing' until the budget ran out).
        return _workspace_path(value)


VERIFICATION_LAYERS: tuple[str, ...] = ("format", "functional", "goal")
"""The layers ``verification.checks`` may name, in the order a finish runs them (see
:mod:`harness_lab.loop._finish_check`): the report's structure, the named check commands, the goal reviewer."""

# A check's name is a word: it keys the receipt's results and the feedback line.
_CheckName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class FunctionalCheck(_Frozen):
    """One check of the functional layer: a command (an argv list, no shell) the harness runs in the run's
    sandbox at finish; it passes when the command exits 0 within ``timeout`` seconds."""

    name: _CheckName
    command: tuple[Annotated[str, Field(strict=True)], ...] = Field(min_length=1)
    timeout: _Seconds = Field(default=60.0, gt=0, le=3600)

    @field_validator("command", mode="before")
    @classmethod
    def _an_argv(cls, value: Any) -> Any:
        # A shell line given as one string would run as a program of that whole name, never as meant.
        if isinstance(value, str):
            raise ValueError(f"must be a list of arguments (no shell), e.g. [python3, -m, unittest], got {value!r:.60}")
        return value


class Verification(_Frozen):
    """What a finish must pass. ``checks`` names the layers run, in order (:data:`VERIFICATION_LAYERS`);
    ``functional`` the check commands of that layer (none: the layer does not apply), ``protected`` files
    the task forbids changing (path -> sha256 of the original; changed or deleted fails the layer) and
    ``allowed_files`` the only files the workspace may hold at finish (glob patterns; empty: not checked).
    The last three are left out of the canonical form while empty: report contracts keep their versions."""

    report: ReportContract = ReportContract()
    checks: tuple[str, ...] = VERIFICATION_LAYERS
    max_repairs: _Count = Field(default=3, ge=0)
    functional: tuple[FunctionalCheck, ...] = ()
    protected: dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(default_factory=dict)
    allowed_files: tuple[Annotated[str, Field(strict=True, pattern=r"\S")], ...] = ()

    @field_validator("checks")
    @classmethod
    def _known_layers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # A misspelt layer ("funtional") would silently drop that check from every finish.
        for name in value:
            if name not in VERIFICATION_LAYERS:
                close = difflib.get_close_matches(name, VERIFICATION_LAYERS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(VERIFICATION_LAYERS)}"
                raise ValueError(f"{name!r} is no verification layer; {hint}")
        if len(set(value)) != len(value):
            raise ValueError(f"{list(value)} names a layer twice")
        return value

    @field_validator("functional")
    @classmethod
    def _distinct_names(cls, value: tuple[FunctionalCheck, ...]) -> tuple[FunctionalCheck, ...]:
        names = [c.name for c in value]
        if twice := next((n for i, n in enumerate(names) if n in names[:i]), None):
            raise ValueError(f"check name {twice!r} given twice (the receipt keys results by name)")
        return value

    @field_validator("protected")
    @classmethod
    def _protected_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            _workspace_path(path)
        return value

    @model_serializer(mode="wrap")
    def _without_empty_functional(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out while empty, as ControlContract's sandbox: versions, receipts and stored specs of the
        # report contracts stay as they were before the functional layer existed.
        data: dict[str, Any] = handler(self)
        for name in ("functional", "protected", "allowed_files"):
            if not data.get(name):
                data.pop(name, None)
        return data


class Budget(_Frozen):
    """Seed 003's loop budgets, checked before each decision and call. A contract carries a token budget
    and a wall-clock limit by default (``null`` in a contract file, or ``with_budget(max_tokens=None)``,
    lifts one): a scripted report run spends under 5,000 tokens and milliseconds, a small local model
    1-3k tokens and 1-10 s a step, 8-24k tokens and under 80 s in 8 decisions; so 20,000 tokens stop a
    rambling model (warned at 80%, 16,000), and 600 s only a stalled one. The clock runs from the first
    step, also while a run waits for a human or for the next click in a notebook."""

    max_decisions: _Count = Field(default=8, ge=1)
    max_tool_calls: _Count = Field(default=5, ge=0)
    max_tokens: _Count | None = Field(default=20_000, ge=1)
    wall_clock_seconds: _Seconds | None = Field(default=600.0, gt=0)
    # Consecutive endpoint failures (the model's server down, 5xx, timeouts) before the run waits for
    # the endpoint (WAITING_FOR_ENDPOINT, endpoint_unavailable); they spend no decision.
    max_endpoint_failures: _Count = Field(default=3, ge=1)


class Stop(_Frozen):
    """``success`` and ``failure`` as written (text or a structured form); :attr:`rules` reads them as one
    typed rule (:mod:`harness_lab.loop.stop_rules`) that the Run, the repair policy and the external loop use.
    Text no rule reads is refused when the contract is loaded."""

    success: str | dict[str, Any] = "all verification checks pass"
    failure: str | dict[str, Any] = "same root cause failed twice"
    budget: Budget = Budget()

    @field_validator("success")
    @classmethod
    def _readable_success(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        parse_success(value)
        return value

    @field_validator("failure")
    @classmethod
    def _readable_failure(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        parse_failure(value)
        return value

    @property
    def rules(self) -> tuple[AllChecksPass, SameRootCause]:
        """(success, failure) as typed rules."""
        return parse_success(self.success), parse_failure(self.failure)


# What a checkpoint can keep beyond what resume strictly needs, by memory.persist's names (see
# harness_lab/persistence/_checkpoint_row.py for the fields each names, and what is always kept and why).
PERSIST_CATEGORIES: dict[str, str] = {
    "current_scope": "the evidence read (ids and sha256) and the context layers",
    "decisions": "the proposer's state and the convergence gate's recent calls",
    "failures": "the last verification result, the failure root cause and the repair policy's state",
    "next_action": "the next step and the pending items",
}
# What memory.exclude may name: a kind of secret (the redactor masks it), or an entry of the run state.
# A run's restorable state (loop.image.RunImage.capture) beyond ``state``, ``gates`` and ``context``: the
# entries a checkpoint row leaves out at these values (persistence.checkpoint_record fills them back in),
# and what persist.exclude may name. Here, below both the loop and persistence, which read it.
RUN_STATE_EMPTY: dict[str, Any] = {"stop_reason": None, "observed": {}, "proposer": None, "receipt": None,
                                   "waiting": None, "pending": None, "repair": None,
                                   "attempts": None}
_EXCLUDABLE = frozenset({*SECRET_CATEGORIES, "state", "gates", "context", *RUN_STATE_EMPTY})


class Memory(_Frozen):
    persist: tuple[str, ...] = ("current_scope", "decisions", "failures", "next_action")
    exclude: tuple[str, ...] = ("secrets", "raw_credentials")

    @field_validator("persist", "exclude")
    @classmethod
    def _known_names(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        # A misspelt name would silently drop a category from every checkpoint, or keep what should not be.
        known, why = ((PERSIST_CATEGORIES, "is no persist category, so nothing would be kept by it")
                      if info.field_name == "persist" else
                      (_EXCLUDABLE, "is no secret category nor run-state entry, so nothing would be excluded by it"))
        for name in value:
            _known(name, known, why)
        return value


class HumanGate(_Frozen):
    required_for: tuple[str, ...] = DEFAULT_GATED_KINDS
    timeout_seconds: _Seconds | None = Field(default=None, gt=0)

    @field_validator("required_for")
    @classmethod
    def _known_categories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # A misspelt category would silently take its human gate away: the action would run unasked.
        for name in value:
            _known(name, GATE_CATEGORIES, "is no gate category, so nothing would be gated by it")
        return value


def _known(name: str, known: Collection[str], why: str) -> None:
    """A ValueError of one line, with the closest known name, when ``name`` is not in ``known``."""
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(sorted(known))}"
        raise ValueError(f"{name!r} {why}; {hint}")


class SandboxDemand(_Frozen):
    """What the contract demands of the sandbox its commands run in. ``isolation`` as
    :attr:`SandboxPolicy.isolation <harness_lab.sandbox.SandboxPolicy>` minus "none": "auto" (the default)
    demands nothing, "required" a namespace (bwrap or unshare), "bwrap" or "unshare" that one."""

    isolation: Literal["auto", "required", "bwrap", "unshare"] = "auto"
    # TCP "host:port" pairs the commands may reach (SandboxPolicy.network_allow, see
    # harness_lab.sandbox.netallow); empty: no network. Needs a namespace: a machine without one refuses.
    network_allow: tuple[str, ...] = ()

    @field_validator("network_allow")
    @classmethod
    def _valid_destinations(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_allowlist(value)  # one line naming the bad entry
        return value

    @model_serializer(mode="wrap")
    def _without_empty_allowlist(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out while empty: contracts that demand only isolation keep the version they had before it.
        data: dict[str, Any] = handler(self)
        if not self.network_allow:
            data.pop("network_allow", None)
        return data


# ControlContract.version by id(contract): (a weak reference to the contract, its version); see version.
_VERSIONS: dict[int, tuple[weakref.ref[ControlContract], str]] = {}


def _forget_version(key: int, _: object) -> None:
    _VERSIONS.pop(key, None)  # the contract is gone: its id may name another one next


class ControlContract(_Frozen):
    name: str
    kind: Literal["control_contract"] = "control_contract"
    trigger: Trigger = Trigger()
    goal: Goal
    verification: Verification = Verification()
    stop: Stop = Stop()
    memory: Memory = Memory()
    human_gate: HumanGate = HumanGate()
    sandbox: SandboxDemand = SandboxDemand()

    @model_serializer(mode="wrap")
    def _without_default_sandbox(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out while it demands nothing: the canonical form (the version), receipts, stored specs and
        # golden traces of every contract that does not use it stay as they were before it existed.
        data: dict[str, Any] = handler(self)
        if self.sandbox == SandboxDemand():
            data.pop("sandbox", None)
        return data

    @property
    def version(self) -> str:
        # Cached by object (~35 µs a hash; a fork asked it three times), outside the model: model_copy()
        # would carry a cached field over to a changed copy. A frozen contract's content never changes.
        hit = _VERSIONS.get(id(self))
        if hit is not None and hit[0]() is self:
            return hit[1]
        version = hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()
        _VERSIONS[id(self)] = (weakref.ref(self, partial(_forget_version, id(self))), version)
        return version

    @property
    def budget(self) -> Budget:
        return self.stop.budget

    def with_budget(self, **limits: int | float | None) -> ControlContract:
        """A copy with some budget limits replaced (a new version), validated as a contract file's
        would be: an unknown limit or a value the budget forbids is a ValueError naming it."""
        if unknown := sorted(set(limits) - set(Budget.model_fields)):
            raise ValueError(f"with_budget: unknown budget limit {unknown[0]!r}; known: {', '.join(Budget.model_fields)}")
        try:
            budget = Budget.model_validate({**self.stop.budget.model_dump(), **limits})
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"with_budget: {'.'.join(str(p) for p in first['loc'])}: {first['msg']} "
                             f"(got {first.get('input')!r})") from None
        return self.model_copy(update={"stop": self.stop.model_copy(update={"budget": budget})})


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def load_contract(path: str | Path) -> ControlContract:
    """Load and validate a contract from YAML or JSON; bad input is a one-line ConfigError."""
    contract: ControlContract = validate_file(ControlContract, Path(path))
    return contract
