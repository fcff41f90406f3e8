"""The time-travel records: one :class:`StepPoint` per step (``Run.history``), the read-only
:class:`StepView` of one step (``Run.at(n)``), and the :class:`FileChange` of a workspace file
between two steps. Frozen: a view is what the store says step n was, never a handle to change it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, PrivateAttr

from ..context import ContextView
from ..errors import RunStateError
from ..records.events import Decision, StopReason, Usage
from ..records.proposal import Proposal
from ..records.states import RunState
from ..records.tools import ToolResult
from ..validation import Verdict

__all__ = ["ROLLED_BACK", "BudgetChoice", "FileChange", "StepPoint", "StepView"]

# The note a rollback leaves for the next step's record: the context that step's proposer saw (Run.at).
ROLLED_BACK = "rolled_back"

BudgetChoice: TypeAlias = Literal["fresh", "keep"] | Mapping[str, int | float]
"""What a fork or rollback from step n starts with spent: ``"keep"`` the spend at step n, ``"fresh"``
nothing, a mapping the fields it names (decisions, tool_calls, tokens, elapsed_s), the rest as at step n."""


class StepPoint(BaseModel):
    """One step of a run as ``Run.history`` lists it (step 0: the run as registered, no decision)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["step_point"] = "step_point"
    run_id: str  # the run whose row this is: a fork's timeline starts with its source's steps
    step: int
    state: RunState  # after the step
    decision: str | None  # the Decision's verdict: execute, refuse, block, validate, exhaust, ...
    tool: str | None  # the proposal's tool kind
    stop: str | None  # the StopReason code, when the step stopped the run
    accepted: bool | None  # the finish verdict, when the step validated one
    workspace_hash: str | None
    spent: Usage  # cumulative, after the step
    at: float


class FileChange(BaseModel):
    """One workspace file that differs between two steps (or two runs): sha256s and a unified diff."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["file_change"] = "file_change"
    path: str
    change: Literal["added", "removed", "modified"]
    before: str | None
    after: str | None
    diff: str  # unified diff for UTF-8 text under 1 MiB, else a one-line "binary/large" note


class StepView(BaseModel):
    """Step ``n`` of a run, read-only: what the proposer saw (``context``: the view built from the context
    after step n-1, every layer, full texts), what it proposed, what was decided and what came back,
    the budget spent and the workspace files after the step with their changes against step n-1."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    kind: Literal["step_view"] = "step_view"
    step: int
    point: StepPoint
    context: ContextView | None  # None for step 0 (nothing was proposed)
    proposal: Proposal | None
    decision: Decision | None
    result: ToolResult | None
    verdict: Verdict | None
    stop: StopReason | None
    files: dict[str, str]  # path -> sha256 of every workspace file after the step (empty: the store kept
    # none for it, as a store written before schema 7)
    changes: list[FileChange]  # against step n-1
    _file_bytes: Callable[[str], bytes | None] | None = PrivateAttr(default=None)
    _ref: Callable[[str], str] | None = PrivateAttr(default=None)

    def file_text(self, path: str) -> str:
        """The text of workspace file ``path`` as it was after this step; one line if it is absent or not text."""
        sha = self.files.get(path)
        if sha is None:
            raise RunStateError(f"no file {path!r} in the workspace at step {self.step}")
        data = self._file_bytes(sha) if self._file_bytes is not None else None
        if data is None:
            raise RunStateError(f"file {path!r} at step {self.step}: its bytes (sha256 {sha[:12]}) are not in the store "
                                "(withheld when they hold a secret the contract's redaction rules catch)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise RunStateError(f"file {path!r} at step {self.step} is binary ({len(data)} bytes), not UTF-8 text"
                                ) from None

    def ref(self, ref_id: str) -> str:
        """An L5 reference or stored-history id resolved as the run's ``read_ref`` tool would at this step."""
        if self._ref is None:
            raise RunStateError(f"step {self.step} has no context to resolve {ref_id!r} in")
        return self._ref(ref_id)
