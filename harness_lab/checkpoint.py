"""The checkpoint record and the per-step checkpointer a run with a store carries.

A :class:`Checkpoint` (seed 000) holds what a later process needs to continue: the contract
version, the completed scope, artifact and workspace hashes, the last verification result, the
failure root cause, pending items, the next step, and the restorable run state
(:meth:`Run.capture() <harness_lab.run.Run.capture>`). It never holds secrets: every text written
to the store passes :func:`redact`, which honours ``contract.memory.exclude``.

The hot path (:meth:`Checkpointer.commit`) builds plain dicts and compact JSON (no model
validation), and writes one row in one transaction; the typed record is for readers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from .actions import DeleteFile, GatedAction, RunCommand, WriteFile, WriteReport, _Action
from .errors import StoreError
from .events import StepRecord
from .proposers.scripted import ScriptedProposer
from .states import RunState
from .store import EffectEntry, Store
from .tools import ToolResult

if TYPE_CHECKING:
    from ._run_base import RunBase as Run

__all__ = ["SECRET_CATEGORIES", "Checkpoint", "Checkpointer", "effect_class", "redact", "run_spec"]

# memory.exclude entries that name a kind of secret (seed 000: "secrets, raw_credentials").
SECRET_CATEGORIES = frozenset({"secrets", "raw_credentials", "credentials", "api_keys", "tokens", "passwords"})
_SECRET_PATTERNS = (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[^\"]*?-----END [A-Z ]*PRIVATE KEY-----",  # within one JSON string
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bsk-[A-Za-z0-9_-]{16,}",
    r"\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}",
    r"(?i:\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*)",
    # key = value / "key": "value" (also inside JSON-escaped text): keep the key, drop the value
    r"(?P<k>(?i:password|passwd|pwd|api[_-]?key|secret|token)\\?\"?\s*[:=]\s*\\?\"?)[^\s\"\\,;&]{3,}",
)
_SECRET_ENV_NAME = re.compile(r"(?i)key|token|secret|password|passwd|credential")
_REDACTED = "[REDACTED]"
# Tools whose effect lands in the workspace and can be re-done byte for byte (same path, same bytes).
_REDOABLE = frozenset({"write_file", "write_report"})
_WRITES = frozenset({"write_file", "write_report", "delete_file", "run_command"})


class Checkpoint(BaseModel):
    """What is persisted after each step (read side; see :meth:`Checkpointer.commit`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["checkpoint"] = "checkpoint"
    run_id: str
    step: int
    seq: int
    contract_version: str
    state: RunState
    completed_scope: tuple[str, ...]
    artifact_sha256: dict[str, str]
    workspace_hash: str | None
    verification: dict[str, Any] | None
    failure_root_cause: str | None
    pending: tuple[str, ...]
    next_step: str
    usage: dict[str, Any]
    run_state: dict[str, Any]
    excluded: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.run_id}@{self.step}"


def effect_class(action: _Action) -> Literal["read", "redoable", "workspace", "external"]:
    """How a resume treats this action if it was in flight at a crash."""
    if isinstance(action, GatedAction):
        return "external"  # the outside world: its outcome cannot be checked from here
    if isinstance(action, (WriteFile, WriteReport)):
        return "redoable"
    if isinstance(action, (DeleteFile, RunCommand)):
        return "workspace"
    return "read"


class _Redactor:
    def __init__(self, exclude: Iterable[str]) -> None:
        self.exclude = tuple(exclude)
        patterns: list[str] = []
        if SECRET_CATEGORIES & set(self.exclude):
            patterns += _SECRET_PATTERNS
            # Values of secret-named environment variables (an endpoint key, a token) never persist.
            patterns += sorted((re.escape(v) for k, v in os.environ.items()
                                if _SECRET_ENV_NAME.search(k) and len(v) >= 8 and not {'"', "\\"} & set(v)),
                                key=len, reverse=True)
        self._re = re.compile("|".join(f"(?:{p})" for p in patterns), re.DOTALL) if patterns else None

    def __call__(self, text: str) -> str:
        if self._re is None or self._re.search(text) is None:
            return text
        return self._re.sub(lambda m: (m.group("k") or "") + _REDACTED, text)


def redact(text: str, exclude: Iterable[str]) -> str:
    """``text`` with every secret of the excluded categories replaced by ``[REDACTED]``."""
    return _Redactor(exclude)(text)


def run_spec(run: Run) -> dict[str, Any]:
    """How to rebuild this run in another process (redacted before it is stored)."""
    proposer: dict[str, Any] = {"kind": type(run.proposer).__name__}
    if isinstance(run.proposer, ScriptedProposer):
        proposer = {"kind": "scripted", "actions": list(run.proposer.actions), "then": run.proposer.then}
    return {
        "kind": "run_spec",
        "scenario": run.scenario,
        "contract": run.contract.model_dump(mode="json"),
        "workspace": str(run.workspace),
        "validation": run.validation,
        "proposer": proposer,
    }


