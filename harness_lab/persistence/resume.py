"""Resume a checkpointed run in the seed's order (a fork from a checkpoint or snapshot: :mod:`harness_lab.persistence.fork`).

Before anything is built the store is read as untrusted input (:func:`bound_spec`): the run's spec is
checked field by field and must be the one its first row bound (its sha256 and workspace), and every row
read must have its shape; an edited or damaged store is one :class:`~harness_lab.errors.StoreError`
naming the run and the field or step. Then seed 000's order, each step a :class:`ResumeCheck` in
``run.resume_report``:

1. ``trigger``    the contract's trigger still holds (re-verified now: see :mod:`harness_lab.loop.triggers`);
2. ``workspace``  the workspace hash equals the checkpoint's, or differs only by the step that was
                  in flight at the crash (its write-ahead intent names the path, and a write killed
                  before its rename leaves a temporary file beside it, removed once the resume is
                  entered; a run_command names no path, so any change may be its outcome, and the
                  run ends effect_uncertain); anything else is a concurrent change: reported, never
                  overwritten. A checkpoint without a hash fails the check: nothing proves the folder
                  is the run's;
3. ``scope``      pending items and the last failure are loaded; ``memory`` (only when the contract's
                  ``memory.persist`` left a category out) names what the checkpoint did not hold,
                  so it is started afresh, not silently rebuilt;
4. ``prechecks``  cheap checks: the contract version, the evidence read so far, the artifact hash;
5. ``harness``    only when all of the above pass: the run state is restored, a resume note goes
                  into the context, and an effect in flight at the crash is settled: a workspace
                  write is redone (same bytes), anything whose outcome cannot be checked (push,
                  send_message, a command that changed files) ends the run BLOCKED as uncertain. A
                  delete_file whose target is gone (the rest as its intent found it) landed: the
                  next step records it as done, without deleting again.

A refused resume returns the run BLOCKED (``resume_refused``) in memory; the store is not written.
The resume first takes the run's lease (:meth:`Store.take_lease <harness_lab.store.Store.take_lease>`,
one transaction): a run another live process writes (a ``run --db`` or ``resume`` still going, or parked at
a gate it decides) is refused with :class:`~harness_lab.errors.RunStateError` naming it, before anything is
built or written; of two resumes started in the same instant exactly one goes on. A lease left by a
process that died is taken over. A run whose heartbeat says a live process of this machine drives it
(:func:`~harness_lab.persistence.heartbeat.driver_of`; one that holds no lease, such as an older harness-lab) is
refused too. A workspace path where no folder can be (a file stands there or above it) raises
:class:`~harness_lab.errors.WorkspaceError` instead: no run can be made on it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeGuard, TypeVar

from pydantic import BaseModel, ConfigDict

from ..clock import Clock
from ..contract import PERSIST_CATEGORIES, load_contract
from ..errors import ConfigError, RunStateError, StoreError, WorkspaceError
from ..evidence import EvidenceCatalogue
from ..loop.approval import Approver
from ..loop.executor import ExternalEffects
from ..loop.repair import RepairPolicy
from ..loop.triggers import TriggerTest, trigger_holds
from ..paths import data_dir
from ..proposers.base import Proposer
from ..proposers.scripted import ScriptedProposer
from ..records.effect_classes import effect_of_tool
from ..records.events import Usage
from ..sandbox.fileops import write_debris
from ..sandbox.policy import Isolation, isolation_at_least
from ..sandbox.snapshots import manifest_hash
from ..scenarios import load_scenario
from ..store import EffectEntry, RunInfo, Store
from ._stored_context import stored_context
from .checkpoint import CheckpointedRun, Checkpointer, StoredSpec, stored_spec
from .checkpoint_record import ROW_ERRORS, Checkpoint, row_error
from .heartbeat import driver_of

__all__ = ["ResumableRun", "ResumeCheck", "ResumeReport", "bound_spec", "continue_checkpoint", "load_checkpoint",
           "resume_note", "resume_run"]

# The step is the digits after the last '@' (a run id may hold '@'; an old store's, even a newline).
_CHECKPOINT_ID = re.compile(r"(?P<run>.+)@(?P<step>\d+)\Z", re.DOTALL)
_EMPTY_WORKSPACE = manifest_hash({})  # the hash of a workspace with no files: "0" * 64
_ACCEPTED = "an accepted "  # how a checkpoint's pending item names the report (_checkpoint_row._pending)


class ResumeCheck(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["resume_check"] = "resume_check"
    name: Literal["trigger", "workspace", "scope", "memory", "prechecks", "harness"]
    ok: bool
    detail: str


class ResumeReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["resume_report"] = "resume_report"
    checkpoint_id: str
    checks: tuple[ResumeCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def summary(self) -> str:
        return "; ".join(f"{c.name} {'ok' if c.ok else 'FAILED'}: {c.detail}" for c in self.checks)


class ResumableRun(CheckpointedRun, Protocol):
    """A run as resume, fork and time travel see it (see :mod:`harness_lab.loop.run_like`)."""

    resume_report: ResumeReport | None
    _travel_store: Store | None  # RunLike leaves it untyped: loop/ never imports store/


_R = TypeVar("_R", bound=ResumableRun)


def load_checkpoint(store: Store, run_id: str, step: int | None = None) -> tuple[Checkpoint, dict[str, Any] | None]:
    """The checkpoint of ``step`` (default: the last one) and the context state stored with it."""
    checkpoint, context, _ = _load(store, run_id, step, texts=False)
    return checkpoint, context


def _load(store: Store, run_id: str, step: int | None,
          texts: bool = True) -> tuple[Checkpoint, dict[str, Any] | None, dict[str, str]]:
    """:func:`load_checkpoint`, and the stored text of the context's items (see _stored_context)."""
    row = store.step(run_id, step) if step is not None else store.last_step(run_id)
    if row is None:
        store.run_info(run_id)  # raises for an unknown id
        raise StoreError(f"run {run_id!r} has no committed step to resume from")
    try:
        checkpoint = Checkpoint.from_row(row)
        context, found = stored_context(store, run_id, row.step, checkpoint.context_base, row.context, texts=texts,
                                        source=checkpoint.context_from)
    except ROW_ERRORS as exc:
        raise row_error(f"checkpoint {run_id}@{row.step}", exc) from None
    return checkpoint, context, found


