"""The checkpoint store protocol, its records, and the in-memory double.

A store keeps, per run id: the run's spec (how to rebuild it), one row per committed step (the
step record, the checkpoint, and the context: its whole state every few steps, otherwise the change
log since the previous row), the side-effect ledger (one entry per idempotency key), the last
heartbeat, a status and progress reports. Large tool outputs are blobs, keyed by their sha256 and
written once (in the transaction of the step that made them), whichever run or fork refers to them.

Effect ledger statuses::

    intent     written *before* the effect runs (write-ahead); the effect may or may not have landed
    committed  the step that carried the effect committed: never apply this key again (a SQLite
               store reads an intent whose step has a row as committed: that row's transaction settled it)
    uncertain  found as ``intent`` on resume for an effect that cannot be checked: never retried
    resolved   found as ``intent`` on resume and re-done idempotently (a workspace write)
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..errors import StoreError
from .fold import WHOLE, fold

__all__ = [
    "SCHEMA_VERSION",
    "EffectEntry",
    "EffectStatus",
    "Heartbeat",
    "HistoryEntry",
    "InMemoryStore",
    "RunInfo",
    "Store",
    "StepFiles",
    "StoredStep",
]

# 2: blobs (large outputs by sha256); a version-1 file gains the table on open.
# 3: a fork's first rows may name the checkpoint whose context they stand for (``context_from``) instead
#    of holding the whole state again; nothing existing changes, so 1 and 2 open as they are.
# 4: step records and checkpoints in a compacter form (fields at their default left out: see
#    row_text.dump_step_row, checkpoint.Checkpoint) that an older harness-lab cannot read; rows of 1-3
#    still read as they are. New files keep step rows in a rowid table (see _sqlite_schema._TABLES). Their
#    context change logs are of version 2 (context.changes: patches, unchanged parts left out).
# 5: new files key step rows by one integer (run_no * 2**32 + step; runs gain run_no), so a step
#    writes no separate (run_id, step) index page; rows are as in 4. Files of 2-4 keep their layout
#    and are only marked 5 (an older harness-lab would write a new file's rows without their key).
# 6: checkpoints of the row form (checkpoint_record.ROW_FORM: what the row's columns and step record hold
#    is left out; read by Checkpoint.from_row). Files of 2-5 are only marked 6; their rows read as they are.
# 7: the workspace's files beside the rows (time travel: harness_lab.timeline): ``manifests`` (a row per
#    step that changed the workspace: its files' sha256s, whole or as a change since the row before) and
#    ``files`` (each file's bytes once, by sha256). Files of 1-6 gain both tables on open; their old steps
#    have no files (``Run.at`` says so), nothing existing is rewritten.
# 8: a row's checkpoint may be a *delta* (orjson-encoded: the keys that changed since the row before, and
#    under "-" the keys gone), folded onto the whole checkpoint of the row its ``base`` column names, at most
#    FULL_EVERY rows back (store/fold.py); a whole checkpoint is one of the forms above. Files of 1-7 gain
#    the column on open; their rows read as they are. Readers get the folded, whole checkpoint.
# 9: two changes, one version. (a) A context row may name an item by the sha256 of its text, stored once in
#    ``blobs`` (long items: pinned ones, summaries; _context_rows.SHARED_MIN), instead of repeating it in every
#    whole state. (b) An effect's ledger entry is settled by its step's row: an ``intent`` (or ``resolved``) entry
#    whose step has a row reads as ``committed`` (store/_sqlite_reads.py), so an effect step's commit is its row's
#    INSERT alone, not also an UPDATE in a BEGIN ... COMMIT. Files of 1-8 are only marked 9 on a writable open;
#    their rows read as they are; an older harness-lab would read this file's settled entries as still in flight.
SCHEMA_VERSION = 9

EffectStatus = Literal["intent", "committed", "uncertain", "resolved"]


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    spec: dict[str, Any]
    created_at: float
    status: str = "active"  # active | stuck | stopped
    status_reason: str = ""


@dataclass(frozen=True)
class StoredStep:
    """One committed step: JSON texts exactly as written (the caller parses what it needs)."""

    run_id: str
    step: int
    at: float
    record: str
    checkpoint: str
    context: str | None  # the context state, or its change log since the previous row (kind says which)


@dataclass(frozen=True)
class StepFiles:
    """The workspace files after a step that changed them, written in the step's transaction: its manifest
    row (JSON ``{path: sha256 or null}``, whole when ``base`` is the step itself, else the change since the
    previous manifest row, which folds onto the whole one of step ``base``) and the bytes of files that
    may be new to the store, ``(sha256, bytes)`` (kept if present already)."""

    base: int
    manifest: str
    data: Sequence[tuple[str, bytes]] = ()


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One committed step as a listing shows it (no JSON parsed)."""

    run_id: str
    step: int
    at: float

    @property
    def id(self) -> str:
        return f"{self.run_id}@{self.step}"


