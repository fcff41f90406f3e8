"""``Run.history``, ``Run.at(n)`` and ``Run.open``: a run's steps folded back from its store rows.

``at(n)`` reads a bounded number of rows whatever n and the history's length: row n (the record and
checkpoint), the context of row n-1 (its last whole state and at most ``FULL_EVERY`` change logs, as a
resume does) and the manifest rows of steps n-1 and n (see :mod:`harness_lab.timeline.files`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..context import ContextManager, ContextView
from ..contract import load_contract
from ..errors import RunStateError
from ..evidence import EvidenceCatalogue
from ..loop.repair import RepairPolicy
from ..paths import data_dir
from ..persistence.checkpoint_record import ROW_ERRORS, Checkpoint, row_error
from ..persistence.resume import bound_spec, continue_checkpoint, load_checkpoint, resume_note
from ..proposers.base import Proposer
from ..proposers.scripted import FunctionProposer, ScriptedProposer
from ..records.events import Note, Restored, StepRecord, StopReason, Usage, load_step_row
from ..scenarios import load_scenario
from ..store import SQLiteStore, Store, StoredStep
from .files import file_changes, files_at
from .records import ROLLED_BACK, StepPoint, StepView

if TYPE_CHECKING:
    from ..persistence.resume import ResumableRun as Run  # a Protocol: no import of run.py (one-way arrows)

__all__ = ["check_step", "history", "lineage", "open_run", "step_range", "step_view", "travel_store"]

_R = TypeVar("_R", bound="Run")
# The points history() made, by run (see there); a run dropped takes its points with it.
_POINTS: weakref.WeakKeyDictionary[Run, tuple[Store, dict[tuple[str, int], StepPoint]]] = weakref.WeakKeyDictionary()
# Each run's first row, by store (see _first_row).
_FIRSTS: weakref.WeakKeyDictionary[Store, dict[str, tuple[int, str | None]]] = weakref.WeakKeyDictionary()


def travel_store(run: Run) -> Store:
    """The store a run's past is read from; a run without one cannot travel in time (one line)."""
    if run._travel_store is not None:
        return run._travel_store
    if run.checkpoints is None:
        raise RunStateError(f"run {run.run_id} has no store: give it InMemoryStore() or SQLiteStore(path) "
                            "to travel in time")
    return run.checkpoints.store


def lineage(store: Store, run_id: str, last: int | None = None) -> list[tuple[str, int, int]]:
    """``(run_id, first, last)`` of the rows that make the run's timeline, oldest first: a fork (whose first
    row names the checkpoint it was forked from) continues its source's steps before the fork point,
    followed back through forks of forks; the run's own rows from its first on. ``last``: the run's last
    step, when its own checkpointer knows it (not read again)."""
    segments: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    upto: int | None = None
    while True:
        first = _first_row(store, run_id)
        if first is not None and upto is None and last is None:
            row = store.last_step(run_id)
            last = row.step if row is not None else None
        if first is None or (upto is None and last is None):
            if segments:
                break  # the source's rows are gone: the timeline starts at the fork
            raise RunStateError(f"run {run_id} has no committed step in its store")
        # A source holds the fork point (its first row's step) and every step before it.
        end = upto if upto is not None else last
        assert end is not None
        if first[0] <= end:
            segments.append((run_id, first[0], end))
        seen.add(run_id)
        parent = first[1].rpartition("@")[0] if first[1] else ""
        if not parent or parent in seen:
            break
        run_id, upto = parent, first[0] - 1
    return segments[::-1]


def _first_row(store: Store, run_id: str) -> tuple[int, str | None] | None:
    """The step of the run's first row and the checkpoint it was forked from (None: no row). A committed
    row never changes (rows are only appended): read once per store object."""
    known = _FIRSTS.get(store)
    if known is None:
        known = _FIRSTS[store] = {}
    hit = known.get(run_id)
    if hit is None:
        row = store.first_step(run_id)
        if row is None:
            return None
        hit = known[run_id] = (row.step, _parse(row)[0].context_from if row.step > 0 else None)
    return hit


def _lineage(run: Run, store: Store) -> list[tuple[str, int, int]]:
    """The run's :func:`lineage`; its last step from its checkpointer when that writes to ``store``."""
    log = run.checkpoints
    return lineage(store, run.run_id, log.last_step if log is not None and log.store is store else None)


def _owner(segments: list[tuple[str, int, int]], n: int) -> str:
    """The run whose row holds step ``n`` of the timeline."""
    return next(run_id for run_id, first, last in segments if first <= n <= last)


def step_range(run: Run, store: Store) -> tuple[int, int]:
    """The first and last step of the run's timeline (see :func:`lineage`)."""
    segments = _lineage(run, store)
    return segments[0][1], segments[-1][2]


def check_step(run: Run, store: Store, n: object,
               segments: list[tuple[str, int, int]] | None = None) -> tuple[int, str]:
    """``n`` as a step of the run and the run whose row holds it, or one line naming ``n`` and the range
    (nothing read beyond the range). ``segments``: the run's :func:`lineage`, when read already."""
    segments = segments if segments is not None else _lineage(run, store)
    first, last = segments[0][1], segments[-1][2]
    if not isinstance(n, int) or isinstance(n, bool) or not first <= n <= last:
        raise RunStateError(f"step {n!r} is out of range: run {run.run_id} has steps {first}..{last}")
    return n, _owner(segments, n)


