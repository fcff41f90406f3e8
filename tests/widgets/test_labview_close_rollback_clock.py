"""LabView.close() lets a run go; the verdict panel after a rollback; the wall clock while a gate waits."""

from __future__ import annotations

import gc
import re
import weakref

from harness_lab.widgets import LabView
from ipywidgets.widgets import widget as ipw

from harness_lab import FakeClock, Run
from harness_lab.paths import data_dir


def _text(html: str) -> str:
    return " ".join(re.sub("<[^>]+>", " ", html).split())


def test_close_releases_the_view_so_the_run_it_was_given_is_collected_with_its_folders(own_tmp):
    open_widgets = len(ipw._instances)
    view = LabView(Run.from_scenario("conforming_report", clock=FakeClock()))  # the README's idiom
    view.step()
    view.run.sandbox.snapshot("before close")
    ref = weakref.ref(view.run)
    assert len(list(own_tmp.iterdir())) == 2  # its temporary workspace and snapshot folder
    view.close()
    assert view.widget.comm is None and view.step_button.comm is None  # out of ipywidgets' registry
    assert len(ipw._instances) == open_widgets
    del view
    gc.collect()
    assert ref() is None
    assert list(own_tmp.iterdir()) == []


def test_close_leaves_the_run_it_was_given_open_and_closes_the_forks_it_made(own_tmp):
    run = Run.from_scenario("conforming_report", clock=FakeClock())
    view = LabView(run, plot=False)
    view.step()
    snap = run.sandbox.snapshot("fork point")
    made = set(own_tmp.iterdir())
    child = view.fork(snap.id)
    fork_dirs = set(own_tmp.iterdir()) - made
    assert fork_dirs and all(d.exists() for d in fork_dirs)
    view.close_button.click()  # the button is the call
    assert child.widget.comm is None and view.forks == []
    assert not any(d.exists() for d in fork_dirs)  # the view made the fork's run: it went with the view
    assert run.step().step == 2  # the caller's run goes on, its folders kept
    assert all(d.exists() for d in made)


def test_after_a_rollback_the_verdict_panel_does_not_show_the_rolled_back_acceptance(make_run):
    report = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
    run = make_run([{"kind": "read_evidence", "id": "harness-boundary"},
                    {"kind": "read_evidence", "id": "acceptance-snapshot"},
                    {"kind": "write_report", "text": report}, {"kind": "finish"}], max_decisions=20, max_tool_calls=20)
    view = LabView(run, plot=False)
    start = run.sandbox.snapshot("start")
    view.run_to_end()
    assert run.receipt is not None and "step 4: structural check accepted" in _text(view.verdicts.html.value)
    view.rollback(start.id)
    assert run.receipt is None
    shown = _text(view.verdicts.html.value)
    assert "accepted" not in shown.replace("was accepted", "") and "receipt" not in shown.replace("its receipt", "")
    assert f"rolled back to snapshot {start.id} after step 4 (run CREATED): no artifact validated since" in shown
    view.run_to_end()  # validated again: the new verdict and receipt are what is true
    shown = _text(view.verdicts.html.value)
    assert "step 8: structural check accepted" in shown and "rolled back" not in shown


def test_the_wall_clock_gauge_moves_while_a_human_gate_waits(make_run):
    run = make_run(wall_clock_seconds=100)  # reads, then a gated push
    view = LabView(run, plot=False)
    view.run_to_gate()
    assert run.waiting is not None
    before = view.budget.labels["wall clock s"].value
    run.clock.advance(42.0)
    view.refresh()  # any call on the view redraws
    assert view.budget.labels["wall clock s"].value != before
    assert view.budget.labels["wall clock s"].value == "42 / 100"
