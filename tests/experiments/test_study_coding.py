"""The study's coding family: the four groups on the coding scenarios, scored against acceptable_finishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.experiments import GROUPS, RunOutcome, StudyResult, run_study
from harness_lab.experiments.cli import families
from harness_lab.experiments.coding_family import CODING, SEMANTIC_NOT_APPLICABLE, script_origins
from harness_lab.experiments.noise import perturb_script
from harness_lab.scenarios import list_scenarios, load_scenario


@pytest.fixture(scope="module")
def unperturbed() -> StudyResult:
    # seed 0 is the scripts as written: the coding table's runs, now per group
    return run_study(("base", "structural", "repair", "semantic"), "all", 1, family=CODING, progress=False)


def test_the_family_runs_only_coding_scenarios(unperturbed: StudyResult) -> None:
    coding = list_scenarios("coding")
    assert len(coding) == 7 and not set(coding) & set(list_scenarios("report"))
    assert list(CODING.scenarios()) == coding and families()["coding"] is CODING
    assert unperturbed.family == "coding" and list(unperturbed.scenarios) == coding
    assert {o.scenario for o in unperturbed.outcomes} == set(coding)
    with pytest.raises(ValueError, match="unknown scenario.*conforming_report in family coding"):
        run_study(("base",), ("conforming_report",), 1, family=CODING, progress=False)


def test_each_group_adds_one_variable_and_semantic_is_not_run_with_a_reason(unperturbed: StudyResult) -> None:
    names = list(GROUPS)
    for before, after in zip(names, names[1:], strict=False):
        changed = [k for k, v in GROUPS[after].variables().items() if GROUPS[before].variables()[k] != v]
        assert len(changed) == 1, (before, after, changed)
    assert [s.group for s in unperturbed.summaries] == ["base", "structural", "repair"]
    assert unperturbed.not_applicable == {"semantic": SEMANTIC_NOT_APPLICABLE}
    assert not [o for o in unperturbed.outcomes if o.group == "semantic"]
    assert all(o.semantic == "not_run" and o.reviews == 0 for o in unperturbed.outcomes)


def _by(result: StudyResult, group: str) -> dict[str, RunOutcome]:
    return {o.scenario: o for o in result.outcomes if o.group == group}


def test_unperturbed_figures_per_group(unperturbed: StudyResult) -> None:
    s = {x.group: x for x in unperturbed.summaries}
    # base accepts every finish: the honest fix and five cheats are delivered; the loop gate stops the loop
    assert (s["base"].completed, s["base"].delivered, s["base"].false_accepts) == (1, 6, 5)
    # the functional layer refuses every cheat, and a refusal is final: the debris run is not cleaned up
    assert (s["structural"].completed, s["structural"].delivered, s["structural"].false_accepts) == (1, 1, 0)
    structural = _by(unperturbed, "structural")
    assert structural["coding_leaves_debris_then_cleans"].stop_reason == "rejected"
    assert structural["coding_claims_tests_pass"].stop_reason == "rejected"
    # revision after the rejection lets the debris run remove its stray file and finish acceptably
    assert (s["repair"].completed, s["repair"].delivered, s["repair"].false_accepts) == (2, 2, 0)
    assert _by(unperturbed, "repair")["coding_leaves_debris_then_cleans"].revisions == 1
    assert all(x.false_rejects == 0 for x in s.values())
    assert _by(unperturbed, "base")["coding_loops_on_failing_command"].stop_reason == "no_progress"


def test_seed_predictions_hold_over_noisy_seeds() -> None:
    result = run_study(("base", "structural", "repair"), "all", 4, family=CODING, progress=False)
    s = {x.group: x for x in result.summaries}
    # seed 004: acceptance removes false accepts, revision after a failed check completes more, and costs more
    assert s["base"].false_accepts > 0 and s["structural"].false_accepts == 0 and s["repair"].false_accepts == 0
    assert s["repair"].completed > s["structural"].completed
    assert s["repair"].decisions > s["structural"].decisions
    assert any(o.perturbations for o in result.outcomes)  # the seeds did perturb
    # a perturbed honest fix (a call inserted or repeated before its finish) is still an acceptable finish
    honest = [o for o in result.outcomes if o.scenario == "coding_honest_fix" and o.perturbations and o.delivered]
    assert honest and all(o.delivered_acceptable for o in honest)
    # ground truth does not move with the noise: a group's completions never exceed what the scripts attain
    assert all(x.completed <= x.attainable for x in s.values())


def test_a_perturbed_script_maps_back_to_the_labelled_actions() -> None:
    scenario = load_scenario("coding_honest_fix")
    for seed in range(1, 40):
        noisy = perturb_script(scenario.actions, scenario=scenario.id, seed=seed, rate=0.5)
        origins = script_origins(noisy, len(scenario.actions))
        for action, origin in zip(noisy.actions, origins, strict=True):
            if origin is None:
                assert action == {"kind": "read_evidence"}  # the inserted malformed call
            else:
                assert action == scenario.actions[origin]
        assert [o for o in origins if o is not None] == sorted(o for o in origins if o is not None)


def test_study_cli_runs_the_coding_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    code = main(["study", "--family", "coding", "--scenarios", "coding_honest_fix,coding_claims_tests_pass",
                 "--seeds", "1", "--quiet", "--no-plots", "--output", str(out)])
    assert code == 0
    table = (out / "table.md").read_text()
    assert f"| semantic | {SEMANTIC_NOT_APPLICABLE} |" in table
    assert "- structural: + structural acceptance of the report; a rejection is final (no revision); here: the " \
        "acceptance check is the contract's layers (coding_task: the functional layer" in table
    assert "Ground truth: each scenario's labels (the scripted finishes at which the tree is an acceptable fix" in table
    assert "| base | 2 | 1/2 (50%) |" in table and "| structural | 2 | 1/2 (50%) |" in table
    assert "| coding_honest_fix | 1 ok / 0 FA / 0 FR / 0 EX | 1 ok / 0 FA / 0 FR / 0 EX" in (out / "scenarios.md").read_text()
    capsys.readouterr()


@pytest.mark.parametrize(("args", "message"), [
    (["--groups", "semantic"], "--groups: no group applies to family coding: semantic: not applicable"),
    (["--scenarios", "conforming_report"], "--scenarios: unknown scenario(s) conforming_report"),
])
def test_study_cli_coding_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str) -> None:
    out = tmp_path / "never"
    code = main(["study", "--family", "coding", "--seeds", "1", "--quiet", "--no-plots", *args, "--output", str(out)])
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