class Checkpointer:
    """Writes one checkpoint per step and keeps the side-effect ledger for one run."""

    def __init__(self, store: Store, run: Run, *, fresh: bool) -> None:
        if fresh and store.has_run(run.run_id):
            raise StoreError(f"run id {run.run_id!r} exists already in the store; resume it or choose another id")
        self.store, self.run = store, run
        self._redact = _Redactor(run.contract.memory.exclude)
        self._drop = tuple(k for k in run.contract.memory.exclude if k not in SECRET_CATEGORIES)
        self._version = run.contract.version
        self._seq = run.events[-1].seq if run.events else 0
        self._artifacts: dict[str, str] = {}
        self._verification: dict[str, Any] | None = None
        self._failure: str | None = None
        self.last_commit_at = time.time()
        self.last_step = run.step_no
        self.window = 256  # step records kept in run.records (events: 16x); the rest is in the store
        if fresh:  # registered at once with a first checkpoint (step 0): a kill before step 1 resumes too
            self.store.create_run(run.run_id, json.loads(self._redact(_dumps(run_spec(run)))), self.last_commit_at)
            self._write(run.step_no, "null", run.sandbox.workspace_hash(), run.usage.model_dump(mode="json"))

    def adopt(self, checkpoint: Checkpoint) -> None:
        """Carry the slow-moving fields on from a loaded checkpoint (resume, fork)."""
        self._seq, self._artifacts = checkpoint.seq, dict(checkpoint.artifact_sha256)
        self._verification, self._failure = checkpoint.verification, checkpoint.failure_root_cause
        self.last_step = checkpoint.step

    # -- the ledger -----------------------------------------------------------------------------
    def before_effect(self, action: _Action, key: str) -> ToolResult | None:
        """Write the intent before an effect runs; a result here means: do not run it."""
        cls = effect_class(action)
        if cls == "read":
            return None
        detail: dict[str, Any] = {"kind": action.kind}
        if cls != "external" and (path := _target(action, self.run)) is not None:
            manifest = self.run.sandbox.manifest()
            detail["path"] = path
            detail["pre"] = {p: manifest.get(p) for p in _with_ancestors(path)}
        entry = EffectEntry(key, self.run.run_id, self.run.step_no, action.kind, "intent", detail)
        existing = self.store.record_intent(entry)
        if existing is None or existing.status == "resolved":
            return None
        if existing.status == "intent" and cls == "redoable":
            return None  # re-writing the same bytes is the same effect
        why = ("was applied and committed before; it is never applied twice" if existing.status == "committed"
               else "has an uncertain outcome (in flight at a crash); it is never retried silently")
        return ToolResult.failure(action.kind, f"effect {key} {why}",
                                  "a human must check the outside world before this is tried again")

    # -- the hot path ---------------------------------------------------------------------------
    def commit(self, record: StepRecord, workspace_hash: str | None) -> None:
        """One row, one transaction: the step record, the checkpoint, the context state."""
        if record.events:
            self._seq = max(self._seq, record.events[-1].seq)
        self._observe(record)
        self._write(record.step, record.model_dump_json(), workspace_hash, record.usage.model_dump(mode="json"))

    def _write(self, step: int, record: str, workspace_hash: str | None, usage: dict[str, Any]) -> None:
        run, now = self.run, time.time()
        state = run.capture()
        context = state.pop("context")
        for key in self._drop:
            state.pop(key, None)
        checkpoint = {
            "kind": "checkpoint", "run_id": run.run_id, "step": step, "seq": self._seq,
            "contract_version": self._version, "state": run.state.value,
            "completed_scope": sorted(run.executor.observed), "artifact_sha256": self._artifacts,
            "workspace_hash": workspace_hash, "verification": self._verification,
            "failure_root_cause": self._failure, "pending": _pending(run), "next_step": _next_step(run),
            "usage": usage, "run_state": state, "excluded": self._drop,
        }
        redact_ = self._redact
        self.store.commit_step(
            run.run_id, step, now, redact_(record), redact_(_dumps(checkpoint)),
            None if "context" in self._drop else redact_(_dumps(context)),
        )
        self.last_commit_at, self.last_step = now, step

    def _observe(self, record: StepRecord) -> None:
        result, verdict = record.tool_result, record.verdict
        report = self.run.contract.verification.report.path
        if (result is not None and result.tool in _WRITES) or verdict is not None:
            data = _read(self.run.workspace / report)
            self._artifacts = {report: hashlib.sha256(data).hexdigest()} if data is not None else {}
        if verdict is not None:
            self._verification = {"accepted": verdict.accepted, "reasons": list(verdict.reasons)}
            self._failure = None if verdict.accepted else "; ".join(verdict.reasons)
        elif result is not None and not result.ok:
            self._failure = f"{result.tool}: {result.reason}"
        if self.run.stop_reason is not None and self.run.state is not RunState.REVIEW_READY:
            self._failure = f"{self.run.stop_reason.code}: {self.run.stop_reason.message}"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _read(path: os.PathLike[str]) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _target(action: _Action, run: Run) -> str | None:
    if isinstance(action, WriteReport):
        return run.contract.verification.report.path
    path = getattr(action, "path", None)
    return os.path.normpath(path).lstrip("/") if isinstance(path, str) and path else None


def _with_ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


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
