"""What a checkpoint row holds: the run's spec for its first row, and the parts of the checkpoint (plain
data) that :meth:`Checkpointer._write <harness_lab.persistence.checkpoint.Checkpointer>` builds each step.

The spec is read back as untrusted input (:func:`stored_spec`): a store is a file anyone with write access
can edit, and resume acts on what the spec says (the workspace it writes in, the actions it takes). Every
field is checked, none may be unknown; the first row binds the spec (:func:`spec_binding`: its sha256 and
its workspace, written in the same transaction), so an edited spec is refused, not acted on.

The checkpoint is of the row form (:data:`~harness_lab.persistence.checkpoint_record.ROW_FORM`, read back by
:meth:`Checkpoint.from_row <harness_lab.persistence.checkpoint_record.Checkpoint.from_row>`): fields at their
default, and what the row's columns and step record hold, are left out. Most rows hold only what changed
since the row before (schema 8; the store hands readers the fold, whole: ``store/fold.py``).
:class:`_RowData` is the Checkpointer's base class, so its methods cost the hot path no more than they
would as the Checkpointer's own.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from ..contract import ControlContract, canonical_json
from ..errors import StoreError
from ..proposers.scripted import ScriptedProposer
from ..sandbox.policy import Isolation
from ._context_rows import ContextRows
from .checkpoint_record import Checkpoint, row_error

if TYPE_CHECKING:
    from ..loop.run_like import RunLike as Run  # a Protocol: no import of run.py (one-way arrows)

__all__ = ["ALWAYS_KEPT", "PERSISTED", "StoredSpec", "run_spec", "spec_binding",
           "stored_spec"]  # harness_lab.persistence.checkpoint re-exports run_spec

# memory.persist's categories (contract.PERSIST_CATEGORIES says what each is): the checkpoint fields and
# the run-state entries each keeps. A category the contract leaves out is not written, and the row names it
# (``not_persisted``); resume then starts it afresh and says so in its report, rather than rebuild it.
PERSISTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "current_scope": (("completed_scope",), ("observed", "context")),
    "decisions": ((), ("gates", "proposer")),
    "failures": (("verification", "failure_root_cause"), ("repair", "attempts")),
    "next_action": (("pending", "next_step"), ()),
}
# What every checkpoint keeps, ``persist: []`` too, because resume cannot continue safely without it:
# the contract version (a changed contract is refused), the state and stop reason (a finished or blocked
# run stays so), step, seq and usage (budget spent stays spent: else each resume would grant a new one),
# the workspace and artifact hashes (resume proves the workspace is the run's before writing in it), the
# receipt (the accepted bytes' binding), and a parked gate's request with its proposal (run state
# ``waiting`` and ``pending``: what a human approves must be exactly what was asked; never act then ask).
ALWAYS_KEPT: tuple[str, ...] = ("contract_version", "state", "stop_reason", "step", "seq", "usage", "workspace_hash",
                                "artifact_sha256", "receipt", "waiting", "pending")

_SEP = ',"'


def run_spec(run: Run) -> dict[str, Any]:
    """How to rebuild this run in another process (redacted before it is stored). Its ``contract`` is
    shared with the next spec of the same contract object: read it, do not change it."""
    proposer: dict[str, Any] = {"kind": type(run.proposer).__name__}
    if isinstance(run.proposer, ScriptedProposer):
        proposer = {"kind": "scripted", "actions": list(run.proposer.actions), "then": run.proposer.then}
    return {
        "kind": "run_spec",
        "scenario": run.scenario,
        "contract": _contract_dump(run.contract),
        "workspace": str(run.workspace),
        "validation": run.validation,
        "proposer": proposer,
        "repair": run.repair.spec() if run.repair is not None else None,  # its state is in each row
        # resume keeps it; left out at "auto", so specs of runs that chose nothing stay as they were
        **({"isolation": run.isolation} if run.isolation != "auto" else {}),
    }


def _contract_dump(contract: ControlContract) -> dict[str, Any]:
    """``contract.model_dump(mode="json")``, kept for the last contract object asked (~20 µs: every fork of
    a run registers its contract again). A frozen contract's content never changes."""
    global _LAST_CONTRACT
    last = _LAST_CONTRACT  # read once: another thread may replace it meanwhile
    if last is None or last[0]() is not contract:
        last = _LAST_CONTRACT = (weakref.ref(contract), contract.model_dump(mode="json"))
    return last[1]


# The last contract run_spec dumped (weakly: a contract dropped is not kept alive), and its dump.
_LAST_CONTRACT: tuple[weakref.ref[ControlContract], dict[str, Any]] | None = None


