"""The per-step checkpointer a run with a store carries (the record it writes, and its reader,
live in :mod:`harness_lab.persistence.checkpoint_record`; both are re-exported here).

Where things live: this module holds :class:`Checkpointer`'s flow: the first row that registers the
run, :meth:`~Checkpointer.commit` (one row per step) and the side-effect ledger
(:meth:`~Checkpointer.before_effect`). What the row's checkpoint holds (its parts, the run's
spec :func:`run_spec`) is in ``harness_lab/persistence/_checkpoint_row.py``; its context part in
``harness_lab/persistence/_context_rows.py``; the stores in ``harness_lab/store/``.

A :class:`Checkpoint` (seed 000) holds what a later process needs to continue: the contract
version, the completed scope, artifact and workspace hashes, the last verification result, the
failure root cause, pending items, the next step, and the restorable run state
(:meth:`Run.capture() <harness_lab.loop.run.Run.capture>`). It never holds secrets: every text written
to the store passes a :class:`~harness_lab.records.redaction.Redactor`, which honours ``contract.memory.exclude``.

The hot path (:meth:`Checkpointer.commit`) builds plain dicts and compact JSON (no model
validation), and writes one row in one transaction; the typed record is for readers. Its cost does
not grow with the run: the context is written whole only every ``FULL_EVERY`` steps (or once the
change logs since then reach ``FULL_BYTES``, or when the run's context object was replaced by a
restore); the rows in between hold :meth:`ContextManager.take_changes
<harness_lab.context.ContextManager.take_changes>`, and ``context_base`` names the row a restore
replays from (the context part of the rows: :mod:`harness_lab.persistence._context_rows`). Large outputs go to the store's blobs once, by sha256. Redaction runs over what is
written, so only over the new and changed text; a memo of the JSON pieces (and whole texts) found
clean before means a loop's rows cost one hash each to check (see :meth:`~harness_lab.records.redaction.Redactor.clean`). A step with
no effect skips the ledger update, so its row is one ``INSERT`` in one implicit transaction. The
checkpoint is of the row form (:data:`~harness_lab.persistence.checkpoint_record.ROW_FORM`): what the row's
columns and step record hold is not written again (a loop's 640 B became 424 B). It is built as plain data
and, but on the rows where the context is whole (and the first this object writes), written as the delta
since the row before, by orjson (schema 8: a loop's row holds its gates, ~130 B); the store folds it back
whole for every reader (``store/fold.py``).
A whole state leaves out retired items; a fork's first row holds no context at all but names the
checkpoint it restored (``context_from``), and its change logs build on that until its own first
whole state. Step records are stored by :func:`~harness_lab.persistence.row_text.dump_step_row` (events that
repeat the record's proposal, decision and result say so instead of carrying them again).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from math import isfinite
from typing import Any, Protocol

from ..errors import StoreError
from ..loop.run_like import RunLike
from ..records.actions import ActionBase, DeleteFile, WriteReport
from ..records.effect_classes import EffectClass, effect_class, effect_of_tool
from ..records.events import StepRecord, Usage
from ..records.redaction import SECRET_CATEGORIES, Redactor, redact
from ..records.states import RunState
from ..records.tools import ToolResult
from ..store import EffectEntry, Store
from ..store.fold import GONE, dumps
from ..timeline.files import FileRows
from ._checkpoint_row import (
    _SEP,
    ALWAYS_KEPT,
    PERSISTED,
    _next_step,
    _RowData,
    run_spec,
    spec_binding,
)
from ._checkpoint_row import StoredSpec as StoredSpec  # re-exported: resume and replay read specs with it
from ._checkpoint_row import stored_spec as stored_spec
from ._context_rows import ContextRows, _dumps
from .checkpoint_record import (
    ROW_FORM as ROW_FORM,  # read here by tests (not in __all__, as before)
)
from .checkpoint_record import RUN_STATE_EMPTY, Checkpoint
from .row_text import dump_step_row

__all__ = ["ALWAYS_KEPT", "FULL_BYTES", "FULL_EVERY", "PERSISTED", "RUN_STATE_EMPTY", "SECRET_CATEGORIES", "Checkpoint", "CheckpointedRun", "Checkpointer", "EffectClass", "StoredSpec",
           "check_run_id", "effect_class", "effect_of_tool", "redact", "run_spec", "stored_spec"]

FULL_EVERY = 16  # steps between whole context states: a restore replays at most this many change logs
# (32 saves ~4 µs a store step but, even with the folded replay, a fork from the worst-placed checkpoint takes
# 1.93 / 1.74-1.87 ms median at 1,000 / 10,000 steps (1.62 / 1.50 at 16): each log costs ~5 µs to read
# (parse 2.7, fold 1.4, fetch 0.7) and ~2 µs to restore the item it adds; bench/fork_resume.py --full-every 32)
FULL_BYTES = 256 * 1024  # ... or fewer, once the change logs since the last whole state are this large


def check_run_id(run_id: str) -> None:
    """Refuse a new run's id that cannot name it (the CLI asks before it makes a store file)."""
    if not run_id.strip() or not run_id.isprintable():
        raise StoreError(f"run id {run_id!r}: empty, blank or holding a control character (a newline, "
                         "a tab, NUL); it names the run's checkpoints ('<run>@<step>') and every message")


