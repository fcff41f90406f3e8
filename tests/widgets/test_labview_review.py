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


def _flaky_run(make_run, fail_on: set[int]):
    from harness_lab import EvidenceCatalogue, FakeClock, FunctionProposer, Run, load_contract
    from harness_lab.paths import data_dir

    calls = []

    def propose(view: object) -> dict[str, str]:
        calls.append(1)
        if len(calls) in fail_on:
            raise RuntimeError("the model server is down")
        return {"kind": "read_evidence", "id": ("harness-boundary", "budget-gates", "acceptance-snapshot")[len(calls) % 3]}

    probe = make_run(scenario="conforming_report")  # only for a fresh workspace path under tmp_path
    return Run(contract=load_contract(data_dir() / "contracts" / "report_task.yaml"),
               proposer=FunctionProposer(propose), evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"),
               workspace=probe.workspace.parent / "flaky", clock=FakeClock())


def test_a_proposer_that_raises_is_shown_in_the_dashboard_not_lost(make_run):
    run = _flaky_run(make_run, fail_on={2, 3})
    view = LabView(run)
    view.step_button.click()  # step 1 runs; asking for the next proposal (to show it) fails
    assert run.step_no == 1
    assert "RUNNING after step 1" in view.status.value  # the status line is not left at step 0
    assert "RuntimeError: the model server is down" in view.pending.html.value
    # The step asks the proposer itself, which raises again: the run stops safely (BLOCKED, with a
    # record), and the dashboard shows why, not a lost exception.
    view.step_button.click()
    assert run.state is RunState.BLOCKED and run.stop_reason is not None and run.stop_reason.code == "proposer_error"
    assert "BLOCKED (proposer_error) after step 2" in view.status.value
    assert "the model server is down" in view.state.html.value
    assert view.step_button.disabled and run.records[-1].step == 2


OVERWRITE_THEN_READ = [
    {"kind": "write_file", "path": "a.txt", "content": "first"},
    {"kind": "write_file", "path": "a.txt", "content": "second"},
    {"kind": "read_evidence", "id": "harness-boundary"},
]