def spec_binding(spec: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint fields of a run's first row that bind its spec (as registered: redacted): the spec's
    sha256 and its workspace (named apart, so a refusal can say which field)."""
    return {"spec_sha256": _spec_sha256(spec), "workspace": spec.get("workspace")}


def _spec_sha256(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode("utf-8", "surrogatepass")).hexdigest()


class _ProposerSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: StrictStr
    actions: list[Any] | None = None  # raw proposals (a malformed one is data, refused when proposed)
    then: Literal["repeat_last", "finish"] | None = None

    @model_validator(mode="after")
    def _scripted(self) -> _ProposerSpec:
        if self.kind == "scripted" and (not self.actions or self.then is None):
            raise ValueError("a scripted proposer needs a non-empty list of actions and 'then'")
        if self.kind != "scripted" and (self.actions is not None or self.then is not None):
            raise ValueError(f"a {self.kind} proposer has no actions or 'then'")
        return self


class _RepairSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_retries: Annotated[StrictInt, Field(ge=0)] | None = None


class StoredSpec(BaseModel):
    """A run's spec as :func:`run_spec` wrote it, read back strictly (older specs lack the optional fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["run_spec"] = "run_spec"
    scenario: StrictStr | None = None
    contract: ControlContract
    workspace: StrictStr
    validation: StrictBool = True
    proposer: _ProposerSpec | None = None  # None: an old spec; its run resumes only with a proposer passed
    repair: _RepairSpec | None = None
    isolation: Isolation = "auto"  # absent: the run was started with "auto"

    @model_validator(mode="after")
    def _absolute(self) -> StoredSpec:
        # Relative, a workspace would be resolved against whatever folder resume is started in.
        if not os.path.isabs(self.workspace) or "\0" in self.workspace:
            raise ValueError(f"workspace {self.workspace[:200]!r} is not an absolute path")
        return self


def stored_spec(run_id: str, spec: object, first: Checkpoint | None = None) -> StoredSpec:
    """The spec ``spec`` of run ``run_id`` (as the store holds it, parsed), checked field by field; with
    ``first`` (the run's first checkpoint), also bound to it: the workspace the run recorded at
    creation and the spec's sha256 must be the ones that row holds (a row written before it held them
    binds nothing). Any problem is one
    :class:`~harness_lab.errors.StoreError` naming the run and the field."""
    if not isinstance(spec, dict):
        raise StoreError(f"run {run_id!r}: its stored spec is not a JSON object ({type(spec).__name__})")
    try:
        parsed = StoredSpec.model_validate(spec)
    except ValidationError as exc:
        raise row_error(f"run {run_id!r}: its stored spec", exc) from None
    recorded, sha = (first.workspace, first.spec_sha256) if first is not None else (None, None)
    if recorded is None or sha is None:
        # Not asked, or a run registered by an older harness-lab: resume still proves the workspace by the
        # hash its last checkpoint holds (a missing one is refused there).
        return parsed
    if parsed.workspace != recorded:
        raise StoreError(f"run {run_id!r}: its stored spec names the workspace {parsed.workspace!r}, not "
                         f"{recorded!r}, the one the run recorded at creation; the store was edited: refused, "
                         "nothing written")
    if _spec_sha256(spec) != sha:
        raise StoreError(f"run {run_id!r}: its stored spec is not the one the run registered (sha256 "
                         f"{_spec_sha256(spec)[:12]}, recorded {sha[:12]}); the store was edited: refused, "
                         "nothing written")
    return parsed


class _RowData:
    """The parts of the checkpoint a :class:`~harness_lab.persistence.checkpoint.Checkpointer` builds each row, as plain
    data (encoded once, by orjson, at the store boundary); its ``__init__`` sets these attributes, its
    ``_observe`` and ``adopt`` the slow-moving fields."""

    run: Run
    _rows: ContextRows
    _drop: tuple[str, ...]  # run-state keys left out: memory.exclude's (not secret categories), unpersisted ones
    _unkept: list[str]  # the categories memory.persist leaves out (the row names them)
    _keep: frozenset[str]  # the optional checkpoint fields memory.persist keeps
    _artifacts: dict[str, str]
    _verification: dict[str, Any] | None
    _failure: str | None

    def _run_state(self, state: dict[str, Any], decisions: int) -> dict[str, Any]:
        """The row's ``run_state``. A loop's row holds only the gates: ``hinted`` and ``warned`` are left out
        when false, ``last_decision`` when it is the usage's ``decisions`` (Checkpoint.from_row fills them in)."""
        gates = state.get("gates") if len(state) == 1 else None
        if gates is None or type(last := gates["last_decision"]) is not int:
            return state
        held: dict[str, Any] = {"recent": gates["recent"]}
        if gates["hinted"]:
            held["hinted"] = True
        if gates["warned"]:
            held["warned"] = True
        if last != decisions:
            held["last_decision"] = last
        return {"gates": held}

    def _optional(self, data: dict[str, Any], workspace_hash: str | None) -> None:
        """The checkpoint's fields that a row leaves out at their default, in Checkpoint's order."""
        run, keep = self.run, self._keep
        if run.executor.observed and "completed_scope" in keep:
            data["completed_scope"] = sorted(run.executor.observed)
        if self._artifacts:
            data["artifact_sha256"] = self._artifacts
        if workspace_hash is not None:
            data["workspace_hash"] = workspace_hash
        if self._verification is not None and "verification" in keep:
            data["verification"] = self._verification
        if self._failure is not None and "failure_root_cause" in keep:
            data["failure_root_cause"] = self._failure
        if "pending" in keep and (pending := _pending(run)):
            data["pending"] = pending
        if self._drop:
            data["excluded"] = list(self._drop)
        if self._unkept:
            data["not_persisted"] = self._unkept
        if (source := self._rows.context_from) is not None:
            data["context_from"] = source


def _pending(run: Run) -> list[str]:
    if run.state.terminal:
        return []
    items = []
    if run.waiting is not None:
        items.append(f"a human decision on {run.waiting.category} ({run.waiting.action_kind}) from step {run.waiting.step}")
    if run.receipt is None:
        items.append(f"an accepted {run.contract.verification.report.path}")
    return items


def _next_step(run: Run) -> str:
    if run.state.terminal:
        return f"none: {run.state.value}"
    if run.waiting is not None:
        return "approve() or reject(reason) the parked proposal"
    return f"step {run.step_no + 1}: ask the proposer"
