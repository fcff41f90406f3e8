"""compare(a, b): the first step where two runs differ in context, decision or files, and the diff there."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.errors import RunStateError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.scenarios import load_scenario
from harness_lab.store import SQLiteStore, Store
from harness_lab.timeline import RunComparison, compare

LIMITATIONS = "\n\n## Limitations\nScripted test material only.\n"


def _run(store: Store, run_id: str, contract: str = "report_task", scenario: str = "missing_limitations") -> Run:
    script = load_scenario(scenario)
    return Run(contract=load_contract(data_dir() / "contracts" / f"{contract}.yaml"),
               proposer=ScriptedProposer(script.actions, then=script.then),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), run_id=run_id, store=store)


def _compared(tmp_path: Path, a_steps: int | None = None, **b: str) -> RunComparison:
    """Run A (missing_limitations, report_task) to its end or ``a_steps``, B as ``b`` says, and compare them."""
    store = SQLiteStore(tmp_path / "runs.sqlite")
    with _run(store, "A") as a, _run(store, "B", **b) as other:
        a.run(max_steps=a_steps)
        other.run()
        return compare(a, other)


def test_two_runs_of_the_same_script_agree_on_every_step(tmp_path: Path) -> None:
    result = _compared(tmp_path)
    assert isinstance(result, RunComparison)
    assert result.first_difference is None and result.start == 0 and result.compared == 10  # steps 0..9
    assert "agree on steps 0..9" in result.summary()


def test_a_fork_compared_with_its_source_starts_at_the_fork_point(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    with _run(store, "A") as a:
        a.run()
        fork = a.fork(at_step=3, budget="fresh")
        with fork:
            text = fork.at(3).file_text("report.md") + LIMITATIONS
            fork.edit_pending({"kind": "write_report", "text": text})
            fork.run()
            result = compare(a, fork)
            assert result.start == 3, "the steps before the fork point are the source's own"
            assert result.first_difference == 4 and result.differs == ("decision", "files")
            assert result.context_diff == "", "both saw the same context at step 4"
            said_a, said_b = result.decision_diff
            assert said_a is not None and said_a.startswith("validate: finish()")
            assert said_b is not None and said_b.startswith("execute: write_report(")
            (change,) = result.file_changes
            assert change.path == "report.md" and change.change == "modified"
            assert "+## Limitations" in change.diff and change.before == a.at(4).files["report.md"]
            back = compare(fork, a)
            assert back.first_difference == 4 and back.decision_diff == (said_b, said_a)
            assert "-## Limitations" in back.file_changes[0].diff


def test_a_run_and_its_fork_before_any_own_step_share_every_row(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    with _run(store, "A") as a:
        a.run()
        same = compare(a, a)
        assert same.first_difference is None and same.compared == 0 and "share every step" in same.summary()
        with a.fork(at_step=3) as fork:  # its own first row (step 3) decided nothing: files only, the same
            result = compare(a, fork)
            assert result.start == 3 and result.compared == 2
            assert result.first_difference == 4 and result.differs == ("length",), "only A has step 4"
            assert result.file_changes == [] and result.context_diff == "", "the fork's files stand as at step 3"


def test_the_same_scenario_under_two_contracts_differs_in_the_context_it_saw(tmp_path: Path) -> None:
    result = _compared(tmp_path, contract="report_task_tight_tokens")
    assert result.first_difference == 1 and result.differs == ("context",)
    assert "-Acceptance:" in result.context_diff and "Budget: 8 decisions, 5 tool calls." in result.context_diff
    assert "+Acceptance:" in result.context_diff and "Budget: 12 decisions" in result.context_diff
    assert result.decision_diff[0] == result.decision_diff[1], "the same call, differently seen"
    assert result.file_changes == []


def test_runs_of_one_id_in_two_stores_share_no_row(tmp_path: Path) -> None:
    one, two = SQLiteStore(tmp_path / "one.sqlite"), SQLiteStore(tmp_path / "two.sqlite")
    with _run(one, "A") as a, _run(two, "A", contract="report_task_tight_tokens") as b:
        a.run()
        b.run()
        result = compare(a, b)
        assert result.start == 0 and result.first_difference == 1 and result.differs == ("context",)


def test_runs_that_agree_until_one_stops_differ_at_the_step_only_one_has(tmp_path: Path) -> None:
    result = _compared(tmp_path, a_steps=5)
    assert result.first_difference == 6 and result.differs == ("length",)
    assert result.decision_diff[0] is None and (result.decision_diff[1] or "").startswith("validate: finish()")
    assert result.file_changes == [], "A's files stand as at its last step: the same report"


def test_different_reports_differ_in_the_call_and_the_files(tmp_path: Path) -> None:
    result = _compared(tmp_path, scenario="conforming_report")
    assert result.first_difference == 3 and result.differs == ("decision", "files")
    said_a, said_c = result.decision_diff
    assert said_a != said_c, "calls alike in their first 60 characters still read apart (their sha256)"
    assert [f.path for f in result.file_changes] == ["report.md"]


def test_reopened_runs_compare_as_the_live_ones_did(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    with _run(store, "A") as a, _run(store, "B", contract="report_task_tight_tokens") as b:
        a.run()
        b.run()
        live = compare(a, b)
    store.close()
    assert compare(Run.open(db, "A"), Run.open(db, "B")) == live


def test_a_run_without_a_store_is_one_line(tmp_path: Path) -> None:
    with Run.from_scenario("missing_limitations") as run:
        run.run()
        with pytest.raises(RunStateError, match="has no store") as caught:
            compare(run, run)
        assert "\n" not in str(caught.value)
