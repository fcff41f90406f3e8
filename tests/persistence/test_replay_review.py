"""Replay of a saved trace as a user meets it: a run with a repair policy, a workspace changed from
outside, a fault injected. A divergence is the harness's, or says what else the saved run met."""

from __future__ import annotations

from pathlib import Path

from harness_lab import Run, RunState
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.repair import RepairPolicy
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint import Checkpointer
from harness_lab.persistence.replay import replay_run
from harness_lab.proposers.scripted import ScriptedProposer
from harness_lab.scenarios import load_scenario
from harness_lab.store import SQLiteStore


def test_a_run_with_a_repair_policy_replays_identically(tmp_path: Path) -> None:
    # The replay ran without the recorded policy: the escalation after repeated failed checks was
    # reported as a divergence ("saved BLOCKED != replayed RUNNING") though nothing had changed.
    store = SQLiteStore(tmp_path / "runs.sqlite")
    scenario = load_scenario("missing_limitations")
    run = Run(contract=load_contract(data_dir() / "contracts" / "report_task.yaml"),
              proposer=ScriptedProposer(scenario.actions, then=scenario.then),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws",
              repair=RepairPolicy(), run_id="R")
    run.checkpoints = Checkpointer(store, run, fresh=True)
    assert run.run() is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "escalated"
    result = replay_run(store, "R", workspace=tmp_path / "replay")
    try:
        assert result.identical, result.detail
        assert result.run.state is RunState.BLOCKED and result.run.repair is not None
    finally:
        result.run.close()
        run.close()
        store.close()


def test_a_divergence_after_an_outside_write_names_it(tmp_path: Path) -> None:
    # The detail read as if the harness had changed; the saved run had met an outside write at step 4.
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", store=store, run_id="W")
    run.run(max_steps=3)
    (run.workspace / "report.md").write_text("# edited by hand\n", encoding="utf-8")
    run.run()
    result = replay_run(store, "W", workspace=tmp_path / "replay")
    try:
        assert result.diverged_at == 4
        assert result.detail.endswith("(the saved run met what a replay does not re-create: "
                                      "step 4: the workspace changed outside the run)")
    finally:
        result.run.close()
        run.close()
        store.close()


def test_a_divergence_after_an_injected_fault_names_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws", store=store, run_id="T")
    run.inject("tool_timeout")
    run.run()
    result = replay_run(store, "T", workspace=tmp_path / "replay")
    try:
        assert result.diverged_at == 1
        assert "what a replay does not re-create: step 1: fault tool_timeout injected" in result.detail
    finally:
        result.run.close()
        run.close()
        store.close()
