"""Notebook UI for harness-lab: ``LabView(run)`` and its panels (imports the runtime, never the reverse).

Installed as ``harness_lab.widgets`` with the ``lab`` extra (ipywidgets, matplotlib).
"""

from .budget_panel import BudgetPanel
from .compare_panel import CompareView
from .context_panel import ContextPanel
from .fault_panel import FaultPanel, fault_names
from .pending_panel import PendingPanel
from .plot_panel import PlotPanel, budget_figure, budget_series
from .session import Session, SessionEntry, SessionReplay
from .snapshot_panel import SnapshotPanel
from .state_panel import StatePanel
from .timeline_panel import TimelinePanel
from .trace_panel import TracePanel
from .verdict_panel import CHECKS, VerdictPanel, check_rows
from .view import LabView

__all__ = [
    "CHECKS",
    "BudgetPanel",
    "CompareView",
    "ContextPanel",
    "FaultPanel",
    "LabView",
    "PendingPanel",
    "PlotPanel",
    "Session",
    "SessionEntry",
    "SessionReplay",
    "SnapshotPanel",
    "StatePanel",
    "TimelinePanel",
    "TracePanel",
    "VerdictPanel",
    "budget_figure",
    "budget_series",
    "check_rows",
    "fault_names",
]
