"""Executes approved actions: evidence reads, report writes, workspace tools, gated effects.

Every path returns a :class:`ToolResult`; an exception inside a tool becomes a structured error
(no traceback reaches the model), and an empty result from a read tool is never a success.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Protocol

from ..errors import StoreError
from ..evidence import EvidenceCatalogue
from ..records.actions import (
    CONTEXT_KINDS,
    ActionBase,
    DeleteFile,
    GatedAction,
    ListDir,
    ReadEvidence,
    ReadFile,
    ReadRef,
    RunCommand,
    Think,
    WriteFile,
    WriteReport,
)
from ..records.effect_classes import READ_TOOLS
from ..records.tools import ToolResult
from ..sandbox import Sandbox

__all__ = ["READ_TOOLS", "ExternalEffects", "Outbox", "ToolExecutor"]

_NOTED = ToolResult.success("think", "noted")  # frozen: one instance serves every think step


class ExternalEffects(Protocol):
    """Where approved external side effects (push, send_message, ...) go."""

    def apply(self, action: GatedAction, idempotency_key: str) -> ToolResult: ...


@dataclass
class Outbox:
    """The lab's stand-in for the outside world: records each effect once per idempotency key."""

    sent: dict[str, GatedAction] = field(default_factory=dict)

    def apply(self, action: GatedAction, idempotency_key: str) -> ToolResult:
        if idempotency_key in self.sent:
            # the flag is what a reader (the dashboard's trace) tells a re-sent effect by, not the wording
            return ToolResult.success(action.kind, "already applied (idempotent replay)", key=idempotency_key,
                                      already_applied=True)
        self.sent[idempotency_key] = action
        return ToolResult.success(action.kind, f"{action.kind} applied", key=idempotency_key)


@dataclass
class ToolExecutor:
    sandbox: Sandbox
    evidence: EvidenceCatalogue
    report_path: str
    read_ref: Callable[[str, int, int | None], str]
    effects: ExternalEffects
    observed: dict[str, str] = field(default_factory=dict)  # evidence id -> sha256 read in this run
    # The run's context answers the subtask cycle and search_history (see harness_lab.loop._context_tools).
    context_tool: Callable[[ActionBase], ToolResult] | None = None

    def execute(self, action: ActionBase, idempotency_key: str) -> ToolResult:
        if type(action) is Think:  # the no-op, as _dispatch answers it: without the call
            return _NOTED
        kind = action.kind
        try:
            result = self._dispatch(action, idempotency_key)
        except Exception as exc:  # a broken tool is data for the model, not a crash of the harness
            return ToolResult.failure(
                kind, f"tool raised {type(exc).__name__}: {str(exc)[:200]}",
                "the tool failed internally; try a different approach or report the limitation",
                retryable=True,
            )
        return _never_empty_success(result) if kind in READ_TOOLS else result

    def with_tool(self, impl: Callable[[ActionBase], ToolResult]) -> ToolExecutor:
        """A copy whose every call runs ``impl`` instead of the tool, behind this executor's own safety net
        (an exception becomes a structured error, an empty read an error): how a tool fault of
        :mod:`harness_lab.faults` misbehaves. It shares ``observed``."""
        return _OneTool(**{f.name: getattr(self, f.name) for f in fields(ToolExecutor)}, impl=impl)

    def _dispatch(self, action: ActionBase, key: str) -> ToolResult:
        if type(action) is Think:  # the no-op first: pydantic's isinstance is Python code (~0.1 µs each)
            return _NOTED
        if isinstance(action, ReadEvidence):
            return self._read_evidence(action.id)
        if isinstance(action, WriteReport):
            return self.sandbox.call("write_file", path=self.report_path, content=action.text)
        if isinstance(action, (ReadFile, ListDir, DeleteFile)):
            return self.sandbox.call(action.kind, path=action.path)
        if isinstance(action, WriteFile):
            return self.sandbox.call("write_file", path=action.path, content=action.content)
        if isinstance(action, RunCommand):
            return self.sandbox.call(
                "run_command", argv=list(action.argv), timeout=action.timeout, tool_type=action.tool_type
            )
        if isinstance(action, ReadRef):
            return self._read_ref(action)
        if isinstance(action, GatedAction):
            return self.effects.apply(action, key)
        if isinstance(action, Think):
            return _NOTED
        kind = action.kind
        if kind in CONTEXT_KINDS and self.context_tool is not None:
            return self.context_tool(action)
        return ToolResult.failure(kind, f"{kind} is not a tool", "propose a tool action")

    def _read_ref(self, action: ReadRef) -> ToolResult:
        ref, start = action.ref, action.start
        try:
            text = self.read_ref(ref, start, action.end)
            # rare path: an empty slice from a start past the end is the model's range, not an empty output
            if start > 0 and not text and start >= (size := len(self.read_ref(ref, 0, None))):
                return ToolResult.failure(
                    "read_ref", f"start {start} is past the end of {ref}, which holds {size} characters",
                    f"read a range that starts below {size}, e.g. read_ref('{ref}', {max(0, size - 2000)}, {size})")
        except KeyError:  # an unknown id: the model's mistake
            return ToolResult.failure("read_ref", f"no stored output with reference {ref!r}",
                                      "use a reference id shown in an L5 item of the context view")
        except StoreError as exc:  # a known id whose text is gone: the environment is broken, not the call
            return ToolResult.failure(
                "read_ref", f"{ref} exists but its stored text could not be loaded ({exc})",
                "the run's store has lost this output; get the data again from its source instead")
        return ToolResult.success("read_ref", text)

    def _read_evidence(self, evidence_id: str) -> ToolResult:
        note = self.evidence.get(evidence_id)
        if note is None:
            return ToolResult.failure(
                "read_evidence", f"no evidence with id {evidence_id!r}",
                "known ids: " + ", ".join(sorted(self.evidence)),
            )
        self.observed[evidence_id] = note.sha256
        return ToolResult.success("read_evidence", note.text, id=evidence_id, sha256=note.sha256)


@dataclass
class _OneTool(ToolExecutor):
    """The executor of :meth:`ToolExecutor.with_tool`: one implementation answers every call."""

    impl: Callable[[ActionBase], ToolResult] | None = None

    def _dispatch(self, action: ActionBase, key: str) -> ToolResult:
        assert self.impl is not None
        return self.impl(action)


def _never_empty_success(result: ToolResult) -> ToolResult:
    if result.ok and not (result.content or "").strip():
        reason, hint = "the tool returned an empty result", "check the path or id, or try another source"
        data = result.data
        if result.tool == "read_file" and "path" in data:  # the path was right: say what is there
            reason = f"'{data['path']}' is empty" if data.get("size") == 0 else f"'{data['path']}' holds only whitespace"
            hint = "read another file, or write this one first"
        return ToolResult.failure(result.tool, reason, "an empty read is not evidence; " + hint, retryable=True)
    return result