def _descendants(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _descendants(child)


def test_the_fork_button_shows_the_new_run_in_the_dashboard(make_run):
    run = make_run(OVERWRITE_THEN_READ)
    view = LabView(run)
    view.run_to_end(max_steps=3)
    (snap,) = run.sandbox.snapshots()
    view.snapshots.fork_button.click()
    (child,) = view.forks
    assert any(w is child.widget for w in _descendants(view.widget))  # clicked, and there it is
    assert child.run.run_id in view.status.value and snap.id in view.status.value


def test_fork_without_a_snapshot_is_a_clear_error_shown_in_the_dashboard(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    with pytest.raises(ValueError, match="no snapshot to fork from"):
        view.fork()  # was a TypeError from deep inside the runtime
    assert "no snapshot to fork from" in view.status.value
    with pytest.raises(RunStateError):
        view.fork("snap-9999")
    assert "&#x27;snap-9999&#x27; is neither a checkpoint" in view.status.value  # a failed Python call shows like any other
    assert view.forks == [] and view.session.entries == []


def test_panels_keep_what_they_showed_when_a_stored_run_trims_its_records_and_events(long_run, tmp_path):
    from harness_lab.persistence.checkpoint import Checkpointer
    from harness_lab.store import SQLiteStore

    long_run.checkpoints = Checkpointer(SQLiteStore(tmp_path / "runs.sqlite"), long_run, fresh=True)
    long_run.checkpoints.window = 4  # older records and events live in the store (default 64)
    view = LabView(long_run, plot=False)
    view.pending.editor.value = '{"kind": "finish"}'
    view.edit_pending()
    view.step()  # a rejected finish (no report yet): the verdict panel shows it
    assert "structural check <b class='hl-verdict'>rejected</b>" in view.verdicts.html.value
    for _ in range(40):
        view.step()
    assert len(long_run.records) < 41 and len(long_run.events) < 80  # trimmed by the run
    assert "step 1: structural check <b class='hl-verdict'>rejected</b>" in view.verdicts.html.value
    assert "CREATED &rarr; RUNNING &rarr; VALIDATING &rarr; RUNNING</div>" in view.state.html.value
    assert view.trace.html.value.startswith(f"<div class='hl-trace'><div>{long_run.events[-1].seq} events;")
    view.run_to_end(max_steps=30)  # many steps between two redraws
    assert "step 1: structural check" in view.verdicts.html.value
    assert "CREATED &rarr; RUNNING &rarr; VALIDATING &rarr; RUNNING</div>" in view.state.html.value


def test_the_budget_plot_shows_every_step_of_a_resumed_or_trimmed_run(tmp_path):
    from harness_lab import FakeClock, Run
    from harness_lab.errors import SimulatedCrash
    from harness_lab.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.sqlite")
    crashed = Run.from_scenario("missing_section_then_fixed", workspace=tmp_path / "ws", clock=FakeClock(),
                                run_id="R1", store=store)
    crashed.inject("process_crash", at_step=3)
    with pytest.raises(SimulatedCrash):
        crashed.run()
    resumed = Run.resume(store, "R1", clock=FakeClock())
    resumed.checkpoints.window = 1  # keep almost nothing in memory
    view = LabView(resumed)
    while not resumed.state.terminal:
        view.step()
    assert len(resumed.records) < 4 and view.plot is not None
    steps = [float(s) for s in range(3, resumed.step_no + 1)]  # the resumed run's steps: 3 (redone) to 6
    for line in view.plot._lines.values():
        assert list(line.get_xdata()) == steps  # none dropped with the records the run trimmed
    left, right = view.plot._ax.get_xlim()
    assert left <= steps[0] and right >= steps[-1]  # ...and inside the axes (was 0 to 4.5)


def test_run_to_end_shows_progress_while_it_works(make_run):
    from harness_lab import EvidenceCatalogue, FakeClock, FunctionProposer, Run, load_contract
    from harness_lab.paths import data_dir

    seen: list[tuple[str, bool]] = []
    ids = ("harness-boundary", "budget-gates", "acceptance-snapshot", "semantic-review")

    def propose(_view: object) -> dict[str, str]:
        seen.append((view.status.value, view.step_button.disabled))  # what the dashboard shows meanwhile
        return {"kind": "read_evidence", "id": ids[len(seen) % 4]}

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=30, max_tool_calls=30, max_tokens=None)
    probe = make_run(scenario="conforming_report")
    run = Run(contract=contract, proposer=FunctionProposer(propose),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=probe.workspace.parent / "p",
              clock=FakeClock())
    view = LabView(run, plot=False)
    seen.clear()
    view.end_button.click()
    assert run.state is RunState.EXHAUSTED
    during = seen[5:-1]  # asked before step 7 ... (the last ask is the redraw after the end)
    assert during and all(disabled for _, disabled in during)  # no second click queued meanwhile
    assert any("running to the end: step 10 done" in status for status, _ in during)
    assert view.budget.labels["decisions"].value == "30 / 30" and "running" not in view.status.value


def test_a_python_call_refused_before_it_reaches_the_run_is_shown_too(make_run):
    run = make_run()
    view = LabView(run)
    view.pending.editor.value = "{not json"
    with pytest.raises(ValueError, match="not JSON"):
        view.edit_pending()
    assert "the edited proposal is not JSON" in view.status.value
    view.run_to_gate()
    with pytest.raises(ValueError, match="needs a reason"):
        view.reject("  ")
    assert "a rejection needs a reason" in view.status.value
    assert [e.action for e in view.session.entries] == ["run_to_gate"]  # refused calls are not replayed


def test_the_budget_gauges_show_the_budget_the_gates_enforce(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.inject("budget_squeeze")  # the scheduler cuts the tool-call budget to what is used: 0
    view.step()
    assert run.state is RunState.EXHAUSTED and run.stop_reason is not None
    assert run.stop_reason.code == "tool_budget"
    # was "0 / 5" (the contract's limit) beside a run stopped for its tool-call budget
    assert view.budget.labels["tool calls"].value == "0 / 0"
    assert view.budget.bars["tool calls"].bar_style == "danger"
    assert view.budget.labels["decisions"].value == "1 / 8"
    assert view.plot is not None and view.plot.image.value[:4] == b"\x89PNG"


def test_after_a_simulated_crash_the_dashboard_says_so_and_offers_no_step(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.inject("process_crash")
    view.step_button.click()
    assert run.crashed is not None and "simulated crash" in view.status.value
    view.refresh()  # a later redraw must not paint the crashed run as one that steps on
    assert "crashed" in view.status.value and "resume" in view.status.value
    assert view.step_button.disabled and view.gate_button.disabled and view.end_button.disabled
    assert "crashed" in view.pending.html.value and "executes if within budget" not in view.pending.html.value


class _InterruptedOutbox:
    def apply(self, action, idempotency_key):
        raise KeyboardInterrupt  # Ctrl-C while the push goes out


def test_a_crash_says_what_it_was_a_simulated_fault_or_an_interrupt(make_run, tmp_path):
    # Before: the pending panel called every crash "(simulated)", a real Ctrl-C too, and the status
    # line did not say which it was.
    from harness_lab import AutoApprove, EvidenceCatalogue, Run, ScriptedProposer, load_contract
    from harness_lab.paths import data_dir

    simulated = make_run(scenario="conforming_report")
    view = LabView(simulated)
    view.inject("process_crash")
    view.step_button.click()
    view.refresh()
    assert simulated.crash_cause == "simulated"
    assert "(simulated): resume" in view.status.value and "crashed (simulated)" in view.pending.html.value

    run = Run(contract=load_contract(data_dir() / "contracts" / "report_task.yaml"),
              proposer=ScriptedProposer([{"kind": "push", "remote": "origin", "branch": "main"}]),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws-ctrl-c",
              approver=AutoApprove(), effects=_InterruptedOutbox())
    view = LabView(run)
    assert run.crash_cause is None
    with pytest.raises(KeyboardInterrupt):
        run.step()
    view.refresh()
    assert run.crash_cause == "interrupted: KeyboardInterrupt"
    assert "crashed at after_effect (interrupted: KeyboardInterrupt): resume" in view.status.value
    html = view.pending.html.value
    assert "crashed (interrupted: KeyboardInterrupt)" in html and "simulated" not in html


def test_after_a_simulated_crash_no_fault_can_be_armed_from_the_picker(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.inject("process_crash")
    view.step_button.click()
    assert run.crashed is not None and view.faults.inject_button.disabled


def test_a_finish_that_passed_the_checks_but_was_not_accepted_says_why(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.run_to_gate(max_steps=3)  # read, read, write the report: the finish is next
    assert run.pending is not None and run.pending.describe().startswith("finish")
    view.inject("artifact_changed_after_validation")
    view.step()
    assert run.state is RunState.RUNNING and run.receipt is None
    html = view.verdicts.html.value
    assert "structural check <b class='hl-verdict'>accepted</b>" in html  # the checks did pass...
    assert "finish not accepted" in html and "artifact changed after it was validated" in html  # ...and then?
    view.step()
    assert run.state is RunState.REVIEW_READY and "finish not accepted" not in view.verdicts.html.value


def test_a_fault_object_injected_from_python_is_listed_by_its_name(make_run):
    from harness_lab.faults import fault_catalogue

    view = LabView(make_run(scenario="conforming_report"))
    view.inject(fault_catalogue()["tool_timeout"].model_copy())
    assert "armed from here: tool_timeout</div>" in view.faults.html.value  # was the model's field dump
