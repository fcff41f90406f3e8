"""The dashboard as a debugger, without a browser: each timeline button is one public LabView call
(select_step, show_file, fork_here, snapshot_now, approve_as_edited, run_to), checked on the run and
on what the panels show."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness_lab.widgets import LabView, Session
from harness_lab.widgets._panel import esc

from harness_lab import FakeClock, InMemoryStore, Run, RunState, RunStateError

LIMITATIONS = "\n\n## Limitations\nOnly two evidence notes were read; the comparison stays narrow.\n"


@pytest.fixture
def exhausted(tmp_path: Path) -> LabView:
    """missing_limitations run to its end (EXHAUSTED), with a store: the run a new user debugs."""
    run = Run.from_scenario("missing_limitations", workspace=tmp_path / "ws", clock=FakeClock(), store=InMemoryStore())
    view = LabView(run)
    assert view.run_to("end") is RunState.EXHAUSTED
    return view


def test_selecting_a_step_shows_what_the_proposer_saw_and_did_there(exhausted):
    view, run = exhausted, exhausted.run
    shown = view.select_step(3)
    assert shown.step == 3 and view.timeline.selected == 3
    assert view.timeline.slider.value == 3 and view.timeline.picker.value == 3
    assert "<b>step 3</b>: 3 · write_report → execute · RUNNING" in view.timeline.header.value
    # the context the proposer saw before step 3: both evidence reads, whole
    assert shown.context is not None
    for item in shown.context.items:
        assert esc(item.text) in view.timeline.context.value
    assert "<b>proposal</b>: write_report" in view.timeline.details.value
    assert "<b>decision</b>: execute" in view.timeline.details.value
    assert "added <b>report.md</b>" in view.timeline.files.value
    # the file view: report.md as it was after step 3, in full
    assert view.timeline.file == "report.md"
    assert esc(shown.file_text("report.md")) in view.timeline.file_view.value
    assert run.state is RunState.EXHAUSTED and run.step_no == 9  # looking changed nothing


def test_the_newest_step_is_shown_until_one_is_picked_and_a_verdict_step_shows_its_checks(exhausted):
    view = exhausted
    assert view.timeline.selected is None and view.timeline.view.step == 9
    assert [p[1] for p in view.timeline.picker.options] == list(range(10))
    view.select_step(4)  # the first finish: validated and rejected
    assert "<b>verdict</b>" in view.timeline.details.value and "FAIL" in view.timeline.details.value
    assert "Limitations" in view.timeline.details.value


def test_a_step_out_of_range_is_one_line_and_nothing_changes(exhausted):
    view = exhausted
    view.select_step(3)
    with pytest.raises(RunStateError) as err:
        view.select_step(10)
    assert "\n" not in str(err.value) and "10" in str(err.value)
    assert view.timeline.selected == 3 and "10" in view.status.value
    with pytest.raises(ValueError, match="a step number"):
        view.select_step("3")  # type: ignore[arg-type]


def test_show_file_shows_a_file_at_the_selected_step_and_an_absent_one_in_one_line(exhausted):
    view = exhausted
    view.select_step(3)
    assert view.show_file("report.md").startswith("# Report: two harness designs")
    with pytest.raises(RunStateError) as err:
        view.show_file("nope.md")
    assert "nope.md" in str(err.value) and "step 3" in str(err.value)
    assert view.timeline.file == "report.md"
    view.select_step(2)  # before the report was written: no file to show
    assert "no files in the workspace at step 2" in view.timeline.file_view.value


def test_fork_here_with_a_fresh_budget_redoes_the_step_and_an_edited_report_passes(exhausted):
    view, run = exhausted, exhausted.run
    view.select_step(3)
    child = view.fork_here(budget="fresh")
    assert child in view.forks and child.run.run_id != run.run_id
    assert child.run.step_no == 2 and child.run.usage.decisions == 0 and child.run.usage.tool_calls == 0
    assert run.state is RunState.EXHAUSTED and run.step_no == 9  # the source untouched
    # the fork's pending call is step 3's write_report, its text in a text box as text
    assert set(child.pending.fields) == {"text"} and child.pending.edited_button.description == "Apply edit"
    box = child.pending.fields["text"]
    assert box.value == view.timeline.view.proposal.raw["text"]
    box.value += LIMITATIONS
    child.approve_as_edited()
    assert child.run.pending is not None and child.run.pending.raw["text"].endswith(LIMITATIONS)
    assert child.run_to("end") is RunState.REVIEW_READY
    assert child.run.workspace.joinpath("report.md").read_text().endswith(LIMITATIONS)
    assert view.session.entries[-1].action == "fork_here" and view.session.entries[-1].args == {"budget": "fresh", "step": 3}


def test_fork_here_keeping_the_budget_starts_with_the_spend_the_step_started_with(exhausted):
    view = exhausted
    child = view.fork_here(budget="keep", step=3)
    assert child.run.usage.decisions == 2 and child.run.usage.tool_calls == 2  # as after step 2, not 8
    # its budget plot and its timeline show the parent's history up to the fork point
    assert child.plot is not None and child.plot.parent["step"] == [1.0, 2.0]
    assert [p[0] for p in child.timeline.picker.options][:2] == [
        "0 · registered · CREATED · from missing_limitations",
        "1 · read_evidence → execute · RUNNING · from missing_limitations"]
    assert "opacity:0.45" in child.timeline.strip.value


def test_approve_as_edited_at_a_gate_executes_the_edited_call(make_run):
    run = make_run()  # read, push (gated), read
    view = LabView(run)
    view.run_to_gate()
    assert run.waiting is not None and set(view.pending.fields) == {"remote", "branch"}
    assert view.pending.edited_button.description == "Approve as edited"
    view.pending.fields["branch"].value = "review"
    view.pending.edited_button.click()
    decided = [e for e in run.events if e.kind == "human_decided"][-1]
    assert decided.approved and decided.edited
    assert run.records[-1].proposal.raw["branch"] == "review"


def test_approve_as_edited_with_nothing_edited_says_so_and_runs_nothing(make_run):
    run = make_run([{"kind": "write_file", "path": "a.txt", "content": "x"}])
    view = LabView(run)
    with pytest.raises(ValueError, match="nothing edited"):
        view.approve_as_edited()
    assert run.step_no == 0 and "nothing edited" in view.status.value


def test_snapshot_now_takes_a_snapshot_the_snapshot_panel_lists(make_run):
    run = make_run([{"kind": "write_file", "path": "a.txt", "content": "x"}])
    view = LabView(run)
    view.step()
    assert run.sandbox.snapshots() == []
    view.timeline.snapshot_button.click()
    (snap,) = run.sandbox.snapshots()
    assert snap.label == "manual" and snap.id in view.snapshots.html.value
    assert view.session.entries[-1].action == "snapshot_now"


def test_a_run_without_a_store_says_it_has_no_timeline(make_run):
    view = LabView(make_run())
    assert "no timeline:" in view.timeline.strip.value and "has no store" in view.timeline.strip.value
    assert view.timeline.fork_fresh_button.disabled
    view.step()
    assert "timeline" not in view.last_changed and view.timeline.renders == 1  # nothing to redraw


def test_run_to_end_and_an_unknown_breakpoint(make_run):
    run = make_run(scenario="missing_section_then_fixed")
    view = LabView(run)
    with pytest.raises(ValueError, match="unknown breakpoint 'nowhere'"):
        view.run_to("nowhere")
    assert run.step_no == 0
    view.until.value = "end"
    view.run_to_button.click()
    assert run.state is RunState.REVIEW_READY


def test_a_session_of_debugger_calls_saves_and_loads(exhausted):
    view = exhausted
    child = view.fork_here(budget="fresh", step=3)
    child.approve_as_edited(text="# Report\n")
    child.snapshot_now("mine")
    for session in (view.session, child.session):
        assert Session.from_json(session.to_json()).entries == session.entries


def test_compare_shows_a_fork_beside_its_source_from_the_fork_point(exhausted):
    view = exhausted
    child = view.fork_here(budget="fresh", step=3)
    child.approve_as_edited(text=view.run.at(3).proposal.raw["text"] + LIMITATIONS)
    child.run_to("end")
    child.compare_button.click()
    cmp = child.comparison.comparison
    assert cmp is not None and cmp.a == view.run.run_id and cmp.b == child.run.run_id
    assert cmp.first_difference == 3 and "decision" in cmp.differs
    html = child.comparison.html.value
    assert f"{view.run.run_id} at step 3" in html and f"{child.run.run_id} at step 3" in html
    assert "modified <b>report.md</b>" in html and esc("+## Limitations") in html
    assert "first differ at step 3" in child.status.value
    # from the source's side: its newest fork
    assert view.compare().first_difference == 3


def test_compare_with_nothing_to_compare_says_so(exhausted):
    with pytest.raises(ValueError, match="nothing to compare with"):
        exhausted.compare()
    assert "nothing to compare with" in exhausted.status.value


def test_run_to_a_tool_stops_with_that_call_pending_and_run_to_a_step_after_it(tmp_path):
    run = Run.from_scenario("missing_limitations", workspace=tmp_path / "ws", clock=FakeClock(), store=InMemoryStore())
    view = LabView(run)
    view.until.value = "tool: write_report"
    view.run_to_button.click()
    assert run.step_no == 2 and run.pending is not None and run.pending.action.kind == "write_report"
    assert "write_report" in view.pending.html.value and "text" in view.pending.fields
    view.until.value, view.until_step.value = "step", 4
    view.run_to_button.click()
    assert run.step_no == 4
    assert [e.action for e in view.session.entries] == ["run_to", "run_to"]
    assert view.session.entries[0].args == {"until": "tool: write_report", "max_steps": None}


def test_a_step_adds_its_point_without_reading_the_whole_history(tmp_path, monkeypatch):
    run = Run.from_scenario("missing_limitations", workspace=tmp_path / "ws", clock=FakeClock(), store=InMemoryStore())
    reads = []
    whole = Run.history

    def counted(self: Run) -> list:
        reads.append(self.step_no)
        return whole.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(Run, "history", property(counted))
    view = LabView(run)
    for _ in range(3):
        view.step()
    assert reads == [0]  # once for the first draw; each step then adds its own point
    assert [p.step for p in view.timeline.points] == [0, 1, 2, 3]
    assert view.timeline.points == whole.fget(run)  # type: ignore[attr-defined]
    snap = view.snapshot_now()
    view.step()
    view.rollback(snap.id)  # a restore: the history is read whole again at the next step
    view.step()
    assert reads == [0, 5] and view.timeline.points == whole.fget(run)  # type: ignore[attr-defined]


def test_a_run_reopened_from_its_store_is_debugged_the_same_way(tmp_path):
    from harness_lab import SQLiteStore

    db = tmp_path / "runs.db"
    live = Run.from_scenario("missing_limitations", workspace=tmp_path / "ws", clock=FakeClock(), store=SQLiteStore(db))
    live.run()
    view = LabView(Run.open(db, "missing_limitations"))
    assert view.step_button.disabled and view.end_button.disabled  # read-only: nothing to step
    assert view.select_step(3).file_text("report.md") == live.at(3).file_text("report.md")
    assert view.timeline.view.point == live.at(3).point
    child = view.fork_here(budget="fresh")
    assert child.run.pending is not None and child.run.pending.action.kind == "write_report"
    with pytest.raises(RunStateError, match="read-only"):
        view.step()
    assert "read-only" in view.status.value



def test_a_fork_of_a_long_stored_run_plots_its_parent_from_the_store_not_the_trimmed_records(tmp_path):
    from harness_lab import EvidenceCatalogue, FunctionProposer, load_contract
    from harness_lab.paths import data_dir

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=200, max_tool_calls=200, max_tokens=None)
    count = iter(range(1000))  # a different note each step: no repeated call for the loop check to stop
    run = Run(contract=contract, proposer=FunctionProposer(
        lambda view: {"kind": "write_file", "path": "n.txt", "content": f"note {next(count)}"}),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws",
              clock=FakeClock(), store=InMemoryStore())
    run.run(max_steps=150)
    assert run.step_no == 150 and run.records[0].step > 10  # a stored run keeps only its last records in memory
    view = LabView(run)
    child = view.fork_here(budget="keep", step=11)
    assert child.plot is not None and child.plot.parent["step"] == [float(n) for n in range(1, 11)]