def history(run: Run) -> list[StepPoint]:
    """See :attr:`Run.history <harness_lab.loop.run.Run.history>`. A committed row never changes: the points
    made once are kept with the run, and a later call parses only the rows committed since (a dashboard
    asks after every step)."""
    store = travel_store(run)
    known = _POINTS.get(run)
    if known is None or known[0] is not store:
        known = _POINTS[run] = (store, {})
    cache = known[1]
    points = []
    for run_id, first, last in _lineage(run, store):
        start = first
        while start <= last and (run_id, start) in cache:
            points.append(cache[run_id, start])
            start += 1
        for row in store.steps(run_id, start, last) if start <= last else ():
            checkpoint, record = _parse(row)
            point = cache[run_id, row.step] = _point(row, checkpoint, record)
            points.append(point)
    return points


def step_view(run: Run, n: int) -> StepView:
    """See :meth:`Run.at <harness_lab.loop.run.Run.at>`."""
    store = travel_store(run)
    segments = _lineage(run, store)
    n, owner = check_step(run, store, n, segments)
    first = segments[0][1]
    earlier_owner = _owner(segments, n - 1) if n > first else None
    row = store.step(owner, n)
    checkpoint, record = _parse(row)
    point = _point(row, checkpoint, record)
    context, manager = _seen(run, store, record, earlier_owner, n) if earlier_owner is not None else (None, None)
    now = files_at(store, owner, n) or {}
    earlier = (files_at(store, earlier_owner, n - 1) or {}) if earlier_owner is not None else {}
    view = StepView(
        step=n, point=point, context=context,
        proposal=record.proposal if record else None, decision=record.decision if record else None,
        result=record.tool_result if record else None, verdict=record.verdict if record else None,
        stop=_stop(checkpoint, record), files=now,
        changes=file_changes(earlier, now, store.file_data),
    )
    view._file_bytes = store.file_data
    view._ref = _ref_reader(owner, store, n, manager)
    return view


def _seen(run: Run, store: Store, record: StepRecord | None, earlier_owner: str,
          n: int) -> tuple[ContextView | None, ContextManager | None]:
    """The view the proposer of step ``n`` was given: the context after step n-1 (``earlier_owner``'s row)
    with the tokens left then; after a resume, with its note; after a rollback between the steps, the
    context of the step rolled back to. None when nothing was proposed, or after a rollback to a snapshot
    (its context lives in the process's snapshot folder, not in the store)."""
    if record is None:
        return None, None
    rolled = _rolled_back(record)
    if rolled is not None and "snapshot" in rolled:
        return None, None
    basis_run, basis = (str(rolled["run_id"]), int(rolled["step"])) if rolled is not None else (earlier_owner, n - 1)
    before, state = load_checkpoint(store, basis_run, basis)
    if state is None:
        return None, None
    manager = ContextManager.from_state(state, ref_loader=store.blob)
    if rolled is None and any(type(e) is Restored and e.source.startswith("checkpoint ") for e in record.events):
        # A resume put its note in front of the proposer before this step (its row holds it).
        manager.add_resume_note(resume_note(before), round=before.step)
    context = manager.view()
    limit = run.contract.budget.max_tokens
    if limit is not None:
        spent = int(rolled["tokens"]) if rolled is not None else Usage.model_validate(before.usage).tokens
        context = context.with_tokens_left(max(0, limit - spent))
    return context, manager


def _rolled_back(record: StepRecord | None) -> dict[str, Any] | None:
    """The last rollback between the step before and this one (its note in this step's record), if any."""
    notes = [e for e in record.events if type(e) is Note and e.topic == ROLLED_BACK] if record is not None else []
    return notes[-1].data if notes else None


def _ref_reader(run_id: str, store: Store, n: int, manager: ContextManager | None) -> Any:
    def read(ref_id: str) -> str:
        # What read_ref saw at step n: the context the step started from; an output the step itself
        # stored (its result names it) is in the context after the step.
        contexts = [manager] if manager is not None else []
        for ctx in contexts + [_context_after(store, run_id, n)]:
            if ctx is None:
                continue
            try:
                return ctx.read_ref(ref_id)
            except (KeyError, ValueError):
                continue
        raise RunStateError(f"no reference {ref_id!r} in run {run_id}'s context at step {n}")
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
        run_id=row.run_id, step=row.step, state=checkpoint.state,
        decision=record.decision.verdict if record is not None else None,
        tool=proposal.action.kind if proposal is not None and proposal.action is not None else None,
        stop=stop.code if stop is not None else None,
        accepted=record.verdict.accepted if record is not None and record.verdict is not None else None,
        workspace_hash=checkpoint.workspace_hash,
        spent=Usage.model_validate(checkpoint.usage), at=row.at,
    )


def _no_proposer(run_id: str, kind: str) -> Any:
    def propose(view: ContextView) -> object:
        raise RunStateError(f"run {run_id} used a {kind} proposer and was opened without one: "
                            "pass Run.open(..., proposer=) or set fork.proposer before stepping a fork")
    return propose


def open_run(cls: Callable[..., _R], db: str | Path | Store, run_id: str, proposer: Proposer | None = None) -> _R:
    """See :meth:`Run.open <harness_lab.loop.run.Run.open>`: nothing is written to the store or the run's workspace."""
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
        if proposer is None and recorded is not None and recorded.actions is not None and recorded.then is not None:
            proposer = ScriptedProposer(recorded.actions, then=recorded.then)
        elif proposer is None:  # inspected all the same; a fork of it must be given one
            proposer = FunctionProposer(_no_proposer(run_id, recorded.kind if recorded else "custom"))
        run = cls(contract=contract, proposer=proposer,
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

