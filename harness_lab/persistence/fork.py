"""Fork a run from a checkpoint ``"<run>@<step>"`` or a snapshot of it (see :meth:`Run.fork
<harness_lab.loop.run.Run.fork>`): a new run id and workspace; the original run, its rows and its files are
left untouched. A refused fork (an unknown checkpoint or snapshot, a run id taken, another contract,
no copy of the files) raises one line and leaves no row, folder or file behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..context import ContextManager
from ..errors import RunStateError, StoreError
from ..loop.repair import RepairPolicy
from ..proposers.base import Proposer
from ..proposers.scripted import ScriptedProposer
from ..store import Store
from ..timeline.budget import check_budget, spend
from ..timeline.files import files_at, write_files, write_new
from ..timeline.records import BudgetChoice
from .checkpoint import Checkpointer
from .checkpoint_record import Checkpoint
from .resume import _CHECKPOINT_ID, _continue, _first_missing, _load, _trace_in_store

if TYPE_CHECKING:
    from .resume import ResumableRun as Run  # a Protocol: no import of run.py (one-way arrows)

__all__ = ["fork_run"]

_F = TypeVar("_F", bound="Run")  # fork_run gives back a run of the class it was given

# Without a store nothing records a run's forks: each run counts the ids it handed out here, so its
# forks are -fork1, -fork2, ... (weak: a closed, dropped run takes its count with it).
_FORKS_NAMED: weakref.WeakKeyDictionary[Run, int] = weakref.WeakKeyDictionary()
# The fork's first scan keeps up to this many bytes of the files it proves in memory rather than in
# its snapshot store (Sandbox.hold_blobs): a folder and a file per blob were most of a fork's cost.
# Past it they are linked from the source's store, or written, as before.
_HELD_BYTES = 1 << 22


def fork_run(run: _F, checkpoint_id: str, *, new_run_id: str | None = None,
             workspace: str | Path | None = None, budget: BudgetChoice = "keep",
             files: dict[str, str] | None = None) -> _F:
    """See :meth:`Run.fork <harness_lab.loop.run.Run.fork>` and the module docstring. ``files``: the checkpoint's
    files as the store holds them (path -> sha256), when the caller read them already (``fork_at``)."""
    store = run.checkpoints.store if run.checkpoints is not None else run._travel_store  # Run.open's
    check_budget(budget)
    match = _CHECKPOINT_ID.match(checkpoint_id)
    # What can be refused is refused before anything is made.
    if new_run_id is not None and store is not None and store.has_run(new_run_id):
        raise StoreError(f"run id {new_run_id!r} exists already in the store; choose another id for the fork")
    if match is None and checkpoint_id not in {s.id for s in run.sandbox.snapshots()}:
        raise RunStateError(f"{checkpoint_id!r} is neither a checkpoint '<run>@<step>' nor a snapshot of run "
                            f"{run.run_id}")
    if match is not None and store is None:
        raise RunStateError(f"run {run.run_id} has no store: checkpoint {checkpoint_id} does not exist")
    loaded = _load(store, match["run"], int(match["step"])) if match is not None and store is not None else None
    if loaded is not None and loaded[0].contract_version != run.contract.version:
        # The fork runs under this run's contract: another run's checkpoint may hold another one.
        raise RunStateError(f"checkpoint {loaded[0].id} was taken under contract {loaded[0].contract_version[:12]}; "
                            f"run {run.run_id}'s is {run.contract.version[:12]}: fork it from its own run")
    target = Path(workspace) if workspace is not None else None
    if target is not None and target.is_dir() and any(target.iterdir()):
        raise RunStateError(f"{target}: a fork needs an empty workspace")
    made = _first_missing(target) if target is not None else None
    # A checkpoint holding its context (not left out by memory.persist) replaces the fork's at once.
    fork = _new_fork(run, new_run_id, workspace, restores_context=loaded is not None and loaded[1] is not None)
    try:
        return _fill_fork(run, fork, checkpoint_id, loaded, new_run_id or _fork_id(run, store), store, budget, files)
    except BaseException:
        fork.close()
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        elif target is not None:  # it was empty: empty it again
            for child in target.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        raise


def _new_fork(run: _F, new_run_id: str | None, workspace: str | Path | None, *, restores_context: bool) -> _F:
    proposer: Proposer = run.proposer
    if isinstance(proposer, ScriptedProposer):  # its own copy: the original's position is untouched
        proposer = ScriptedProposer(proposer.actions, then=proposer.then)
    make: Callable[..., _F] = type(run)  # the run's own class: this module never imports run.py
    fork = make(contract=run.contract, proposer=proposer, evidence=run.evidence, workspace=workspace,
                validation=run.validation, approver=run.approver, clock=run.clock, run_id=new_run_id or "fork",
                resume=True, repair=RepairPolicy.from_spec(run.repair.spec()) if run.repair is not None else None,
                isolation=run.isolation, context=ContextManager() if restores_context else None)
    fork.scenario = run.scenario
    if any(fork.workspace.iterdir()):
        fork.close()
        raise RunStateError(f"{fork.workspace}: a fork needs an empty workspace")
    return fork


def _fill_fork(run: Run, fork: _F, checkpoint_id: str,
               loaded: tuple[Checkpoint, dict[str, Any] | None, dict[str, str]] | None, fork_id: str,
               store: Store | None, budget: BudgetChoice = "keep", files: dict[str, str] | None = None) -> _F:
    if loaded is not None:
        checkpoint, context, texts = loaded
        stored = _fork_files(run, checkpoint, fork, store, files)
        _continue(fork, checkpoint, context, f"fork of checkpoint {checkpoint_id}", store)
        # Its own rows were redacted under this contract (the fork's): their item texts stand as they
        # are, and its first row can name the checkpoint instead of storing the context again.
        # A checkpoint of another run (a fork's source, from the fork's timeline) was checked above to be
        # under this very contract: its rows were redacted the same way.
        own = checkpoint.contract_version == fork.contract.version and context is not None
        items = texts if own else None
        source = checkpoint.id if own else None
    else:
        snap = run.sandbox.materialize(checkpoint_id, fork.workspace)
        fork.sandbox.adopt_blobs(run.sandbox, checkpoint_id)
        if snap.run_state is None:
            raise RunStateError(f"snapshot {checkpoint_id} holds no run state")
        fork.continue_from(snap.run_state, step=run.step_no, seq=run.events[-1].seq if run.events else 0,
                           usage=run.usage, source=f"fork of snapshot {checkpoint_id}")
        items, source, stored = None, None, None
    if budget != "keep":
        fork.usage = spend(fork.usage, budget)
        fork.gates.started_at = fork.clock.now() - fork.usage.elapsed_s
    fork.run_id = fork_id
    if store is not None and not getattr(store, "read_only", False):  # Run.open(path) opened it read-only
        _trace_in_store(fork)
        fork.checkpoints = Checkpointer(store, fork, fresh=True, loaded=items, like=run.checkpoints,
                                        context_from=source, files_stored=stored, id_free=True)
    fork.sandbox.hold_blobs(0)  # the first scan (the first row's) is done: later ones store as they go
    return fork


def _fork_files(run: Run, checkpoint: Checkpoint, fork: Run, store: Store | None,
                files: dict[str, str] | None = None) -> dict[str, str] | None:
    """Put the checkpoint's files in the fork's (empty) workspace; the files (path -> sha256) when they
    came from the store (whose bytes it holds already: the fork's first row does not read them again)."""
    # The fork's first scan hashes every copied file (proven, not remembered); holding what it stores
    # in memory (or sharing the source's blobs past the budget) spares storing each file again.
    if run.read_only is None and run.sandbox.workspace_hash() == checkpoint.workspace_hash:
        fork.sandbox.hold_blobs(_HELD_BYTES, share=run.sandbox)
        if not _copy_known(run, fork):
            shutil.copytree(run.workspace, fork.workspace, symlinks=True, dirs_exist_ok=True)
        return None
    # The files the store kept beside the checkpoint's row (schema 7: harness_lab.timeline.files).
    if files is None and store is not None:
        files = files_at(store, checkpoint.run_id, checkpoint.step)
    if store is not None and files is not None:
        # The fork's sandbox is told each file it is given (bytes checked against their sha256): its first
        # scan stats them, and does not read and hash them all again.
        fork.sandbox.hold_blobs(_HELD_BYTES)
        write_files(fork.workspace, files, store, f"checkpoint {checkpoint.id}", fork.sandbox)
        return files
    for snap in reversed(run.sandbox.snapshots()):
        if snap.workspace_hash == checkpoint.workspace_hash:
            run.sandbox.materialize(snap.id, fork.workspace)
            fork.sandbox.adopt_blobs(run.sandbox, snap.id)
            return None
    raise RunStateError(f"no copy of the workspace as it was at checkpoint {checkpoint.id} (the workspace moved on, "
                        "the store kept no files for it and no snapshot matches its hash); fork from a snapshot id instead")


def _copy_known(run: Run, fork: Run) -> bool:
    """Copy the source's workspace file by file, as the hash just proved it (its manifest: each file's
    sha256 and mode), telling the fork's sandbox what it wrote: its first scan then stats the files, as a
    fork from a step's does. Only plain files and folders, up to the bytes held in memory; a file that
    changed since the hash (its bytes are not its sha256 any more) leaves it to copytree: False, nothing written."""
    manifest = run.sandbox.manifest()
    if any(entry[0] not in ("f", "d") for entry in manifest.values()):
        return False
    files: list[tuple[str, str, bytes, int | None]] = []
    size = 0
    for path, (kind, sha, mode) in sorted(manifest.items()):
        if kind == "f":
            data = run.sandbox.read_bytes(path, _HELD_BYTES - size + 1)
            if data is None or (size := size + len(data)) > _HELD_BYTES or hashlib.sha256(data).hexdigest() != sha:
                return False
            files.append((path, sha, data, mode))
    folders = [(path, mode) for path, (kind, _, mode) in sorted(manifest.items()) if kind == "d"]
    for path, _ in folders:  # parents first (sorted); an empty folder too
        (fork.workspace / path).mkdir(mode=0o700)
    write_new(fork.workspace, files, fork.sandbox)
    for path, mode in reversed(folders):  # after their files: a folder's mode may forbid writing in it
        os.chmod(fork.workspace / path, mode)
    return True


def _fork_id(run: Run, store: Store | None) -> str:
    """With a store: the first ``<run>-fork<n>`` not in it (a fork registers at once). Without: the next n."""
    if store is None:
        n = _FORKS_NAMED[run] = _FORKS_NAMED.get(run, 0) + 1
        return f"{run.run_id}-fork{n}"
    n = 1
    while store.has_run(f"{run.run_id}-fork{n}"):
        n += 1
    return f"{run.run_id}-fork{n}"
