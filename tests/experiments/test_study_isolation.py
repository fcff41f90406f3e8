"""Seed 004's groups each add one variable: the isolation is in the data, and the runs bear it out.

The seed: "the basic loop; plus structural acceptance; after a failed acceptance, revision is allowed;
then plus semantic review". Before issue 18 the structural group already revised after feedback (the
repair group's variable), so the two completed the same 34/200.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import pytest
from pydantic import ValidationError

from harness_lab.contract import ControlContract, load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.experiments import (
    GROUPS,
    REPORTS,
    SEED_SCENARIOS,
    GroupSpec,
    RunOutcome,
    StudyTask,
    TaskFamily,
    run_study,
    run_study_task,
    study_tasks,
)
from harness_lab.experiments.cli import families
from harness_lab.paths import data_dir
from harness_lab.scenarios import load_scenario
from harness_lab.validation.semantic import EvidenceSupportReviewer


class _Serial(Executor):
    """An in-process executor: submit runs the call at once."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_each_group_adds_exactly_one_variable_to_the_previous_one() -> None:
    specs = list(GROUPS.values())
    assert [g.name for g in specs] == ["base", "structural", "repair", "semantic"]
    assert not any(specs[0].variables().values())  # the basic loop: none on
    added = []
    for before, after in zip(specs, specs[1:], strict=False):
        changed = [k for k, v in after.variables().items() if v != before.variables()[k]]
        assert len(changed) == 1 and after.variables()[changed[0]], f"{after.name} vs {before.name}: {changed}"
        added += changed
    assert added == ["structural_check", "revise_after_reject", "semantic_review"]  # the seed's order


def test_revision_without_a_check_is_refused() -> None:
    with pytest.raises(ValidationError, match="revise_after_reject needs structural_check"):
        GroupSpec(name="odd", structural_check=False, revise_after_reject=True, semantic_review=False,
                  description="revises after rejections that never happen")


@pytest.fixture(scope="module")
def seed_study() -> Any:
    return run_study(tuple(GROUPS), "seed", 6, executor=_Serial(), progress=False)


def test_the_structural_group_never_revises_after_a_rejection(seed_study: Any) -> None:
    structural = [o for o in seed_study.outcomes if o.group == "structural"]
    rejected = [o for o in structural if o.rejections]
    assert rejected  # the seed's scenarios do get refused: the claim below is not vacuous
    assert all(o.revisions == 0 and o.rejections <= 1 for o in structural)
    assert {(o.final_state, o.stop_reason) for o in rejected} == {("BLOCKED", "rejected")}
    # ... while the next group, whose one added variable is revision, does revise.
    assert sum(o.revisions for o in seed_study.outcomes if o.group == "repair") > 0


def test_revision_is_what_recovers_a_report_fixed_after_feedback(contract: ControlContract,
                                                                evidence: EvidenceCatalogue) -> None:
    def task(group: str) -> StudyTask:
        return StudyTask(group=GROUPS[group], scenario=load_scenario("missing_section_then_fixed"), seed=0,
                         noise=0.2, contract=contract, evidence=evidence, reviewer=EvidenceSupportReviewer(),
                         family=REPORTS)

    structural, repair = run_study_task(task("structural")), run_study_task(task("repair"))
    assert (structural.final_state, structural.stop_reason, structural.delivered) == ("BLOCKED", "rejected", False)
    assert repair.delivered_acceptable and repair.revisions == 1 and repair.rejections == 1


def test_the_seed_predictions_hold_where_the_seed_makes_them(seed_study: Any) -> None:
    rows = {s.group: s for s in seed_study.summaries}
    base, structural, repair, semantic = (rows[g] for g in ("base", "structural", "repair", "semantic"))
    # "structural acceptance keeps the obviously incomplete reports out"
    assert base.false_accepts > structural.false_accepts
    # "rejected first, then completed: checked, the completed version is accepted" - needs revision
    assert repair.completed > structural.completed
    # "well formed but overclaiming: still ready for review" under structure; the review holds it back
    assert repair.false_accepts > semantic.false_accepts == 0
    # "each layer adds cost": review calls
    assert semantic.reviews > 0 == repair.reviews == structural.reviews == base.reviews
    # a check can refuse an acceptable report; no check cannot
    assert base.false_rejects == 0


# -- task families ---------------------------------------------------------------------------------
def _two_names() -> Sequence[str]:
    return ("alpha", "beta")


def _prepare_toy(names: Sequence[str], contract: ControlContract | None,
                 budget: Mapping[str, int | float | None] | None) -> list[tuple[Any, ControlContract, EvidenceCatalogue]]:
    shipped = load_contract(data_dir() / "contracts" / "report_task.yaml")
    return [(name, contract or shipped, EvidenceCatalogue({})) for name in names]


def _run_toy(task: StudyTask) -> RunOutcome:
    done = task.group.structural_check
    return RunOutcome(group=task.group.name, scenario=task.scenario, seed=task.seed, perturbations=(),
                      final_state="REVIEW_READY" if done else "EXHAUSTED", stop_reason="", structural=None,
                      semantic="not_run", delivered=done, delivered_acceptable=done, attainable=True,
                      false_reject=False, rejections=0, decisions=1, tool_calls=0, tokens=0, reviews=0, steps=1,
                      repair="off", wall_ms=0.0)


TOY = TaskFamily(name="toy", description="two scenarios, done iff checked", scenarios=_two_names,
                 prepare=_prepare_toy, run=_run_toy, subsets={"first": ("alpha",)})


def test_a_family_is_passed_in_and_runs_its_own_scenarios() -> None:
    result = run_study(("base", "structural"), "all", 2, family=TOY, executor=_Serial(), progress=False)
    assert result.family == "toy" and result.scenarios == ("alpha", "beta")
    assert {(o.group, o.scenario) for o in result.outcomes} == {(g, s) for g in ("base", "structural")
                                                                for s in ("alpha", "beta")}
    assert [s.completed for s in result.summaries] == [0, 4]
    subset = run_study(("base",), "first", 1, family=TOY, executor=_Serial(), progress=False)
    assert subset.scenarios == ("alpha",)
    # the default family is still the reports, and its names are not the toy's
    assert run_study(("base",), ("conforming_report",), 1, executor=_Serial(), progress=False).family == "reports"
    with pytest.raises(ValueError, match="unknown scenario.*conforming_report in family toy"):
        study_tasks(["base"], ["conforming_report"], 1, family=TOY)


def test_the_cli_knows_its_families_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Any) -> None:
    from harness_lab.cli import main

    assert families()["reports"] is REPORTS
    assert main(["study", "--family", "codin", "--seeds", "1", "--no-plots", "--quiet",
                 "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["harness-lab: error: --family: unknown family 'codin'; choose from reports,coding"]
    assert not (tmp_path / "out").exists()


def test_seed_scenarios_are_the_reports_family_subset() -> None:
    assert tuple(REPORTS.subsets["seed"]) == SEED_SCENARIOS
