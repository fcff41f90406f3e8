"""``Run.history``, ``Run.at(n)`` and ``Run.open``: a run's steps folded back from its store rows.

``at(n)`` reads a bounded number of rows whatever n and the history's length: row n (the record and
checkpoint), the context of row n-1 (its last whole state and at most ``FULL_EVERY`` change logs, as a
resume does) and the manifest rows of steps n-1 and n (see :mod:`harness_lab.timeline.files`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..checkpoint_record import ROW_ERRORS, Checkpoint, row_error
from ..context import ContextManager, ContextView
from ..contract import load_contract
from ..errors import RunStateError
from ..events import Restored, StepRecord, StopReason, Usage, load_step_row
from ..evidence import EvidenceCatalogue
from ..paths import data_dir
from ..proposers.scripted import ScriptedProposer
from ..repair import RepairPolicy
from ..resume import bound_spec, continue_checkpoint, load_checkpoint, resume_note
from ..scenarios import load_scenario
from ..store import SQLiteStore, Store, StoredStep
from .files import file_changes, files_at
from .records import StepPoint, StepView

if TYPE_CHECKING:
    from ..run import Run

__all__ = ["history", "open_run", "step_view", "travel_store"]

_R = TypeVar("_R", bound="Run")


def travel_store(run: Run) -> Store:
    """The store a run's past is read from; a run without one cannot travel in time (one line)."""
    if run._travel_store is not None:
        return run._travel_store
    if run.checkpoints is None:
        raise RunStateError(f"run {run.run_id} has no store: give it InMemoryStore() or SQLiteStore(path) "
                            "to travel in time")
    return run.checkpoints.store


def step_range(run: Run, store: Store) -> tuple[int, int]:
    """The first and last committed step of the run (a fork's first is the step it was forked at)."""
    first, last = store.first_step(run.run_id), store.last_step(run.run_id)
    if first is None or last is None:
        raise RunStateError(f"run {run.run_id} has no committed step in its store")
    return first.step, last.step


def check_step(run: Run, store: Store, n: object) -> int:
    """``n`` as a step of the run, or one line naming it and the range (nothing read beyond the range)."""
    first, last = step_range(run, store)
    if not isinstance(n, int) or isinstance(n, bool) or not first <= n <= last:
        raise RunStateError(f"step {n!r} is out of range: run {run.run_id} has steps {first}..{last}")
    return n


def history(run: Run) -> list[StepPoint]:
    """See :attr:`Run.history <harness_lab.run.Run.history>`."""
    store = travel_store(run)
    step_range(run, store)
    points = []
    for row in store.steps(run.run_id, 0):
        checkpoint, record = _parse(row)
        points.append(_point(row, checkpoint, record))
    return points


def step_view(run: Run, n: int) -> StepView:
    """See :meth:`Run.at <harness_lab.run.Run.at>`."""
    store = travel_store(run)
    n = check_step(run, store, n)
    first, _ = step_range(run, store)
    row = store.step(run.run_id, n)
    checkpoint, record = _parse(row)
    point = _point(row, checkpoint, record)
    context: ContextView | None = None
    manager: ContextManager | None = None
    if n > first and record is not None:
        before, state = load_checkpoint(store, run.run_id, n - 1)
        if state is not None:
            manager = ContextManager.from_state(state, ref_loader=store.blob)
            if any(type(e) is Restored and e.source.startswith("checkpoint ") for e in record.events):
                # A resume put its note in front of the proposer before this step (its row holds it).
                manager.add_resume_note(resume_note(before), round=before.step)
            context = manager.view()
            limit = run.contract.budget.max_tokens
            if limit is not None:
                spent = Usage.model_validate(before.usage).tokens
                context = context.with_tokens_left(max(0, limit - spent))
    files = files_at(store, run.run_id, n)
    earlier = files_at(store, run.run_id, n - 1) if n > first else {}
    now = files or {}
    view = StepView(
        step=n, point=point, context=context,
        proposal=record.proposal if record else None, decision=record.decision if record else None,
        result=record.tool_result if record else None, verdict=record.verdict if record else None,
        stop=_stop(checkpoint, record), files=now,
        changes=file_changes(earlier or {}, now, store.file_data),
    )
    view._file_bytes = store.file_data
    view._ref = _ref_reader(run, store, n, manager)
    return view


