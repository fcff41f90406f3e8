"""The checkpoint record (seed 000), the read side of :class:`~harness_lab.persistence.checkpoint.Checkpointer`.

A row leaves out the fields at their default and the run state's entries at their empty value
(:data:`RUN_STATE_EMPTY`); reading fills them back in, so any single row reads whole. Rows of the
form :data:`ROW_FORM` (schema 6) also leave out what the rest of their row holds: read them with
:meth:`Checkpoint.from_row`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import from_json

from ..contract import RUN_STATE_EMPTY
from ..errors import StoreError
from ..records.states import RunState

if TYPE_CHECKING:
    from ..store import StoredStep

__all__ = ["ROW_ERRORS", "ROW_FORM", "RUN_STATE_EMPTY", "Checkpoint", "row_error"]

# What reading an edited or damaged row can raise (not JSON, a list where an object goes, a key missing, a
# string where a number goes, nesting past the parser's depth): each reader turns it into row_error's line.
ROW_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OverflowError)

# The kind of a checkpoint text that leaves out what its row's columns hold (run_id, step) and its step
# record (usage, and seq when it is the record's last event's), the next step when it is the usual
# "step N+1: ask the proposer", and the gates' flags when false and last_decision when it is the
# usage's decisions (schema 6). Texts of kind "checkpoint" hold them all.
ROW_FORM = "row_checkpoint"
_ROW_PREFIX = f'{{"kind":"{ROW_FORM}"'


class Checkpoint(BaseModel):
    """What is persisted after each step (read side; see :meth:`~harness_lab.persistence.checkpoint.Checkpointer.commit`). A row leaves
    out the fields at their default, and the entries of ``run_state`` at their empty value (its
    ``state`` when it is the checkpoint's): reading fills them in (schema 4; older rows hold all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["checkpoint"] = "checkpoint"
    run_id: str
    step: int
    seq: int
    contract_version: str
    state: RunState
    completed_scope: tuple[str, ...] = ()
    artifact_sha256: dict[str, str] = Field(default_factory=dict)
    workspace_hash: str | None = None
    verification: dict[str, Any] | None = None
    failure_root_cause: str | None = None
    pending: tuple[str, ...] = ()
    next_step: str
    usage: dict[str, Any]
    run_state: dict[str, Any]
    excluded: tuple[str, ...] = ()
    # memory.persist's categories this checkpoint does not hold (see harness_lab/persistence/_checkpoint_row.py: PERSISTED)
    not_persisted: tuple[str, ...] = ()
    context_base: int | None = None  # the step whose row holds the whole context state to replay from
    # A fork's rows before its first whole state: the checkpoint ("run@step") whose stored context the
    # base row stands for (that row holds no context of its own).
    context_from: str | None = None
    # A run's first row only (the one that registers it): its spec's sha256 and workspace, which bind the
    # spec to the run (see harness_lab/persistence/_checkpoint_row.py: stored_spec).
    spec_sha256: str | None = None
    workspace: str | None = None

    @property
    def id(self) -> str:
        return f"{self.run_id}@{self.step}"

    @classmethod
    def from_row(cls, row: StoredStep) -> Checkpoint:
        """The checkpoint a stored row holds, of either form (see :data:`ROW_FORM`)."""
        text = row.checkpoint
        if not text.startswith(_ROW_PREFIX):
            return cls.model_validate_json(text)
        data = from_json(text)
        if not isinstance(data, dict):  # (a form's prefix followed by something else: an edited row)
            raise ValueError(f"the checkpoint is a JSON {type(data).__name__}, not an object")
        if "usage" not in data or "seq" not in data:
            record = from_json(row.record)
            events = record.get("events") if isinstance(record, dict) else None
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise ValueError("its step record (which holds the usage and seq it leaves out) is not of its form")
            data.setdefault("usage", record["usage"])
            data.setdefault("seq", (events or [{}])[-1]["seq"])  # KeyError: no event
        data.update(kind="checkpoint", run_id=row.run_id, step=row.step)
        data.setdefault("next_step", f"step {row.step + 1}: ask the proposer")
        state, usage = data.get("run_state"), data["usage"]
        gates = state.get("gates") if isinstance(state, dict) else None  # else: the model names the field
        if isinstance(gates, dict) and len(gates) < 4:  # left out: false flags, the usual last decision
            last = usage.get("decisions", 0) if isinstance(usage, dict) else 0
            data["run_state"]["gates"] = {"recent": gates.get("recent", []), "hinted": gates.get("hinted", False),
                                          "warned": gates.get("warned", False),
                                          "last_decision": gates.get("last_decision", last)}
        return cls.model_validate(data)

    @model_validator(mode="before")
    @classmethod
    def _fill_run_state(cls, data: Any) -> Any:
        """The entries a row left out of ``run_state`` (never one that ``excluded`` dropped)."""
        state = data.get("run_state") if isinstance(data, dict) else None
        if isinstance(state, dict) and not _RUN_STATE_KEYS <= state.keys():
            excluded = data.get("excluded") or ()
            filled = {"state": data.get("state")} if "state" not in state and "state" not in excluded else {}
            filled.update((k, {} if v == {} else v) for k, v in RUN_STATE_EMPTY.items()
                          if k not in state and k not in excluded)
            data = {**data, "run_state": {**filled, **state}}
        return data


# run_state entries (RunImage.capture) left out of a row at RUN_STATE_EMPTY's values.
_RUN_STATE_KEYS = frozenset({"state", *RUN_STATE_EMPTY})


def row_error(where: str, exc: BaseException) -> StoreError:
    """One line for a stored row that cannot be read (``where``: "checkpoint R1@3", "the step record of R1@3"):
    the field and the problem of a validation error, else the error's first line."""
    if isinstance(exc, ValidationError) and exc.errors():
        # A misspelt field is reported as unknown and as missing: the unknown one first.
        first = next((e for e in exc.errors() if e["type"] == "extra_forbidden"), exc.errors()[0])
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        what = f"field {field}: {first['msg']}"
    elif isinstance(exc, KeyError):
        what = f"no {exc.args[0]!r} in it" if exc.args else "a key is missing"
    else:
        what = str(exc) or type(exc).__name__
    return StoreError(f"{where} is unreadable: {what.splitlines()[0][:300]}")
