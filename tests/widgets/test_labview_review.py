"""LabView stays truthful when driven from Python, on errors, after a fork and over long or stored runs."""

from __future__ import annotations

import pytest
from harness_lab.widgets import LabView

from harness_lab import RunState, RunStateError


def test_a_python_call_updates_the_status_line_as_a_click_does(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.step()  # a notebook cell, not a click: the dashboard shown above must not go stale
    assert "conforming_report: RUNNING after step 1" in view.status.value
    view.run_to_end()
    assert "REVIEW_READY" in view.status.value and "after step 4" in view.status.value
    with pytest.raises(RunStateError):
        view.approve()  # raised in the cell, and shown in the dashboard too
    assert "nothing waits for approval" in view.status.value
    assert run.state is RunState.REVIEW_READY
