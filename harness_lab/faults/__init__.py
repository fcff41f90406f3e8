"""Faults you can inject into a run: a named catalogue, the crash points, and the per-run schedule.

``run.inject("tool_timeout")`` (or ``run.inject(ToolTimeout(seconds=300), at_step=4)``) arms a
fault; the step it strikes records it (``fault`` and ``fault_answer`` notes in the trace) and
``run.faults`` keeps one :class:`FaultRecord` per firing with how the harness answered.
"""

from .base import CrashPoint, Fault, FaultHook, FaultRecord, FaultSchedule, FaultTarget
from .catalogue import (
    ArtifactChangedAfterValidation,
    BudgetSqueeze,
    EmptyResult,
    ForbiddenStateWrite,
    MalformedProposal,
    PathEscape,
    ProcessCrash,
    RepeatedActionLoop,
    StaleContext,
    SummaryDropsAnomaly,
    ToolException,
    ToolTimeout,
    fault_catalogue,
    fault_names,
    resolve_fault,
)

__all__ = [
    "ArtifactChangedAfterValidation",
    "BudgetSqueeze",
    "CrashPoint",
    "EmptyResult",
    "Fault",
    "FaultHook",
    "FaultRecord",
    "FaultSchedule",
    "FaultTarget",
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