def resume_run(cls: Callable[..., _R], store: Store, run_id: str, *, proposer: Proposer | None = None,
               evidence: EvidenceCatalogue | None = None, approver: Approver | None = None, effects: ExternalEffects | None = None,
               clock: Clock | None = None, isolation: Isolation = "auto",
               trigger_checks: Mapping[str, TriggerTest] | None = None) -> _R:
    """See the module docstring; :meth:`Run.resume <harness_lab.loop.run.Run.resume>` calls this."""
    info = store.run_info(run_id)
    spec = bound_spec(store, info)  # an edited spec (workspace, actions, contract) is refused before anything acts
    store.take_lease(run_id)  # the one writer of the run from here on, or refused naming the one that is
    checkpoint, context = load_checkpoint(store, run_id)
    if not checkpoint.state.terminal and (beat := driver_of(store, run_id)) is not None:
        # Two processes on one run would both take step N+1: the loser's effect lands, its row cannot.
        raise RunStateError(f"run {run_id!r} is being driven by process {beat.pid} (it beat {time.time() - beat.at:.0f}s "
                            f"ago: {beat.doing}); stop that process first, or resume once it is gone")
    made = _first_missing(workspace := Path(spec.workspace))
    there = made.parent if made is not None else workspace
    if not there.is_dir():  # a file where the workspace (or a folder above it) was: ResumableRun cannot even be made
        raise WorkspaceError(f"run {run_id!r}: its workspace {workspace} cannot be used: {there} is not a directory")
    run = _rebuild(cls, info.run_id, spec, proposer, evidence, approver, effects, clock, isolation, trigger_checks)
    if made is not None:  # Run made the missing workspace: take it away again, so the check reports it
        _unmake(run.workspace, made)
    try:
        # 'resolved': a resume settled it and was killed before the step that redoes it committed: still in flight
        in_flight = [_checked_flight(e) for e in store.effects(run_id, checkpoint.step + 1)
                     if e.status in ("intent", "resolved")]
        flight = in_flight[0] if in_flight else None
        checks = [_trigger(run), _workspace(run, checkpoint, flight), _scope(checkpoint),
                  *_memory(checkpoint), _prechecks(run, checkpoint, flight)]
        _continue(run, checkpoint, context, f"checkpoint {checkpoint.id}", store)
    except BaseException:
        run.close()
        raise
    ok = all(c.ok for c in checks)
    checks.append(ResumeCheck(name="harness", ok=ok, detail="entered" if ok else "not entered: a check above failed"))
    report = ResumeReport(checkpoint_id=checkpoint.id, checks=tuple(checks))
    run.resume_report = report
    if not ok:
        if not run.state.terminal:  # in memory only: nothing is written to the store
            run.halt("resume_refused", "resume refused: " + "; ".join(c.detail for c in checks if not c.ok))
        return run
    run.context.add_resume_note(_note(checkpoint), round=checkpoint.step)
    if info.status != "active":  # 'stuck' (watchdog) or 'stopped' (SIGTERM) described the process that is gone
        store.set_status(run_id, "active", f"resumed from checkpoint {checkpoint.id}")
    _trace_in_store(run)
    run.checkpoints = Checkpointer(store, run, fresh=False)
    run.checkpoints.adopt(checkpoint)
    if flight is not None:
        _settle(run, store, flight, workspace_unchanged=run.sandbox.workspace_hash() == checkpoint.workspace_hash)
    return run


