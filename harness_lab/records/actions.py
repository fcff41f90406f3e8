"""Typed actions: what a proposer may *ask* for, one frozen record per kind.

:mod:`harness_lab.records.proposal` parses a raw proposal into one of these (or a structured error).
Kinds that would change the contract, the validator or the run state are :class:`ForbiddenAction`
and end the run BLOCKED; the external side effects (:data:`EXTERNAL_KINDS`) are
:class:`GatedAction` and run only behind a human gate.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .flat import FlatSpec, flat_spec, json_template

__all__ = [
    "CONTEXT_KINDS",
    "FORBIDDEN_KINDS",
    "GATE_CATEGORIES",
    "TOOL_KINDS",
    "Action",
    "ActionBase",
    "BeginSubtask",
    "DeleteFile",
    "Finish",
    "FinishSubtask",
    "ForbiddenAction",
    "GatedAction",
    "ListDir",
    "ReadEvidence",
    "ReadFile",
    "ReadRef",
    "RunCommand",
    "SearchHistory",
    "Think",
    "WriteFile",
    "WriteReport",
]

# Requests that would change what decides: the contract, the validator, the run state.
FORBIDDEN_KINDS = frozenset(
    {"set_state", "set_run_state", "modify_contract", "replace_validator", "mark_verified", "write_run_state"}
)
# External side effects that exist only behind a human gate (contract human_gate.required_for).
EXTERNAL_KINDS = frozenset({"push", "release", "production_write", "send_message", "escalate_permission"})


class ActionBase(BaseModel):
    """The base class of every action."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str

    @property
    def gate_category(self) -> str:
        """The human-gate category this action falls under (matched against the contract)."""
        return self.kind

    @property
    def is_tool_call(self) -> bool:
        return True


class ReadEvidence(ActionBase):
    kind: Literal["read_evidence"] = "read_evidence"
    id: str = Field(min_length=1)


class WriteReport(ActionBase):
    kind: Literal["write_report"] = "write_report"
    text: str


class Finish(ActionBase):
    kind: Literal["finish"] = "finish"

    @property
    def is_tool_call(self) -> bool:
        return False


class ListDir(ActionBase):
    kind: Literal["list_dir"] = "list_dir"
    path: str = "."


class ReadFile(ActionBase):
    kind: Literal["read_file"] = "read_file"
    path: str = Field(min_length=1)


class WriteFile(ActionBase):
    kind: Literal["write_file"] = "write_file"
    path: str = Field(min_length=1)
    content: str


class DeleteFile(ActionBase):
    kind: Literal["delete_file"] = "delete_file"
    path: str = Field(min_length=1)

    @property
    def gate_category(self) -> str:
        return "delete"


def _number(value: object) -> object:
    """Refuse true/false where a number belongs: pydantic's lax mode reads them as 1 and 0, so
    ``"timeout": true`` ran with a one-second limit. (A number spelled as a string stays accepted.)"""
    if isinstance(value, bool):
        raise ValueError("a number is needed, not true/false")
    return value


class RunCommand(ActionBase):
    kind: Literal["run_command"] = "run_command"
    argv: tuple[str, ...] = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tool_type: str = "default"

    _timeout_number = field_validator("timeout", mode="before")(_number)


class ReadRef(ActionBase):
    kind: Literal["read_ref"] = "read_ref"
    ref: str = Field(min_length=1)
    start: int = Field(default=0, ge=0)
    end: int | None = Field(default=None, ge=0)

    _numbers = field_validator("start", "end", mode="before")(_number)

    @field_validator("end")
    @classmethod
    def _after_start(cls, end: int | None, info: ValidationInfo) -> int | None:
        # [start:end] with end <= start is always empty, which the executor only reports as "empty"
        start = info.data.get("start")
        if end is not None and isinstance(start, int) and end <= start:
            raise ValueError(f"end ({end}) must be after start ({start})")
        return end


class Think(ActionBase):
    """Write a thought down: no side effect, nothing read. The observation is the thought itself, so
    reasoning between tool calls is a recorded, budgeted step (and the pure no-op of the benchmarks)."""

    kind: Literal["think"] = "think"
    thought: str = Field(min_length=1)


class BeginSubtask(ActionBase):
    """Open a subtask of the proposer's plan: its goal sits in L2 while its steps run (seed 003, 3.2)."""

    kind: Literal["begin_subtask"] = "begin_subtask"
    name: str = Field(min_length=1)
    goal: str = Field(min_length=1)


class FinishSubtask(ActionBase):
    """Close the open subtask: its process collapses into one L3 conclusion (*conclusion*, or the
    harness's digest of the process when empty), stamped with round and source."""

    kind: Literal["finish_subtask"] = "finish_subtask"
    conclusion: str = ""


class SearchHistory(ActionBase):
    """Find stored history (what left the view, stored outputs) by relevance; hits open with read_ref."""

    kind: Literal["search_history"] = "search_history"
    query: str = Field(min_length=1)
    k: int = Field(default=5, ge=1, le=20)

    _k_number = field_validator("k", mode="before")(_number)


class GatedAction(ActionBase):
    """An external side effect (push, release, send_message, ...): runs only after approval."""

    kind: Literal["push", "release", "production_write", "send_message", "escalate_permission"]
    args: dict[str, Any] = Field(default_factory=dict)


class ForbiddenAction(ActionBase):
    """A request to change the contract, the validator or the run state: never executed."""

    kind: Literal["forbidden"] = "forbidden"
    requested_kind: str
    args: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_tool_call(self) -> bool:
        return False


Action = Annotated[
    ReadEvidence | WriteReport | Finish | ListDir | ReadFile | WriteFile | DeleteFile | RunCommand | ReadRef | Think | GatedAction
    | ForbiddenAction | BeginSubtask | FinishSubtask | SearchHistory,
    Field(discriminator="kind"),
]
ACTION_MODELS: dict[str, type[ActionBase]] = {
    "read_evidence": ReadEvidence, "write_report": WriteReport, "finish": Finish,
    "list_dir": ListDir, "read_file": ReadFile, "write_file": WriteFile, "delete_file": DeleteFile,
    "run_command": RunCommand, "read_ref": ReadRef, "think": Think,
    "begin_subtask": BeginSubtask, "finish_subtask": FinishSubtask, "search_history": SearchHistory,
}
# The actions the run's context answers (the subtask cycle and retrieval), not the sandbox.
CONTEXT_KINDS = frozenset({"begin_subtask", "finish_subtask", "search_history"})
ACTION_FIELDS = {kind: frozenset(model.model_fields) for kind, model in ACTION_MODELS.items()}
# Kinds whose arguments are all plain strings: parsed, dumped and spelled without pydantic (see flat)
FLAT_SPECS: dict[str, FlatSpec] = {k: spec for k, m in ACTION_MODELS.items() if (spec := flat_spec(m, k)) is not None}
_FLAT_JSON = {ACTION_MODELS[k]: json_template(spec, k) for k, spec in FLAT_SPECS.items()}
FLAT_SIZE = {ACTION_MODELS[k]: len(spec) + 1 for k, spec in FLAT_SPECS.items()}  # fields, kind included
TOOL_KINDS = frozenset(ACTION_MODELS) | EXTERNAL_KINDS
# What a contract's ``human_gate.required_for`` can name: the categories the gate matches actions by (a
# delete_file is gated as "delete"; finish, forbidden kinds and the context's own actions never reach the human gate).
GATE_CATEGORIES = frozenset(ACTION_MODELS) - {"finish", "delete_file"} - CONTEXT_KINDS | EXTERNAL_KINDS | {"delete"}
