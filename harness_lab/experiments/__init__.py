"""Experiments: the seed's ten-scenario table, the four-group study, sweeps."""

from .seed_table import (
    SEED_SCENARIOS,
    ScenarioResult,
    render_table,
    run_experiment,
    run_scenario,
    write_experiment,
)

__all__ = ["SEED_SCENARIOS", "ScenarioResult", "render_table", "run_experiment", "run_scenario", "write_experiment"]