# -- the five checks -------------------------------------------------------------------------------
def _trigger(run: ResumableRun) -> ResumeCheck:
    """Re-verified now (a static switch, or the check the contract names: see harness_lab.loop.triggers)."""
    ok, detail = trigger_holds(run.contract.trigger, run.trigger_checks, run.workspace)
    return ResumeCheck(name="trigger", ok=ok, detail=detail)


def _workspace(run: ResumableRun, checkpoint: Checkpoint, flight: EffectEntry | None) -> ResumeCheck:
    if not run.workspace.is_dir():
        return ResumeCheck(name="workspace", ok=False, detail=f"{run.workspace} is missing")
    now = run.sandbox.workspace_hash()
    if checkpoint.workspace_hash is None:  # every row since schema 1 holds one: an edited store, never "not compared"
        return ResumeCheck(name="workspace", ok=False, detail=f"the checkpoint of step {checkpoint.step} recorded no "
                           "workspace hash: the workspace cannot be proven to be the run's; nothing was written")
    if now == checkpoint.workspace_hash:
        return ResumeCheck(name="workspace", ok=True, detail=f"unchanged since step {checkpoint.step}")
    if _command_in_flight(flight):  # its intent names no path: any change may be its doing (it ends uncertain)
        return ResumeCheck(name="workspace", ok=True, detail=(
            f"changed since step {checkpoint.step}, maybe by the run_command in flight at step {flight.step} "
            "(its outcome is unknown: the run ends effect_uncertain, nothing overwritten)"))
    if flight is not None and "pre" in flight.detail:
        manifest = run.sandbox.manifest()
        for path, entry in flight.detail["pre"].items():
            if entry is None:
                manifest.pop(path, None)
            else:
                manifest[path] = (str(entry[0]), str(entry[1]), int(entry[2]))
        debris = _debris(flight, manifest)
        for path in debris:
            del manifest[path]
        if manifest_hash(manifest) == checkpoint.workspace_hash:
            left = f" (and {len(debris)} temporary file(s) it left, removed on resume)" if debris else ""
            return ResumeCheck(name="workspace", ok=True, detail=(
                f"changed only by the {flight.tool} of {flight.detail['path']} in flight at step {flight.step}{left}"))
    return ResumeCheck(name="workspace", ok=False, detail=(
        f"concurrent change: the workspace hash is {_hash_words(now)}, the checkpoint of step {checkpoint.step} "
        f"recorded {_hash_words(checkpoint.workspace_hash)}; nothing was overwritten"))


def _hash_words(workspace_hash: str) -> str:
    """A workspace hash as a summary says it: an empty workspace's (the sum of no files) in words."""
    return "that of an empty workspace" if workspace_hash == _EMPTY_WORKSPACE else workspace_hash[:12]


def _scope(checkpoint: Checkpoint) -> ResumeCheck:
    return ResumeCheck(name="scope", ok=True, detail=(
        f"done: {checkpoint.step} steps, evidence {list(checkpoint.completed_scope)}; "
        f"pending: {', '.join(_pending_words(checkpoint)) or 'nothing'}; "
        f"last failure: {checkpoint.failure_root_cause or 'none'}"))


def _memory(checkpoint: Checkpoint) -> list[ResumeCheck]:
    """What the checkpoint did not hold (memory.persist left it out): said, not silently rebuilt."""
    if not checkpoint.not_persisted:
        return []
    words = "; ".join(f"{c} ({PERSIST_CATEGORIES.get(c, '?')})" for c in checkpoint.not_persisted)
    return [ResumeCheck(name="memory", ok=True, detail=(
        f"not persisted by the contract's memory.persist, so not restored: {words}; the run continues with "
        "them empty (evidence must be read again before it is cited)"))]


