"""harness-lab: the runtime around a model that decides what runs, validates "done" against
real artifacts, sandboxes tools, manages context, and persists runs.

The model only proposes; the runtime decides. Start at :class:`Run`.
"""

from .clock import Clock, FakeClock, SystemClock
from .contract import ControlContract, load_contract
from .errors import (
    ConfigError,
    HarnessLabError,
    RunStateError,
    SandboxEnvironmentError,
    SimulatedCrash,
    StoreError,
    WorkspaceError,
)
from .evidence import EvidenceCatalogue
from .faults import CrashPoint, Fault, fault_catalogue
from .loop.approval import ApprovalDecision, ApprovalRequest, Approver, AskHuman, AutoApprove, AutoReject
from .loop.repair import RepairPolicy
from .loop.run import Run
from .loop.scheduler import ExternalLoop
from .proposers import FunctionProposer, ScriptedProposer
from .records.events import StepRecord, StopReason
from .records.proposal import Proposal, parse_proposal
from .records.states import LoopState, RunState
from .records.tools import ToolResult
from .sandbox import Sandbox, SandboxPolicy
from .store import InMemoryStore, SQLiteStore, Store
from .timeline import StepPoint, StepView
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
    "CrashPoint",
    "EvidenceCatalogue",
    "ExternalLoop",
    "FakeClock",
    "Fault",
    "FunctionProposer",
    "HarnessLabError",
    "InMemoryStore",
    "LoopState",
    "Proposal",
    "Receipt",
    "RepairPolicy",
    "Run",
    "RunState",
    "RunStateError",
    "SQLiteStore",
    "Sandbox",
    "SandboxEnvironmentError",
    "SandboxPolicy",
    "ScriptedProposer",
    "SimulatedCrash",
    "StepPoint",
    "StepView",
    "StepRecord",
    "StopReason",
    "Store",
    "StoreError",
    "SystemClock",
    "ToolResult",
    "WorkspaceError",
    "check_report",
    "fault_catalogue",
    "load_contract",
    "parse_proposal",
]
