"""Seeds vary something real: seeded perturbations of the script, identical in every process."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from harness_lab.contract import ReportContract
from harness_lab.experiments import NoisyScript, perturb_script
from harness_lab.scenarios import load_scenario
from harness_lab.validation import check_report

READ = {"harness-boundary", "acceptance-snapshot"}


def _script(name: str) -> list[dict[str, Any]]:
    return [dict(a) for a in load_scenario(name).actions]


def _single(kind: str, name: str = "conforming_report") -> NoisyScript:
    """The first seed whose draw applies exactly one perturbation, of ``kind``."""
    for seed in range(1, 500):
        noisy = perturb_script(_script(name), scenario=name, seed=seed, rate=0.3)
        if [p.kind for p in noisy.perturbations] == [kind]:
            return noisy
    raise AssertionError(f"no seed with a single {kind}")


def test_seed_zero_is_the_unperturbed_script() -> None:
    actions = _script("missing_section_then_fixed")
    noisy = perturb_script(actions, scenario="missing_section_then_fixed", seed=0, rate=1.0)
    assert list(noisy.actions) == actions and noisy.perturbations == ()


def test_same_seed_same_script_and_seeds_differ() -> None:
    actions = _script("missing_section_then_fixed")
    draws = [perturb_script(actions, scenario="m", seed=s, rate=0.5) for s in range(1, 30)]
    assert draws == [perturb_script(actions, scenario="m", seed=s, rate=0.5) for s in range(1, 30)]
    assert len({repr(d.actions) for d in draws}) > 10


def test_draw_is_the_same_in_a_fresh_interpreter_with_another_hash_seed() -> None:
    code = ("from harness_lab.experiments import perturb_script\n"
            "from harness_lab.scenarios import load_scenario\n"
            "a=[dict(x) for x in load_scenario('conforming_report').actions]\n"
            "print(repr(perturb_script(a, scenario='conforming_report', seed=7, rate=0.6).model_dump()))\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(h)}).stdout for h in (1, 2)}
    here = perturb_script(_script("conforming_report"), scenario="conforming_report", seed=7, rate=0.6)
    assert outs == {repr(here.model_dump()) + "\n"}


def test_drop_read_removes_exactly_that_read() -> None:
    actions, noisy = _script("conforming_report"), _single("drop_read")
    i = noisy.perturbations[0].index
    assert actions[i]["kind"] == "read_evidence" and noisy.perturbations[0].detail == actions[i]["id"]
    assert list(noisy.actions) == actions[:i] + actions[i + 1 :]


def test_malformed_call_is_inserted_before_the_action() -> None:
    actions, noisy = _script("conforming_report"), _single("malformed_call")
    i = noisy.perturbations[0].index
    assert list(noisy.actions) == actions[:i] + [{"kind": "read_evidence"}] + actions[i:]


def test_repeat_call_proposes_the_action_twice() -> None:
    actions, noisy = _script("conforming_report"), _single("repeat_call")
    i = noisy.perturbations[0].index
    assert list(noisy.actions) == actions[: i + 1] + [actions[i]] + actions[i + 1 :]


def test_mutated_report_loses_one_required_section_and_is_never_acceptable() -> None:
    scenario = load_scenario("conforming_report")
    sections: set[str] = set()
    actions = _script("conforming_report")
    for seed in range(1, 400):
        noisy = perturb_script(actions, scenario="conforming_report", seed=seed, rate=0.5)
        for p in noisy.perturbations:
            if p.kind != "mutate_section":
                continue
            text = next(str(a["text"]) for a in noisy.actions if a.get("kind") == "write_report").encode()
            verdict = check_report(text, READ, READ, ReportContract())
            assert [e.code for e in verdict.errors] == ["section_missing"] and p.detail in verdict.errors[0].message
            assert not scenario.is_acceptable(text)
            sections.add(p.detail)
    assert sections == {"Conclusion", "Evidence", "Limitations"}


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_bad_rate_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="noise rate"):
        perturb_script(_script("conforming_report"), scenario="x", seed=1, rate=rate)