def _ref_reader(run: Run, store: Store, n: int, manager: ContextManager | None) -> Any:
    def read(ref_id: str) -> str:
        # What read_ref saw at step n: the context the step started from; an output the step itself
        # stored (its result names it) is in the context after the step.
        contexts = [manager] if manager is not None else []
        for ctx in contexts + [_context_after(store, run.run_id, n)]:
            if ctx is None:
                continue
            try:
                return ctx.read_ref(ref_id)
            except (KeyError, ValueError):
                continue
        raise RunStateError(f"no reference {ref_id!r} in run {run.run_id}'s context at step {n}")
    return read


def _context_after(store: Store, run_id: str, n: int) -> ContextManager | None:
    _, state = load_checkpoint(store, run_id, n)
    return ContextManager.from_state(state, ref_loader=store.blob) if state is not None else None


def _parse(row: StoredStep) -> tuple[Checkpoint, StepRecord | None]:
    try:
        checkpoint = Checkpoint.from_row(row)
        record = load_step_row(row.record) if row.record != "null" else None
    except ROW_ERRORS as exc:
        raise row_error(f"checkpoint {row.run_id}@{row.step}", exc) from None
    return checkpoint, record


def _stop(checkpoint: Checkpoint, record: StepRecord | None) -> StopReason | None:
    """The stop the step made (not one an earlier step made and the run still carries)."""
    if record is None or record.state_after == record.state_before and not record.state_after.terminal:
        return None
    held = checkpoint.run_state.get("stop_reason")
    if not held or record.state_before.terminal:
        return None
    return StopReason.model_validate(held)


def _point(row: StoredStep, checkpoint: Checkpoint, record: StepRecord | None) -> StepPoint:
    stop = _stop(checkpoint, record)
    proposal = record.proposal if record is not None else None
    return StepPoint(
        step=row.step, state=checkpoint.state,
        decision=record.decision.verdict if record is not None else None,
        tool=proposal.action.kind if proposal is not None and proposal.action is not None else None,
        stop=stop.code if stop is not None else None,
        accepted=record.verdict.accepted if record is not None and record.verdict is not None else None,
        workspace_hash=checkpoint.workspace_hash,
        spent=Usage.model_validate(checkpoint.usage), at=row.at,
    )


def open_run(cls: type[_R], db: str | Path | Store, run_id: str) -> _R:
    """See :meth:`Run.open <harness_lab.run.Run.open>`: nothing is written to the store or the run's workspace."""
    owned = isinstance(db, (str, Path))
    store: Store = SQLiteStore(db, create=False, read_only=True) if isinstance(db, (str, Path)) else db
    try:
        info = store.run_info(run_id)
        spec = bound_spec(store, info)
        checkpoint, context = load_checkpoint(store, run_id)
        scenario = spec.scenario
        contract = (load_contract(data_dir() / "contracts" / f"{load_scenario(scenario).contract}.yaml")
                    if scenario is not None else spec.contract)
        recorded = spec.proposer
        actions = recorded.actions if recorded is not None and recorded.actions is not None else []
        then = recorded.then if recorded is not None and recorded.then is not None else "finish"
        # A run of another proposer is inspected the same way; a fork of it is given one (fork.proposer = ...).
        run = cls(contract=contract, proposer=ScriptedProposer(actions, then=then),
                  evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), validation=spec.validation,
                  run_id=run_id, resume=True,
                  repair=RepairPolicy.from_spec(spec.repair.model_dump() if spec.repair is not None else None),
                  isolation=spec.isolation)  # its own temporary workspace: the run's own is never touched
    except BaseException:
        if owned:
            store.close()
        raise
    try:
        run.scenario = scenario
        continue_checkpoint(run, checkpoint, context, f"checkpoint {checkpoint.id} (opened read-only)", store)
    except BaseException:
        run.close()
        if owned:
            store.close()
        raise
    run.read_only = "opened read-only (Run.open)"
    run._travel_store, run._travel_store_owned = store, owned
    return run