def _pending_words(checkpoint: Checkpoint) -> list[str]:
    """The checkpoint's pending items; "an accepted <report>" says so when the report is not written yet
    (the task is still pending then: what is left is to write it, not nothing)."""
    return [f"{item} (not written yet)" if item.startswith(_ACCEPTED)
            and item.removeprefix(_ACCEPTED) not in checkpoint.artifact_sha256 else item
            for item in checkpoint.pending]


def _prechecks(run: ResumableRun, checkpoint: Checkpoint, flight: EffectEntry | None) -> ResumeCheck:
    problems = []
    if run.contract.version != checkpoint.contract_version:
        problems.append(f"the contract changed since the checkpoint ({checkpoint.contract_version[:12]} -> "
                        f"{run.contract.version[:12]})")
    for evidence_id, sha in dict(checkpoint.run_state.get("observed", {})).items():
        note = run.evidence.get(evidence_id)
        if note is None or note.sha256 != sha:
            problems.append(f"evidence {evidence_id} changed or vanished since it was read")
    in_flight_path = flight.detail.get("path") if flight is not None else None
    for path, sha in checkpoint.artifact_sha256.items():
        if path != in_flight_path and not _command_in_flight(flight) and run.sandbox.file_sha256(path) != sha:  # None: missing, or no regular file
            problems.append(f"artifact {path} differs from the checkpoint's hash")
    ok = not problems
    return ResumeCheck(name="prechecks", ok=ok, detail="contract, evidence and artifacts as checkpointed"
                       if ok else "; ".join(problems))


# -- helpers ---------------------------------------------------------------------------------------
def bound_spec(store: Store, info: RunInfo) -> StoredSpec:
    """The run's spec, checked field by field and bound to its first row (see ``stored_spec`` in
    harness_lab/persistence/_checkpoint_row.py): a spec edited after the run registered is a StoreError."""
    row = store.first_step(info.run_id)
    if row is None:
        raise StoreError(f"run {info.run_id!r} has no committed step to resume from")
    try:
        first = Checkpoint.from_row(row)
    except ROW_ERRORS as exc:
        raise row_error(f"checkpoint {info.run_id}@{row.step}", exc) from None
    return stored_spec(info.run_id, info.spec, first)


def _rebuild(cls: Callable[..., _R], run_id: str, spec: StoredSpec, proposer: Proposer | None, evidence: EvidenceCatalogue | None,
             approver: Approver | None, effects: ExternalEffects | None, clock: Clock | None,
             isolation: Isolation, trigger_checks: Mapping[str, TriggerTest] | None) -> _R:
    try:
        isolation = isolation_at_least(spec.isolation, isolation)
    except ValueError as exc:
        raise ConfigError(f"run {run_id!r}: {exc}") from None
    scenario = spec.scenario
    if scenario is not None:  # reload from disk: a contract changed since is caught by the prechecks
        contract = load_contract(data_dir() / "contracts" / f"{load_scenario(scenario).contract}.yaml")
    else:
        contract = spec.contract
    if proposer is None:
        recorded = spec.proposer
        if recorded is None or recorded.kind != "scripted" or recorded.actions is None or recorded.then is None:
            raise RunStateError(f"run {run_id} used a {recorded.kind if recorded else 'custom'} proposer; "
                                "pass proposer= to resume it")
        proposer = ScriptedProposer(recorded.actions, then=recorded.then)
    repair = RepairPolicy.from_spec(spec.repair.model_dump() if spec.repair is not None else None)
    run = cls(contract=contract, proposer=proposer, evidence=evidence or EvidenceCatalogue.from_dir(data_dir() / "evidence"),
              workspace=spec.workspace, validation=spec.validation, approver=approver,
              clock=clock, effects=effects, run_id=run_id, resume=True,
              repair=repair, isolation=isolation, trigger_checks=trigger_checks)  # its state: the checkpoint's (_continue)
    run.scenario = scenario
    return run


