"""``Run.fork(at_step=n)`` and ``Run.rollback(to_step=n)``: start again from the state at step n, with
the files the store kept for that step (no snapshot needed) and the budget the caller chose.

What can be refused is refused before anything is made or written: a step out of range, a crashed or
closed run, a budget that is not one, a step whose files the store does not hold (a store written
before schema 7): one line naming the value.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import RunStateError
from ..persistence.resume import continue_checkpoint, load_checkpoint
from ..records.events import Note
from ..store import Store
from .budget import check_budget, spend
from .files import files_at, restore_files
from .records import ROLLED_BACK, BudgetChoice
from .travel import check_step, travel_store

if TYPE_CHECKING:
    from ..persistence.resume import ResumableRun as Run  # a Protocol: no import of run.py (one-way arrows)

__all__ = ["fork_at", "rollback_to"]

_F = TypeVar("_F", bound="Run")  # fork_at gives back a run of the class it was given


def fork_at(run: _F, n: int, *, budget: BudgetChoice, new_run_id: str | None,
            workspace: str | Path | None) -> _F:
    """See :meth:`Run.fork <harness_lab.loop.run.Run.fork>`."""
    from ..persistence.fork import fork_run

    _check_usable(run, "fork")
    store = travel_store(run)
    n, owner = check_step(run, store, n)
    check_budget(budget)
    files = _held_files(store, owner, n)
    return fork_run(run, f"{owner}@{n}", new_run_id=new_run_id, workspace=workspace, budget=budget, files=files)


def rollback_to(run: Run, n: int, *, budget: BudgetChoice) -> None:
    """See :meth:`Run.rollback <harness_lab.loop.run.Run.rollback>`: the state, context and files of step n;
    the step count goes on (rows are never rewritten), the spend is the budget chosen."""
    _check_usable(run, "roll back")
    store = travel_store(run)
    n, owner = check_step(run, store, n)
    check_budget(budget)
    files = _held_files(store, owner, n)
    checkpoint, context = load_checkpoint(store, owner, n)
    if checkpoint.contract_version != run.contract.version:
        raise RunStateError(f"step {n} of run {run.run_id} was taken under another contract: fork it instead")
    step_no, seq = run.step_no, run._seq
    restore_files(run.sandbox, files, store, f"step {n} of run {owner}")
    continue_checkpoint(run, checkpoint, context, f"step {n} (rollback)", store)
    run.step_no, run._seq = step_no, max(seq, run._seq)  # the count goes on: the next row is step_no + 1
    run.usage = spend(run.usage, budget)
    run.gates.started_at = run.clock.now() - run.usage.elapsed_s
    run._ws_hash = run.sandbox.workspace_hash(rescan=True)
    # In the next step's record: what its proposer sees is step n's context, not the row before it
    # (Run.at reads this).
    run._emit(Note, topic=ROLLED_BACK, message=f"rolled back to step {n} of run {owner}",
              data={"run_id": owner, "step": n, "tokens": run.usage.tokens})


def _held_files(store: Store, run_id: str, n: int) -> dict[str, str]:
    files = files_at(store, run_id, n)
    if files is None:
        raise RunStateError(f"step {n} of run {run_id}: the store holds no files for it (written before "
                            "schema 7); fork from a checkpoint or snapshot id instead")
    return files


def _check_usable(run: Run, what: str) -> None:
    if run.closed:
        raise RunStateError(f"run {run.run_id} is closed: cannot {what} it (Run.open(store, run_id) reopens it)")
    if run.crashed is not None:
        raise RunStateError(f"run {run.run_id} {run._crash_why()}: resume it first, then {what} it")
