"""harness-lab: the runtime around a model that decides what runs, validates "done" against
real artifacts, sandboxes tools, manages context, and persists runs.

The model only proposes; the runtime decides. Start at :class:`Run`.
"""

from .actions import Proposal, parse_proposal
from .approval import ApprovalDecision, ApprovalRequest, Approver, AskHuman, AutoApprove, AutoReject
from .clock import Clock, FakeClock, SystemClock
from .contract import ControlContract, load_contract
from .errors import (
    ConfigError,
    HarnessLabError,
    RunStateError,
    SandboxEnvironmentError,
    StoreError,
    WorkspaceError,
)
from .events import StepRecord, StopReason
from .evidence import EvidenceCatalogue
from .proposers import FunctionProposer, ScriptedProposer
from .run import Run
from .sandbox import Sandbox, SandboxPolicy
from .states import LoopState, RunState
from .tools import ToolResult
from .validation import Receipt, check_report

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AskHuman",
    "AutoApprove",
    "AutoReject",
    "Clock",
    "ConfigError",
    "ControlContract",
    "EvidenceCatalogue",
    "FakeClock",
    "FunctionProposer",
    "HarnessLabError",
    "LoopState",
    "Proposal",
    "Receipt",
    "Run",
    "RunState",
    "RunStateError",
    "Sandbox",
    "SandboxEnvironmentError",
    "SandboxPolicy",
    "ScriptedProposer",
    "StepRecord",
    "StopReason",
    "StoreError",
    "SystemClock",
    "ToolResult",
    "WorkspaceError",
    "check_report",
    "load_contract",
    "parse_proposal",
]