def _trace_in_store(run: ResumableRun) -> None:
    """A run given its store after it was made (resume, fork, ``from_scenario``): the store holds its past,
    so its records and events are no longer packed (see harness_lab.loop.record_log)."""
    run.records.stop_packing()
    run.events.stop_packing()


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist (what ``mkdir(parents=True)`` makes)."""
    missing = None
    while not path.exists() and path != path.parent:
        missing, path = path, path.parent
    return missing


def _unmake(path: Path, top: Path) -> None:
    """Remove the empty directories from ``path`` up to ``top`` (a resume that refuses makes nothing)."""
    while True:
        try:
            path.rmdir()
        except OSError:
            return
        if path == top:
            return
        path = path.parent


def _continue(run: ResumableRun, checkpoint: Checkpoint, context: dict[str, Any] | None, source: str,
              store: Store | None = None) -> None:
    captured = run.capture(context=context is None)  # fills whatever memory.exclude kept out of the checkpoint
    captured.update(checkpoint.run_state)
    if context is not None:
        captured["context"] = context
    try:  # the run state and context of an edited row reach restore code that trusts their shape
        run.continue_from(captured, step=checkpoint.step, seq=checkpoint.seq,
                          usage=Usage.model_validate(checkpoint.usage), source=source,
                          ref_loader=store.blob if store is not None else None)
    except ROW_ERRORS as exc:
        raise row_error(f"checkpoint {checkpoint.id}", exc) from None


def continue_checkpoint(run: ResumableRun, checkpoint: Checkpoint, context: dict[str, Any] | None, source: str,
                        store: Store | None = None) -> None:
    """Put ``run`` in the state of ``checkpoint`` with its stored ``context`` (no check, nothing written:
    what resume does once its checks passed, and what ``Run.open`` and forks from a step do)."""
    _continue(run, checkpoint, context, source, store)


def _checked_flight(entry: EffectEntry) -> EffectEntry:
    """A ledger entry whose detail has the shape resume reads (``path``: a workspace path; ``pre``: each path
    to None or its manifest entry [kind, sha256, size]); anything else is an edited store."""
    path, pre = entry.detail.get("path"), entry.detail.get("pre", {})
    if not (path is None or isinstance(path, str)) or not isinstance(pre, dict) or not all(
            isinstance(p, str) and (e is None or (isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)
                                                  and isinstance(e[1], str) and type(e[2]) is int))
            for p, e in pre.items()):
        raise StoreError(f"run {entry.run_id!r}: the ledger entry {entry.key!r} of step {entry.step} is unreadable: "
                         "its detail is not a path and the manifest entries before it")
    return entry


def _settle(run: ResumableRun, store: Store, flight: EffectEntry, *, workspace_unchanged: bool) -> None:
    kind = effect_of_tool(flight.tool)
    if kind == "redoable" or (kind == "workspace" and (workspace_unchanged or _delete_landed(run, flight))):
        if not workspace_unchanged:  # the check above proved these were not there at the checkpoint
            for path in _debris(flight, run.sandbox.manifest()):
                run.sandbox.call("delete_file", path=path)
        store.set_effect_status(flight.key, "resolved")  # the next step does it (again), same bytes
        return
    store.set_effect_status(flight.key, "uncertain")
    run.halt("effect_uncertain", (
        f"{flight.tool} (idempotency key {flight.key}) was in flight when the process died; its outcome is "
        "unknown, so it is not retried: a human must check before it is tried again"))


def _delete_landed(run: ResumableRun, flight: EffectEntry) -> bool:
    """A delete_file whose target is gone, the rest as its intent found it (the workspace check proved
    that): its outcome is known. Resolved, the next step answers it without deleting again."""
    path, pre = flight.detail.get("path"), flight.detail.get("pre") or {}
    return (flight.tool == "delete_file" and isinstance(path, str) and pre.get(path) is not None
            and path not in run.sandbox.manifest())


def _command_in_flight(flight: EffectEntry | None) -> TypeGuard[EffectEntry]:
    """A run_command in flight at the crash: what it changed cannot be told from its intent, so a change it
    may have made (the workspace, an artifact) is settled as its uncertain outcome, not refused as another's."""
    return flight is not None and flight.tool == "run_command"


def _debris(flight: EffectEntry, paths: Iterable[str]) -> list[str]:
    """The temporary files of an in-flight write that died before its rename (a kill mid-write)."""
    target = flight.detail.get("path")
    return write_debris(paths, target) if effect_of_tool(flight.tool) == "redoable" and isinstance(target, str) else []


def resume_note(checkpoint: Checkpoint) -> str:
    """The note a resume from ``checkpoint`` puts in front of the proposer (``Run.at`` shows it too)."""
    return _note(checkpoint)


def _note(checkpoint: Checkpoint) -> str:
    return (f"Resumed from checkpoint {checkpoint.id} after an interruption. State: {checkpoint.state.value}. "
            f"Done: {checkpoint.step} steps; evidence read: {', '.join(checkpoint.completed_scope) or 'none'}; "
            f"report: {'written' if checkpoint.artifact_sha256 else 'not yet written'}. "
            f"Pending: {', '.join(checkpoint.pending) or 'nothing'}. "
            f"Last failure: {checkpoint.failure_root_cause or 'none'}. Next: {checkpoint.next_step}.")