class CheckpointedRun(RunLike, Protocol):
    """A run with its checkpointer (what heartbeat, resume and time travel read; see :mod:`harness_lab.loop.run_like`)."""

    checkpoints: Checkpointer | None


class Checkpointer(_RowData):
    """Writes one checkpoint per step and keeps the side-effect ledger for one run."""

    _redact: Redactor
    _version: str

    def __init__(self, store: Store, run: RunLike, *, fresh: bool, loaded: Mapping[str, str] | None = None,
                 like: Checkpointer | None = None, context_from: str | None = None,
                 files_stored: Mapping[str, str] | None = None, id_free: bool = False) -> None:
        """``loaded``: the run's context was just read from ``store`` (a fork): its items' stored
        texts by id, already redacted, which a later whole state reuses instead of dumping them again.
        ``like``: the checkpointer of a run under the same contract (a fork's source), whose
        redaction (same patterns, and the memo of texts it found clean) this one shares.
        ``context_from``: the checkpoint ("run@step") of ``store`` the run's context was just restored
        from, unchanged; the first row names it instead of writing the whole state again.
        ``files_stored``: the workspace's files (path -> sha256) were just written from ``store`` (a fork
        from a step): their bytes are not read or stored again.
        ``id_free``: the caller just found ``run.run_id`` not in ``store`` (a fork names itself): not asked
        again (a process registering it since holds its lease, or its row refuses ours: one StoreError), and its
        lease is taken in the transaction of its first row (a free lease: one statement, not one transaction more)."""
        if fresh:
            check_run_id(run.run_id)
        if fresh and not id_free:  # the one writer of the new run, before anything of it is written (store/_lease.py)
            store.take_lease(run.run_id)
        if fresh and not id_free and store.has_run(run.run_id):
            raise StoreError(f"run id {run.run_id!r} exists already in the store; resume it or choose another id")
        self.store, self.run = store, run
        run.keep_workspace()  # resume continues in it, in this process or another
        # The version is a sha256 over the whole contract (~70 µs): a fork holding its source's very
        # contract object takes the source's.
        version = like._version if like is not None and like.run.contract is run.contract else run.contract.version
        same = like is not None and like._version == version
        self._redact = like._redact if like is not None and same else Redactor(run.contract.memory.exclude)
        # memory.persist: what a category the contract leaves out would keep is not written (see PERSISTED)
        memory = run.contract.memory
        unkept = [c for c in PERSISTED if c not in memory.persist]
        self._keep = frozenset(f for c, (fields, _) in PERSISTED.items() if c not in unkept for f in fields)
        self._drop = tuple(dict.fromkeys([*(k for k in memory.exclude if k not in SECRET_CATEGORIES),
                                          *(k for c in unkept for k in PERSISTED[c][1])]))
        self._version = version
        self._unkept = unkept
        self._last: dict[str, Any] | None = None  # the checkpoint of the last row written (whole), see _write
        self._base = 0  # the step of the last whole checkpoint written (rows without a context: see _write)
        self._report = run.contract.verification.report.path
        self._seq = run.events[-1].seq if run.events else 0
        self._artifacts = {}
        self._verification = None
        self._failure = None
        self.last_commit_at = time.time()
        self.last_step = run.step_no
        self._rows = ContextRows(store, self._redact, context_from=context_from)
        self._files = FileRows(files_stored.values() if files_stored else ())  # the workspace's files, beside the rows
        if loaded is not None:
            self._rows.adopt(run.context, loaded)
        # Ledger entries of the next step to settle: an effect this process began, or (not fresh,
        # adopted) whatever a crashed process left at that step. Otherwise the update is skipped.
        self._unsettled = not fresh
        # Step records kept in run.records (events: 4x, a few per step); the rest is in the store. Kept
        # records die before the collector's oldest generation (a longer window cost ~7 µs a step in
        # collections of objects the store already holds).
        self.window = 64
        if fresh:  # registered with a first checkpoint (step 0), in one transaction: a kill before step 1 resumes too
            self._write(run.step_no, "null", run.sandbox.workspace_hash(), run.usage,
                        register=json.loads(self._redact.json(_dumps(run_spec(run)))), lease=id_free)

    def adopt(self, checkpoint: Checkpoint) -> None:
        """Carry the slow-moving fields on from a loaded checkpoint (resume, fork)."""
        self._seq, self._artifacts = checkpoint.seq, dict(checkpoint.artifact_sha256)
        self._verification, self._failure = checkpoint.verification, checkpoint.failure_root_cause
        self.last_step = checkpoint.step
        self._unsettled = True

    # -- the ledger -----------------------------------------------------------------------------
    def before_effect(self, action: ActionBase, key: str) -> ToolResult | None:
        """Write the intent before an effect runs; a result here means: do not run it."""
        cls = effect_class(action)
        if cls == "read":
            return None
        self._unsettled = True
        detail: dict[str, Any] = {"kind": action.kind}
        if cls != "external" and (path := _target(action, self.run)) is not None:
            manifest = self.run.sandbox.manifest()
            detail["path"] = path
            detail["pre"] = {p: manifest.get(p) for p in _with_ancestors(path)}
        entry = EffectEntry(key, self.run.run_id, self.run.step_no, action.kind, "intent", detail)
        existing = self.store.record_intent(entry)
        if existing is None:
            return None
        if existing.status == "resolved":
            return _landed_delete(action, existing, detail.get("path"), self.run)
        if existing.status == "intent" and cls == "redoable":
            return None  # re-writing the same bytes is the same effect
        why = ("was applied and committed before; it is never applied twice" if existing.status == "committed"
               else "has an uncertain outcome (in flight at a crash); it is never retried silently")
        return ToolResult.failure(action.kind, f"effect {key} {why}",
                                  "a human must check the outside world before this is tried again")

    # -- the hot path ---------------------------------------------------------------------------
    def commit(self, record: StepRecord, workspace_hash: str | None) -> None:
        """One row, one transaction: the step record, the checkpoint, the context state."""
        last_seq = None
        if record.events:
            last_seq = record.events[-1].seq
            self._seq = max(self._seq, last_seq)
        self._observe(record)
        self._write(record.step, dump_step_row(record), workspace_hash, record.usage, last_seq)

    def _write(self, step: int, record: str, workspace_hash: str | None, usage: Usage,
               last_seq: int | None = None, *, register: dict[str, Any] | None = None, lease: bool = False) -> None:
        """``last_seq``: the seq of the last event the step ``record`` holds (None: no record, or no event);
        ``register``: the run's spec, for its first row, and ``lease``: its lease taken with it (see
        ``Store.commit_step``)."""
        run, now = self.run, time.time()
        state = run.capture_compact()
        for key in self._drop:
            state.pop(key, None)
        try:
            context, blobs, base = (self._rows.take(run.context, step, full_every=FULL_EVERY, full_bytes=FULL_BYTES)
                                    if "context" not in self._drop else (None, [], None))
        except BaseException:
            self._rows.forget()  # the change log may be half taken: the next row holds the whole state
            raise
        data = self._checkpoint(step, record != "null", workspace_hash, usage, last_seq, state, base, register)
        # The checkpoint as a delta on the row before: what changed (a loop's gates), and the keys gone. Whole
        # where the context is (its base row: one range read folds both), on the first row this object writes,
        # after a failed write, and every FULL_EVERY rows of a run whose rows hold no context.
        last = self._last
        if base is None:
            base = step if last is None or step - self._base >= FULL_EVERY else self._base
        if last is None or base == step or step != self.last_step + 1:
            base, delta = step, data
        else:
            delta = {k: v for k, v in data.items() if k not in last or last[k] != v}
            if gone := [k for k in last if k not in data]:
                delta[GONE] = gone
        # orjson, unless a float could be NaN or infinite (it would write null): a run state other than the
        # loop's gates, a usage of no finite time. Those keep pydantic's text (NaN, Infinity), as before.
        exact = data["run_state"] is not state and ("usage" not in data or isfinite(usage.elapsed_s))
        text = dumps(delta) if exact else _dumps(delta)
        # One check against the redactor's memo for all the row's texts (a match never spans the ',"'
        # between them, as between the pieces Redactor.clean splits at); whole-text redaction otherwise.
        raw = context.raw if context is not None else ()
        clean = self._redact.clean(_SEP.join((record, text, *raw)))
        if not clean:
            record, text = self._redact(record), self._redact(text)
        try:
            files = self._files.take(step, workspace_hash, run.sandbox, self._redact.clean)
            written, shared = self._rows.text(context, clean) if context is not None else (None, ())
            if shared:  # item texts the row names by sha256, into the same transaction
                blobs = [*blobs, *shared]
            self.store.commit_step(run.run_id, step, now, record, text, written, blobs,
                                   settle_effects=self._unsettled, register=register, files=files, base=base,
                                   lease=lease)
        except BaseException:
            self._rows.forget()
            self._files.forget()
            self._last = None
            raise
        self._files.written(files)
        self._unsettled = False
        self._rows.written(run.context, step, data["context_base"], written, blobs)
        self._last = data
        if base == step:
            self._base = step
        self.last_commit_at, self.last_step = now, step

    def _checkpoint(self, step: int, step_record: bool, workspace_hash: str | None, usage: Usage,
                    last_seq: int | None, state: dict[str, Any], base: int | None,
                    register: dict[str, Any] | None) -> dict[str, Any]:
        """The row's checkpoint, whole, as plain data. Its form (ROW_FORM) leaves out what the row's
        columns (run id, step) and step record (usage, the last event's seq) hold, the usual next step,
        and entries at their empty value (Checkpoint.from_row fills them in)."""
        run = self.run
        run_state = run.state
        data: dict[str, Any] = {"kind": ROW_FORM, "contract_version": self._version, "state": _STATE_VALUES[run_state]}
        if not ((step == run.step_no and not run_state.terminal and run.waiting is None)
                or "next_step" not in self._keep):
            data["next_step"] = _next_step(run)
        if not step_record or not isfinite(usage.elapsed_s):
            data["usage"] = {"decisions": usage.decisions, "tool_calls": usage.tool_calls, "tokens": usage.tokens,
                             "elapsed_s": usage.elapsed_s}
        if self._seq != last_seq:
            data["seq"] = self._seq
        data["run_state"] = self._run_state(state, usage.decisions)
        data["context_base"] = base
        self._optional(data, workspace_hash)
        if register is not None:  # the first row binds the spec
            data.update(spec_binding(register))
        return data

    def _observe(self, record: StepRecord) -> None:
        result, verdict = record.tool_result, record.verdict
        report = self._report
        if (result is not None and effect_of_tool(result.tool) in ("redoable", "workspace")) or verdict is not None:
            # Through the workspace boundary: a command may have left a FIFO or a link where the report was.
            sha = self.run.sandbox.file_sha256(report)
            self._artifacts = {report: sha} if sha is not None else {}
        if verdict is not None:
            self._verification = {"accepted": verdict.accepted, "reasons": list(verdict.reasons)}
            self._failure = None if verdict.accepted else "; ".join(verdict.reasons)
        elif result is not None and not result.ok:
            self._failure = f"{result.tool}: {result.reason}"
        if self.run.stop_reason is not None and self.run.state is not RunState.REVIEW_READY:
            self._failure = f"{self.run.stop_reason.code}: {self.run.stop_reason.message}"


_STATE_VALUES = {state: state.value for state in RunState}  # Enum.value is a slow descriptor


def _landed_delete(action: ActionBase, entry: EffectEntry, path: object, run: RunLike) -> ToolResult | None:
    """The result of a delete_file that landed before a crash (resume resolved its intent and its target
    is still gone): what it returned then, so it is not done twice. Anything else is redone."""
    pre = entry.detail.get("pre") or {}
    if (not isinstance(action, DeleteFile) or not isinstance(path, str) or path != entry.detail.get("path")
            or pre.get(path) is None or path in run.sandbox.manifest()):
        return None
    kind = "dir" if pre[path][0] == "d" else "file"
    return ToolResult.success("delete_file", f"deleted {path}", path=path, kind=kind,
                              landed="before a crash; found done on resume, not repeated")


def _target(action: ActionBase, run: RunLike) -> str | None:
    if isinstance(action, WriteReport):
        return run.contract.verification.report.path
    path = getattr(action, "path", None)
    return os.path.normpath(path).lstrip("/") if isinstance(path, str) and path else None


def _with_ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