@dataclass(frozen=True)
class EffectEntry:
    key: str
    run_id: str
    step: int
    tool: str
    status: EffectStatus
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Heartbeat:
    run_id: str
    at: float  # wall-clock time of the beat
    step: int
    progress_at: float  # wall-clock time the run last completed a step
    pid: int
    doing: str


class Store(Protocol):
    """Where checkpoints live. Every method raises :class:`StoreError` on misuse (unknown run id,
    a run id that exists already) or an unusable store; nothing is ever overwritten."""

    def create_run(self, run_id: str, spec: dict[str, Any], at: float) -> None: ...

    def has_run(self, run_id: str) -> bool: ...

    def run_info(self, run_id: str) -> RunInfo: ...

    def run_ids(self) -> list[str]: ...

    def take_lease(self, run_id: str) -> None:
        """Become the one writer of ``run_id``, or raise :class:`~harness_lab.errors.RunStateError` naming the
        live process that is (nothing written); given back by :meth:`release_lease` or :meth:`close`."""
        ...

    def release_lease(self, run_id: str) -> None: ...

    def commit_step(self, run_id: str, step: int, at: float, record: str, checkpoint: str,
                    context: str | None, blobs: Sequence[tuple[str, str]] = (), *,
                    settle_effects: bool = True, register: dict[str, Any] | None = None,
                    files: StepFiles | None = None, base: int | None = None, lease: bool = False) -> None:
        """One transaction: the step row, the new ``(sha256, text)`` blobs (kept if present already),
        the workspace's ``files`` when the step changed them (see :class:`StepFiles`),
        and every ``intent`` of this step becomes ``committed``. ``settle_effects=False`` says the
        caller knows this step has no ledger entry (the update is skipped, nothing else changes; a
        :class:`~harness_lab.store.SQLiteStore` needs no update: its row settles them, see schema 9).
        ``register``: the run's spec; the run is created (as :meth:`create_run` would, at ``at``)
        in the same transaction as this, its first row: a kill cannot leave it registered without one.
        ``lease``: the run's lease (:meth:`take_lease`) is taken in that transaction too, not in one of its own.
        ``base``: the step of the row whose whole checkpoint this row's builds on (schema 8); ``checkpoint``
        is then, unless it is whole itself, the delta since the row before (see ``store/fold.py``), and
        every reader is handed it folded, whole. None (or ``step``): ``checkpoint`` is whole."""
        ...

    def blob(self, sha256: str) -> str | None: ...

    def blob_texts(self, sha256s: Collection[str]) -> dict[str, str]:
        """:meth:`blob` of each of ``sha256s`` in one read (a context row's long items): those the store
        holds, by sha256; one it does not hold is left out."""
        ...

    def file_data(self, sha256: str) -> bytes | None:
        """The bytes of a workspace file some step kept (see :class:`StepFiles`), by sha256."""
        ...

    def files_data(self, sha256s: Collection[str]) -> dict[str, bytes]:
        """:meth:`file_data` of each of ``sha256s`` in one read (a fork writes a step's files): those the
        store holds, by sha256; one it does not hold is left out."""
        ...

    def manifests(self, run_id: str, step: int) -> list[tuple[int, str]]:
        """``(step, manifest)`` of the rows that fold to the run's files at ``step``: the last whole one at
        or before it and the changes after that, oldest first (at most a few, whatever the history's
        length); empty when no row at or before ``step`` holds files."""
        ...

    def contexts(self, run_id: str, start: int, end: int) -> list[tuple[int, str | None]]:
        """``(step, context)`` of the steps ``start..end`` in order (what a restore replays)."""
        ...

    def history(self, run_id: str) -> list[HistoryEntry]:
        """Every committed step of the run, oldest first (cheap: no JSON is parsed)."""
        ...

    def last_step(self, run_id: str) -> StoredStep | None: ...

    def first_step(self, run_id: str) -> StoredStep | None:
        """The row that registered the run (step 0, or a fork's first step): it binds the run's spec."""
        ...

    def step(self, run_id: str, step: int) -> StoredStep: ...

    def steps(self, run_id: str, start: int = 1, end: int | None = None) -> list[StoredStep]: ...

    def record_intent(self, entry: EffectEntry) -> EffectEntry | None:
        """Write the intent (committed before returning); if the key exists, return it unchanged."""
        ...

    def effect(self, key: str) -> EffectEntry | None: ...

    def effects(self, run_id: str, step: int | None = None) -> list[EffectEntry]:
        """The run's ledger entries (only those of ``step`` when given: what a resume checks)."""
        ...

    def set_effect_status(self, key: str, status: EffectStatus) -> None: ...

    def beat(self, beat: Heartbeat) -> None: ...

    def last_beat(self, run_id: str) -> Heartbeat | None: ...

    def set_status(self, run_id: str, status: str, reason: str) -> None: ...

    def add_report(self, run_id: str, at: float, text: str) -> None: ...

    def reports(self, run_id: str) -> list[str]: ...

    def close(self) -> None: ...


