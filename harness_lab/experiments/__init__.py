"""Experiments: the seed's ten-scenario table, the coding tasks' table, the four-group study, sweeps.

Plots live in :mod:`harness_lab.experiments.plots` (needs the ``plot`` extra); it is not imported here.
"""

from .coding_table import (
    CODING_SCENARIOS,
    CodingResult,
    render_coding_table,
    run_coding_experiment,
    run_coding_scenario,
    write_coding_experiment,
)
from .metrics import METRIC_DEFINITIONS, GroupSummary, RunOutcome, summarize
from .noise import NoisyScript, Perturbation, perturb_script
from .seed_table import (
    SEED_SCENARIOS,
    ScenarioResult,
    render_table,
    run_experiment,
    run_scenario,
    write_experiment,
)
from .study import (
    GROUPS,
    REPORTS,
    GroupSpec,
    StudyResult,
    StudyTask,
    TaskFamily,
    run_study,
    run_study_task,
    study_tasks,
)
from .sweep import ProgressLine, sweep
from .tables import render_scenario_table, render_study_table, study_payload, write_study

__all__ = [
    "CODING_SCENARIOS",
    "GROUPS",
    "METRIC_DEFINITIONS",
    "REPORTS",
    "SEED_SCENARIOS",
    "CodingResult",
    "GroupSpec",
    "GroupSummary",
    "NoisyScript",
    "Perturbation",
    "ProgressLine",
    "RunOutcome",
    "ScenarioResult",
    "StudyResult",
    "StudyTask",
    "TaskFamily",
    "perturb_script",
    "render_coding_table",
    "render_scenario_table",
    "render_study_table",
    "render_table",
    "run_coding_experiment",
    "run_coding_scenario",
    "run_experiment",
    "run_scenario",
    "run_study",
    "run_study_task",
    "study_payload",
    "study_tasks",
    "summarize",
    "sweep",
    "write_coding_experiment",
    "write_experiment",
    "write_study",
]
