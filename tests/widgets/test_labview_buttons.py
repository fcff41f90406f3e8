"""LabView without a browser: click each button in Python and check the run and the panels."""

from __future__ import annotations

import re

import pytest
from harness_lab.widgets import LabView

from harness_lab import RunState, RunStateError

# The second write overwrites the first: the sandbox snapshots the file before it.
OVERWRITE_THEN_READ = [
    {"kind": "write_file", "path": "a.txt", "content": "first"},
    {"kind": "write_file", "path": "a.txt", "content": "second"},
    {"kind": "read_evidence", "id": "harness-boundary"},
]


def test_a_fresh_view_draws_every_panel_once_with_the_run_as_it_is(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    assert set(view.last_changed) == set(view.panels)
    assert all(p.renders == 1 for p in view.panels.values())
    assert "data-state='CREATED' style='background:#1565c0;color:white" in view.state.html.value
    assert "read_evidence" in view.pending.html.value  # the pending proposal is shown before it runs
    assert run.step_no == 0  # ...and showing it did not execute it
    assert repr(view) == "LabView(conforming_report: CREATED after step 0)"
    assert view._repr_mimebundle_()["text/plain"] == repr(view)


def test_step_button_takes_one_decision_and_redraws_only_what_changed(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.step_button.click()
    assert run.step_no == 1 and run.state is RunState.RUNNING
    assert "hl-current-state'>RUNNING<" in view.state.html.value
    assert {"state", "budget", "trace", "pending", "context"} <= set(view.last_changed)
    assert "verdicts" not in view.last_changed and "faults" not in view.last_changed
    assert view.verdicts.renders == 1
    assert view.budget.labels["decisions"].value == "1 / 8"
    assert view.refresh() == []  # nothing changed, nothing redrawn


def test_run_to_gate_stops_where_the_harness_intervened(make_run):
    run = make_run(scenario="missing_section_then_fixed")
    view = LabView(run)
    view.gate_button.click()
    assert run.step_no == 4  # read, read, write ran plainly; the finish at step 4 was validated
    assert run.records[-1].decision.verdict == "validate"
    assert "structural check <b class='hl-verdict'>rejected</b>" in view.verdicts.html.value
    assert "section Limitations / 局限 is missing" in view.verdicts.html.value
    from harness_lab.widgets import check_rows

    rows = check_rows(run.records[-1].verdict)
    assert [r[1] for r in rows] == ["pass", "pass", "FAIL", "pass", "pass", "pass", "pass"]
    # the rejection reason reaches the next context view, and the panel shows it
    assert "finish rejected" in view.context.html.value and "anomaly" in view.context.html.value


def test_a_missing_report_fails_its_check_and_leaves_the_rest_unchecked(make_run):
    run = make_run(scenario="no_report_claims_done")
    view = LabView(run)
    view.run_to_gate()
    from harness_lab.widgets import check_rows

    rows = check_rows(run.records[-1].verdict)
    assert rows[0][1] == "FAIL" and {r[1] for r in rows[1:]} == {"not checked"}
    assert "not checked" in view.verdicts.html.value


def test_run_to_end_shows_the_receipt_and_disables_the_controls(make_run):
    run = make_run(scenario="missing_section_then_fixed")
    view = LabView(run)
    view.end_button.click()
    assert run.state is RunState.REVIEW_READY
    html = view.verdicts.html.value
    assert run.receipt is not None and run.receipt.artifact_sha256 in html
    assert run.receipt.contract_version in html
    for sha in run.receipt.evidence_sha256.values():
        assert sha in html
    assert "checks_passed" in view.state.html.value
    assert "VALIDATING &rarr; RUNNING &rarr; VALIDATING &rarr; REVIEW_READY" in view.state.html.value
    assert view.step_button.disabled and view.end_button.disabled and view.gate_button.disabled
    assert "REVIEW_READY" in view.status.value


def test_approve_button_executes_exactly_the_parked_action(make_run):
    run = make_run()
    view = LabView(run)
    assert view.pending.approve_button.disabled
    view.gate_button.click()
    assert run.state is RunState.WAITING_FOR_HUMAN
    assert not view.pending.approve_button.disabled and view.step_button.disabled
    assert "waiting for a human: push needs approval" in view.pending.html.value
    assert run.executor.effects.sent == {}  # no side effect before approval
    view.pending.approve_button.click()
    assert run.state is RunState.RUNNING
    assert [a.kind for a in run.executor.effects.sent.values()] == ["push"]
    assert "human_decided" in view.trace.html.value and "approved by human" in view.trace.html.value
    assert view.pending.approve_button.disabled


def test_reject_button_stops_safely_with_the_typed_reason(make_run):
    run = make_run()
    view = LabView(run)
    view.run_to_gate()
    view.pending.reject_button.click()  # no reason typed: refused, nothing happens to the run
    assert run.state is RunState.WAITING_FOR_HUMAN and "needs a reason" in view.status.value
    view.pending.reason.value = "not on a Friday"
    view.pending.reject_button.click()
    assert run.state is RunState.BLOCKED and run.executor.effects.sent == {}
    assert run.stop_reason is not None and "not on a Friday" in run.stop_reason.message
    assert "not on a Friday" in view.state.html.value


def test_a_click_on_misuse_reports_in_the_status_line_while_the_call_raises(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.pending.approve_button.click()
    assert "nothing waits for approval" in view.status.value
    with pytest.raises(RunStateError):
        view.approve()


def test_rollback_button_restores_files_run_state_and_context(make_run):
    run = make_run(OVERWRITE_THEN_READ)
    view = LabView(run)
    assert "no snapshots yet" in view.snapshots.html.value and view.snapshots.rollback_button.disabled
    view.step()
    view.step()  # the overwrite takes an automatic snapshot first
    assert "snapshots" in view.last_changed
    (snap,) = run.sandbox.snapshots()
    assert snap.trigger is not None and snap.trigger.startswith("before write_file a.txt")
    assert snap.id in view.snapshots.html.value and view.snapshots.picker.value == snap.id
    view.step()
    assert (run.workspace / "a.txt").read_text() == "second"
    view.snapshots.rollback_button.click()
    assert (run.workspace / "a.txt").read_text() == "first"
    assert "restored" in view.trace.html.value and "(restored)" in view.state.html.value
    assert not any("harness-boundary" in i.source for i in run.context.view().items)


def test_snapshot_rows_show_the_diff_against_the_previous_snapshot(make_run):
    run = make_run([
        {"kind": "write_file", "path": "a.txt", "content": "1"},
        {"kind": "write_file", "path": "a.txt", "content": "2"},
        {"kind": "read_evidence", "id": "harness-boundary"},  # varied, so convergence detection stays quiet
        {"kind": "write_file", "path": "b.txt", "content": "3"},
        {"kind": "write_file", "path": "a.txt", "content": "4"},
    ])
    view = LabView(run)
    view.run_to_end(max_steps=5)
    first, second = run.sandbox.snapshots()
    assert "~a.txt" in view.snapshots.diff(run, first.id, second.id)
    assert "+b.txt" in view.snapshots.diff(run, first.id, second.id)
    assert "+b.txt" in view.snapshots.html.value


def test_fault_picker_injects_the_picked_fault_and_shows_the_harness_answer(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    assert "tool_timeout" in view.faults.names and len(view.faults.names) >= 12
    view.faults.picker.value = "tool_timeout"
    assert view.faults.doc.value != "<i></i>"  # the picked fault's one-line documentation
    view.faults.inject_button.click()
    assert "armed from here: tool_timeout" in view.faults.html.value
    assert any(e.kind == "note" and e.topic == "fault_armed" for e in run.events)
    rec = view.step()
    assert rec.tool_result is not None and rec.tool_result.status == "timeout"
    (fired,) = run.faults
    assert fired.fault == "tool_timeout" and not fired.success_state
    assert fired.answer in view.faults.html.value.replace("&#x27;", "'")
    view.faults.picker.value = None
    view.faults.inject_button.click()  # nothing picked: the status line says so, the run is unchanged
    assert "unknown fault" in view.status.value and len(run.faults) == 1


def test_plot_panel_draws_a_png_of_budget_use(make_run):
    from harness_lab.widgets import budget_series

    run = make_run(scenario="endless_tool_calls")
    view = LabView(run)
    view.run_to_end()
    assert view.plot is not None and view.plot.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    series = budget_series(run)
    assert series["step"] == [float(r.step) for r in run.records]
    assert series["tool calls"][-1] == run.usage.tool_calls / run.contract.budget.max_tool_calls


def test_a_long_run_keeps_every_panel_bounded(long_run):
    view = LabView(long_run, plot=False)  # the plot's cost is measured in bench, not here
    for _ in range(200):
        view.step()
    assert long_run.step_no == 200
    assert view.trace.html.value.count("<tr>") == 1 + 30  # header + the tail only
    assert len(re.findall("<tr>", view.snapshots.html.value)) <= 1 + 40
    assert "RUNNING" in view.state.html.value and view.state.html.value.count("&rarr;") == 1
    # panels that did not change were not redrawn on each step; the state panel names the current step
    assert view.verdicts.renders == 1 and view.faults.renders == 1 and view.state.renders == 201
    assert "at step 200;" in view.state.html.value


def test_fork_button_opens_a_new_run_from_the_picked_snapshot_and_leaves_this_one_alone(make_run):
    run = make_run(OVERWRITE_THEN_READ)
    view = LabView(run)
    view.run_to_end(max_steps=3)
    (snap,) = run.sandbox.snapshots()
    assert not view.snapshots.fork_button.disabled
    view.snapshots.fork_button.click()
    (child,) = view.forks
    assert child.run is not run and child.run.run_id != run.run_id
    assert child.run.workspace != run.workspace
    assert (child.run.workspace / "a.txt").read_text() == "first"
    assert (run.workspace / "a.txt").read_text() == "second" and run.step_no == 3
    assert child.run.state.value == snap.run_state["state"]
    child.step()  # the fork goes its own way; the original is untouched
    assert run.step_no == 3 and len(run.sandbox.snapshots()) == 1