class InMemoryStore:
    """The deterministic double: same semantics as :class:`~harness_lab.store.SQLiteStore`, no file."""

    def __init__(self) -> None:
        self._runs: dict[str, RunInfo] = {}
        self._steps: dict[str, dict[int, StoredStep]] = {}
        self._effects: dict[str, EffectEntry] = {}
        self._effect_keys: dict[tuple[str, int], list[str]] = {}  # (run id, step) -> its entries' keys, in order
        self._beats: dict[str, Heartbeat] = {}
        self._reports: dict[str, list[str]] = {}
        self._blobs: dict[str, str] = {}
        self._files: dict[str, bytes] = {}
        self._manifests: dict[str, dict[int, tuple[int, str]]] = {}

    def create_run(self, run_id: str, spec: dict[str, Any], at: float) -> None:
        if run_id in self._runs:
            raise StoreError(f"run id {run_id!r} exists already; resume it or choose another id")
        self._runs[run_id] = RunInfo(run_id, dict(spec), at)
        self._steps[run_id] = {}

    def has_run(self, run_id: str) -> bool:
        return run_id in self._runs

    def run_info(self, run_id: str) -> RunInfo:
        if run_id not in self._runs:
            raise StoreError(_unknown_run(run_id, self.run_ids()))
        return self._runs[run_id]

    def run_ids(self) -> list[str]:
        return sorted(self._runs)

    def take_lease(self, run_id: str) -> None:
        pass  # the store lives in one process: nothing else can write its runs

    def release_lease(self, run_id: str) -> None:
        pass

    def commit_step(self, run_id: str, step: int, at: float, record: str, checkpoint: str,
                    context: str | None, blobs: Sequence[tuple[str, str]] = (), *,
                    settle_effects: bool = True, register: dict[str, Any] | None = None,
                    files: StepFiles | None = None, base: int | None = None, lease: bool = False) -> None:
        if register is not None:
            self.create_run(run_id, register, at)
        steps = self._steps.get(run_id)
        if steps is None:
            raise StoreError(_unknown_run(run_id, self.run_ids()))
        if step in steps:
            raise StoreError(f"run {run_id!r} already has step {step}; a committed step is never rewritten")
        if base is not None and base != step and not checkpoint.startswith(WHOLE):
            # Kept whole, as a file's reader hands it out: folded onto the row before (whole already).
            before = steps.get(step - 1)
            if before is None or not 0 <= base < step:
                raise StoreError(f"run {run_id!r} step {step}: a checkpoint delta on base {base} without the row before")
            checkpoint = fold(before.checkpoint, [checkpoint])
        steps[step] = StoredStep(run_id, step, at, record, checkpoint, context)
        for sha, text in blobs:
            self._blobs.setdefault(sha, text)
        if files is not None:
            for sha, data in files.data:
                self._files.setdefault(sha, data)
            self._manifests.setdefault(run_id, {})[step] = (files.base, files.manifest)
        for key in self._effect_keys.get((run_id, step), ()) if settle_effects else ():  # this step's, not all
            if (entry := self._effects[key]).status in ("intent", "resolved"):
                self._effects[key] = _with_status(entry, "committed")

    def last_step(self, run_id: str) -> StoredStep | None:
        steps = self._steps.get(run_id) or {}
        return steps[max(steps)] if steps else None

    def first_step(self, run_id: str) -> StoredStep | None:
        steps = self._steps.get(run_id) or {}
        return steps[min(steps)] if steps else None

    def step(self, run_id: str, step: int) -> StoredStep:
        self.run_info(run_id)
        if step not in self._steps[run_id]:
            raise StoreError(f"run {run_id!r} has no step {step}")
        return self._steps[run_id][step]

    def blob(self, sha256: str) -> str | None:
        return self._blobs.get(sha256)

    def blob_texts(self, sha256s: Collection[str]) -> dict[str, str]:
        return {sha: self._blobs[sha] for sha in sha256s if sha in self._blobs}

    def file_data(self, sha256: str) -> bytes | None:
        return self._files.get(sha256)

    def files_data(self, sha256s: Collection[str]) -> dict[str, bytes]:
        return {sha: self._files[sha] for sha in sha256s if sha in self._files}

    def manifests(self, run_id: str, step: int) -> list[tuple[int, str]]:
        rows = self._manifests.get(run_id, {})
        steps = list(rows)  # in commit order: a run's steps only grow
        at = bisect.bisect_right(steps, step)
        if at == 0:
            return []
        base = rows[steps[at - 1]][0]
        return [(n, rows[n][1]) for n in steps[bisect.bisect_left(steps, base):at]]

    def contexts(self, run_id: str, start: int, end: int) -> list[tuple[int, str | None]]:
        self.run_info(run_id)
        steps = self._steps[run_id]
        return [(n, steps[n].context) for n in range(max(start, 0), end + 1) if n in steps]

    def history(self, run_id: str) -> list[HistoryEntry]:
        self.run_info(run_id)
        return [HistoryEntry(run_id, n, s.at) for n, s in sorted(self._steps[run_id].items())]

    def steps(self, run_id: str, start: int = 1, end: int | None = None) -> list[StoredStep]:
        self.run_info(run_id)
        rows = self._steps[run_id]
        return [rows[s] for s in sorted(rows) if s >= start and (end is None or s <= end)]

    def record_intent(self, entry: EffectEntry) -> EffectEntry | None:
        if entry.key in self._effects:
            return self._effects[entry.key]
        self._effects[entry.key] = entry
        self._effect_keys.setdefault((entry.run_id, entry.step), []).append(entry.key)
        return None

    def effect(self, key: str) -> EffectEntry | None:
        return self._effects.get(key)

    def effects(self, run_id: str, step: int | None = None) -> list[EffectEntry]:
        if step is not None:
            return [self._effects[key] for key in self._effect_keys.get((run_id, step), ())]
        return [e for e in self._effects.values() if e.run_id == run_id]

    def set_effect_status(self, key: str, status: EffectStatus) -> None:
        if key not in self._effects:
            raise StoreError(f"no effect with idempotency key {key!r}")
        self._effects[key] = _with_status(self._effects[key], status)

    def beat(self, beat: Heartbeat) -> None:
        self._beats[beat.run_id] = beat

    def last_beat(self, run_id: str) -> Heartbeat | None:
        return self._beats.get(run_id)

    def set_status(self, run_id: str, status: str, reason: str) -> None:
        info = self.run_info(run_id)
        self._runs[run_id] = RunInfo(info.run_id, info.spec, info.created_at, status, reason)

    def add_report(self, run_id: str, at: float, text: str) -> None:
        self.run_info(run_id)
        self._reports.setdefault(run_id, []).append(text)

    def reports(self, run_id: str) -> list[str]:
        self.run_info(run_id)
        return list(self._reports.get(run_id, []))

    def close(self) -> None:
        return None


def _with_status(entry: EffectEntry, status: EffectStatus) -> EffectEntry:
    return EffectEntry(entry.key, entry.run_id, entry.step, entry.tool, status, entry.detail)


def _unknown_run(run_id: str, known: Sequence[str]) -> str:
    shown = ", ".join(known[:10]) + (" ..." if len(known) > 10 else "")
    return f"unknown run id {run_id!r}; known: {shown or '(none)'}"
