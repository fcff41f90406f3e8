"""The fault catalogue: the twelve faults SPEC.md lists, each a frozen record with defaults.

``fault_catalogue()`` builds the catalogue as a fresh read-only mapping (no registry is mutated at
import). Parameters are fields, so ``ToolTimeout(seconds=300)`` or ``ProcessCrash(point=...)`` is a
variant of an entry. Each class's first docstring line is what ``harness-lab faults`` prints; the
rest says what the harness is expected to answer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from ..context import ContextItem
from ..context.anomaly import anomaly_lines
from ..records.actions import ActionBase
from ..records.effect_classes import READ_TOOLS
from ..records.proposal import Proposal
from ..records.tools import ToolResult
from .base import CrashPoint, Fault, FaultHook, FaultTarget, ToolImpl

__all__ = [
    "ArtifactChangedAfterValidation",
    "BudgetSqueeze",
    "EmptyResult",
    "ForbiddenStateWrite",
    "MalformedProposal",
    "PathEscape",
    "ProcessCrash",
    "RepeatedActionLoop",
    "StaleContext",
    "SummaryDropsAnomaly",
    "ToolException",
    "ToolTimeout",
    "fault_catalogue",
    "fault_names",
    "resolve_fault",
]


class ToolException(Fault):
    """The next tool call's implementation raises (a broken tool, a dropped connection).

    Expected answer: a structured error (status error, retryable) fed back; no traceback reaches the
    context; the run keeps RUNNING.
    """

    name: Literal["tool_exception"] = "tool_exception"
    hook: ClassVar[FaultHook] = "tool"
    message: str = "connection reset by peer"

    def tool(self, action: ActionBase) -> ToolImpl:
        def impl(_: ActionBase) -> ToolResult:
            raise RuntimeError(self.message)

        return impl


class ToolTimeout(Fault):
    """The next tool call hangs and is killed at its time limit.

    Expected answer: a structured ``timeout`` result (retryable, no effect), fed back; not a success.
    The hang's ``seconds`` count as elapsed run time, so the wall-clock budget sees them.
    """

    name: Literal["tool_timeout"] = "tool_timeout"
    hook: ClassVar[FaultHook] = "tool"
    seconds: float = Field(default=30.0, gt=0, allow_inf_nan=False)

    def hang_seconds(self) -> float:
        return self.seconds

    def tool(self, action: ActionBase) -> ToolImpl:
        def impl(a: ActionBase) -> ToolResult:
            return ToolResult.failure(
                a.kind, f"no answer within {self.seconds:g}s; the call was killed",
                "retry later, ask for less, or try another source", status="timeout", retryable=True,
            )

        return impl


def _last_note(run: FaultTarget, topic: str) -> str | None:
    """The message of this step's last note on ``topic``, if any. Read from the newest event back to the first
    of an earlier step (events are appended in step order): a long run's old events, packed
    (:mod:`harness_lab.loop.record_log`), are never unpacked."""
    step = run.step_no
    for event in reversed(run.events):
        if event.step < step:
            return None
        if event.kind == "note" and event.step == step and event.topic == topic:
            return event.message
    return None


class EmptyResult(Fault):
    """The next read returns nothing but says "ok" (an empty result disguised as success).

    Expected answer: the executor turns the empty read into an error ("an empty read is not
    evidence"); nothing is recorded as read.
    """

    name: Literal["empty_result"] = "empty_result"
    hook: ClassVar[FaultHook] = "tool"

    def applies_to(self, action: ActionBase) -> bool:
        return action.kind in READ_TOOLS

    def tool(self, action: ActionBase) -> ToolImpl:
        return lambda a: ToolResult.success(a.kind, "")


class ArtifactChangedAfterValidation(Fault):
    """The report is rewritten after the validator read it, before acceptance (TOCTOU).

    Expected answer: the runtime re-hashes the artifact before accepting; the bytes differ, so the
    finish is not accepted (back to RUNNING with the reason), and no receipt binds unvalidated bytes.
    """

    name: Literal["artifact_changed_after_validation"] = "artifact_changed_after_validation"
    hook: ClassVar[FaultHook] = "after_validate"
    text: str = "\n\nEdited after validation: every source confirms the conclusion.\n"

    def after_validate(self, run: FaultTarget) -> str:
        path = run.workspace / run.contract.verification.report.path
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, self.text.encode())
        finally:
            os.close(fd)
        return f"appended {len(self.text.encode())} bytes to {path.name} behind the validator's back"

    def answer(self, run: FaultTarget) -> str:
        note = _last_note(run, "artifact_changed")
        if note is not None:
            return f"change detected by the re-hash before acceptance: {note}"
        return "change NOT detected before acceptance"


class StaleContext(Fault):
    """Someone outside the run edits a workspace file, so what the run read earlier is stale.

    Expected answer: the runtime sees the workspace hash change between steps, marks its workspace
    observations stale, takes them out of the view (reselect) and feeds back a note to re-read.
    """

    name: Literal["stale_context"] = "stale_context"
    path: str = "notes.md"
    content: str = "Edited outside the run: the earlier figures are wrong.\n"

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        # The fault plays someone editing a *workspace* file: never a file elsewhere on disk.
        parts = PurePosixPath(value).parts
        if not value or PurePosixPath(value).is_absolute() or ".." in parts:
            raise ValueError(f"path {value!r}: must be a relative path inside the workspace, without '..'")
        return value

    def before_step(self, run: FaultTarget) -> str:
        target = run.workspace / self.path
        if not target.resolve().is_relative_to(run.workspace.resolve()):  # through a planted symlink
            return f"nothing written: {self.path} leads outside the workspace through a symbolic link"
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, self.content.encode())
        finally:
            os.close(fd)
        return f"an external writer replaced {self.path}"

    def answer(self, run: FaultTarget) -> str:
        note = _last_note(run, "external_change")
        if note is not None:
            return note
        if not run.records:  # the run's first step: no workspace hash to compare with, nothing read yet
            return ("external change not reported, rightly: the run had observed nothing of the workspace "
                    f"before step {run.step_no}, so nothing could go stale; inject it at a later step to test staleness")
        return "external change NOT detected"


class BudgetSqueeze(Fault):
    """The scheduler cuts the budget mid-run: no tool calls left (and optionally a smaller context).

    Expected answer: the budget is checked before the next tool call, which is not made; the run
    stops EXHAUSTED (tool_budget), "not finished", with what was done.
    """

    name: Literal["budget_squeeze"] = "budget_squeeze"
    tool_calls_left: int = Field(default=0, ge=0)
    context_tokens: int | None = Field(default=None, gt=0)

    def before_step(self, run: FaultTarget) -> str:
        budget = run.gates.budget
        limit = min(budget.max_tool_calls, run.usage.tool_calls + self.tool_calls_left)
        run.gates.budget = budget.model_copy(update={"max_tool_calls": limit})
        done = f"tool-call budget cut to {limit} ({self.tool_calls_left} left)"
        if self.context_tokens is not None:
            run.context.budget_tokens = self.context_tokens
            done += f"; context budget cut to {self.context_tokens} tokens"
        return done

    def answer(self, run: FaultTarget) -> str:
        if self.context_tokens is None:
            return ""
        budget, held = run.context.budget_tokens, run.context.view().total_tokens
        if held <= budget:
            return f"the context view fits the {budget}-token budget ({held} tokens)"
        # The harness keeps pinned and protected items (instructions, anomalies) whatever the budget.
        return (f"context budget of {budget} tokens NOT met: the view holds {held} tokens ({held - budget} over), "
                "pinned and protected items are never dropped")


class RepeatedActionLoop(Fault):
    """The proposer gets stuck and repeats its last tool call, unchanged, for several steps.

    Expected answer: convergence detection refuses the 3rd identical call with a hint, and stops the
    run BLOCKED (no_progress) when it comes again after the hint.
    """

    name: Literal["repeated_action_loop"] = "repeated_action_loop"
    hook: ClassVar[FaultHook] = "proposal"
    steps: int = Field(default=4, ge=1)  # a redefined field keeps no constraint of the base's: restate it
    fallback: dict[str, Any] = {"kind": "list_dir", "path": "."}

    def replace_proposal(self, run: FaultTarget, proposal: Proposal) -> tuple[object, str]:
        last = next((r.proposal for r in reversed(run.records)
                     if r.proposal is not None and r.proposal.action is not None and r.proposal.action.is_tool_call),
                    None)
        raw = last.raw if last is not None else self.fallback
        return raw, f"proposal replaced by a repeat of {raw!r}"


class ForbiddenStateWrite(Fault):
    """The proposal tries to write the run state itself (``set_run_state`` to REVIEW_READY).

    Expected answer: the action is forbidden, never executed; the run stops BLOCKED (forbidden_action).
    """

    name: Literal["forbidden_state_write"] = "forbidden_state_write"
    hook: ClassVar[FaultHook] = "proposal"
    raw: dict[str, Any] = {"kind": "set_run_state", "state": "REVIEW_READY", "verified": True}

    def replace_proposal(self, run: FaultTarget, proposal: Proposal) -> tuple[object, str]:
        return self.raw, f"proposal replaced by {self.raw!r}"


class PathEscape(Fault):
    """The proposal reads outside the workspace: through a planted symlink, or with ``../``.

    Expected answer: the sandbox denies the call (status denied); no outside byte reaches the context.
    """

    name: Literal["path_escape"] = "path_escape"
    hook: ClassVar[FaultHook] = "proposal"
    via: Literal["symlink", "dotdot"] = "symlink"
    outside: str = "/etc"
    file: str = "passwd"

    def replace_proposal(self, run: FaultTarget, proposal: Proposal) -> tuple[object, str]:
        if self.via == "dotdot":
            path = "../" * 12 + self.outside.strip("/") + "/" + self.file
            return {"kind": "read_file", "path": path}, f"proposal replaced by read_file({path})"
        link = run.workspace / "escape-link"
        if not link.is_symlink():
            os.symlink(self.outside, link)
        return ({"kind": "read_file", "path": f"escape-link/{self.file}"},
                f"planted escape-link -> {self.outside}; proposal replaced by read_file(escape-link/{self.file})")


def _drop_anomalies(items: list[ContextItem]) -> str:
    # The classic bad summary: "HTTP 200 but body code 500" becomes "all calls succeeded".
    return f"{len(items)} earlier steps: all calls succeeded, nothing unusual"


class SummaryDropsAnomaly(Fault):
    """A compression pass runs with a summarizer that drops anomalies ("all calls succeeded").

    Expected answer: the context's self-check finds each lost anomaly, reports it and re-pins it
    verbatim, so the view still shows it.
    """

    name: Literal["summary_drops_anomaly"] = "summary_drops_anomaly"

    def before_step(self, run: FaultTarget) -> str:
        ctx = run.context
        saved = ctx.summarizer
        ctx.summarizer = _drop_anomalies
        try:
            report = ctx.compress()
        finally:
            ctx.summarizer = saved
        return f"forced a compression pass with an anomaly-dropping summarizer ({len(report.summarized)} items summarized)"

    def answer(self, run: FaultTarget) -> str:
        report = run.context.last_report
        if report is not None and report.fired:
            lost = len(report.lost_anomalies) + len(report.lost_failures) + len(report.lost_pinned)
            if report.repinned:
                return f"context self-check fired: {lost} lost item(s) re-pinned verbatim ({', '.join(report.repinned)})"
            return f"context self-check fired: the summary lost {lost} item(s) and saved nothing, so it was not used"
        if report is None or not report.summarized:
            return "compression had nothing to summarize"
        kept = [line for item in run.context.view().items for line in anomaly_lines(item.text)]
        return f"self-check found no loss ({len(kept)} anomaly lines in view)"


class ProcessCrash(Fault):
    """The process dies at a chosen point of the step (before/after the effect, before/after commit).

    Raises :class:`~harness_lab.errors.SimulatedCrash`; the run object is dead afterwards. Expected
    answer: resuming from the last checkpoint reaches the uninterrupted state, no effect applied twice.
    """

    name: Literal["process_crash"] = "process_crash"
    hook: ClassVar[FaultHook] = "crash"
    point: CrashPoint = CrashPoint.AFTER_EFFECT

    def crash_point(self) -> CrashPoint | None:
        return self.point


class MalformedProposal(Fault):
    """The proposal is not an action at all (free text instead of a mapping with a ``kind``).

    Expected answer: a structured ``malformed`` error fed back with a hint; nothing runs; RUNNING.
    """

    name: Literal["malformed_proposal"] = "malformed_proposal"
    hook: ClassVar[FaultHook] = "proposal"
    raw: Any = "Done! I checked all sources, the report is verified."

    def replace_proposal(self, run: FaultTarget, proposal: Proposal) -> tuple[object, str]:
        return self.raw, f"proposal replaced by {self.raw!r}"


_CLASSES: tuple[type[Fault], ...] = (
    ToolException, ToolTimeout, EmptyResult, ArtifactChangedAfterValidation, StaleContext, BudgetSqueeze,
    RepeatedActionLoop, ForbiddenStateWrite, PathEscape, SummaryDropsAnomaly, ProcessCrash, MalformedProposal,
)


def fault_catalogue() -> Mapping[str, Fault]:
    """name -> the fault with its default parameters (a fresh read-only mapping, catalogue order)."""
    entries = [cls.model_validate({}) for cls in _CLASSES]
    return MappingProxyType({fault.name: fault for fault in entries})


def fault_names() -> tuple[str, ...]:
    return tuple(fault_catalogue())


def resolve_fault(fault_or_name: Fault | str) -> Fault:
    """A fault given itself or by catalogue name; an unknown name is misuse (ValueError)."""
    if isinstance(fault_or_name, Fault):
        return fault_or_name
    catalogue = fault_catalogue()
    if fault_or_name not in catalogue:
        raise ValueError(f"unknown fault {fault_or_name!r}; choose one of {', '.join(catalogue)}")
    return catalogue[fault_or_name]
