"""The four-group study: one budget, ground truth from the labels, verdicts kept apart."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from harness_lab.contract import ControlContract
from harness_lab.evidence import EvidenceCatalogue, EvidenceNote
from harness_lab.experiments import (
    GROUPS,
    METRIC_DEFINITIONS,
    REPORTS,
    SEED_SCENARIOS,
    StudyTask,
    render_study_table,
    run_scenario,
    run_study,
    run_study_task,
    study_tasks,
)
from harness_lab.scenarios import Scenario, load_scenario
from harness_lab.validation.semantic import EvidenceSupportReviewer, SemanticVerdict


def _task(group: str, scenario: Scenario, contract: ControlContract, evidence: EvidenceCatalogue,
          seed: int = 0, reviewer: Any = None) -> StudyTask:
    return StudyTask(group=GROUPS[group], scenario=scenario, seed=seed, noise=0.2, contract=contract,
                     evidence=evidence, reviewer=reviewer or EvidenceSupportReviewer(), family=REPORTS)


def _relabel(name: str, acceptable: tuple[int, ...]) -> Scenario:
    scenario = load_scenario(name)
    return scenario.model_copy(update={"labels": scenario.labels.model_copy(update={"acceptable_reports": acceptable})})


@pytest.mark.parametrize("name", SEED_SCENARIOS)
def test_seed_zero_reproduces_the_seed_table(name: str, contract: ControlContract, evidence: EvidenceCatalogue) -> None:
    scenario = load_scenario(name)
    base = run_study_task(_task("base", scenario, contract, evidence))
    unchecked = run_scenario(name, validation=False)
    assert (base.final_state, base.steps) == (unchecked.final_state, unchecked.final_step)
    assert base.delivered_acceptable == bool(unchecked.accepted_is_acceptable)
    # The structural group is the seed table's checked run up to its first rejection, which it does not
    # revise after: the run stops there (one more step, the halt, without a proposal).
    structural = run_study_task(_task("structural", scenario, contract, evidence))
    checked = run_scenario(name, validation=True)
    if checked.rejected_at_steps:
        assert (structural.final_state, structural.stop_reason) == ("BLOCKED", "rejected")
        assert structural.steps == checked.rejected_at_steps[0] + 1 and not structural.delivered
    else:
        assert (structural.final_state, structural.steps) == (checked.final_state, checked.final_step)
        assert structural.delivered_acceptable == bool(checked.accepted_is_acceptable)


def test_overclaiming_report_structural_pass_is_not_semantic_pass(contract: ControlContract,
                                                                  evidence: EvidenceCatalogue) -> None:
    scenario = load_scenario("overclaiming_conclusion")
    structural = run_study_task(_task("structural", scenario, contract, evidence))
    semantic = run_study_task(_task("semantic", scenario, contract, evidence))
    assert structural.delivered and structural.false_accept and structural.semantic == "not_run"
    assert semantic.structural == "passed" and semantic.semantic == "failed"  # two verdicts, kept apart
    assert not semantic.delivered and not semantic.false_accept and semantic.reviews == 1
    assert any("overclaim" in r for r in semantic.semantic_reasons)


def test_ground_truth_is_the_labels_not_the_validator(contract: ControlContract, evidence: EvidenceCatalogue) -> None:
    # The same conforming bytes, labelled unacceptable before the run: every group that delivers them
    # is charged a false accept, although the structural validator and the reviewer both passed them.
    relabelled = _relabel("conforming_report", ())
    for group in GROUPS:
        outcome = run_study_task(_task(group, relabelled, contract, evidence))
        assert outcome.delivered and outcome.false_accept and not outcome.attainable


def test_refusing_an_acceptable_report_is_a_false_reject(contract: ControlContract, evidence: EvidenceCatalogue) -> None:
    # cites_unread_evidence's report, labelled acceptable: the structural checks refuse it (a citation
    # was not read in this run), which the labels score as a false reject; base never refuses.
    relabelled = _relabel("cites_unread_evidence", (1,))
    structural = run_study_task(_task("structural", relabelled, contract, evidence))
    assert structural.false_reject and structural.rejections >= 1 and not structural.delivered
    base = run_study_task(_task("base", relabelled, contract, evidence))
    assert not base.false_reject and base.delivered_acceptable


def test_a_plugged_in_reviewer_decides_the_semantic_layer(contract: ControlContract, evidence: EvidenceCatalogue) -> None:
    class AlwaysNo:
        name = "always-no"

        def review(self, report: bytes, evidence: Mapping[str, EvidenceNote]) -> SemanticVerdict:
            return SemanticVerdict(reviewer=self.name, passed=False)

    outcome = run_study_task(_task("semantic", load_scenario("conforming_report"), contract, evidence,
                                   reviewer=AlwaysNo()))
    assert outcome.semantic == "failed" and not outcome.delivered and outcome.false_reject


def test_every_group_gets_the_same_budget(contract: ControlContract) -> None:
    tight = contract.with_budget(max_decisions=4, max_tool_calls=2)
    result = run_study(("base", "structural", "semantic"), ("conforming_report", "endless_tool_calls"), 3,
                       contract=tight, executor=_Serial(), progress=False)
    assert result.budget["max_decisions"] == 4 and result.budget["max_tool_calls"] == 2
    assert all(o.decisions <= 4 and o.tool_calls <= 2 for o in result.outcomes)
    assert {o.final_state for o in result.outcomes if o.scenario == "endless_tool_calls"} == {"EXHAUSTED"}


def test_repair_group_runs_the_repair_policy(contract: ControlContract, evidence: EvidenceCatalogue) -> None:
    # Without revision the first rejection ends the run; with it, the failures are retried, rolled
    # back, then escalated: BLOCKED, a person decides.
    scenario = load_scenario("missing_limitations")
    structural = run_study_task(_task("structural", scenario, contract, evidence))
    repair = run_study_task(_task("repair", scenario, contract, evidence))
    assert (structural.final_state, structural.stop_reason, structural.repair) == ("BLOCKED", "rejected", "off")
    assert structural.rejections == 1
    assert (repair.final_state, repair.stop_reason, repair.repair) == ("BLOCKED", "escalated", "on")
    assert repair.rejections > 1
    assert not repair.delivered and not repair.false_accept


def test_table_states_every_definition_and_the_fixed_budget() -> None:
    result = run_study(tuple(GROUPS), SEED_SCENARIOS, 2, executor=_Serial(), progress=False)
    table = render_study_table(result)
    for name, text in METRIC_DEFINITIONS.items():
        assert f"- {name}: {text}" in table
    assert "max_decisions=8, max_tool_calls=5" in table
    rows = {s.group: s for s in result.summaries}
    # Seed 0 + seed 1 on the seed's ten: base accepts unchecked, semantic review removes the overclaim.
    assert rows["base"].false_accepts > rows["structural"].false_accepts > rows["semantic"].false_accepts == 0
    assert rows["base"].false_rejects == 0


def test_study_tasks_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown group"):
        study_tasks(["bogus"], ["conforming_report"], 1)
    with pytest.raises(ValueError, match="seeds"):
        study_tasks(["base"], ["conforming_report"], 0)


class _Serial(Executor):
    """An in-process executor: submit runs the call at once."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future
