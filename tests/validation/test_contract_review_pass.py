"""Review pass on the control contract file: mistyped or unmeetable fields are one-line errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_lab.contract import load_contract
from harness_lab.errors import ConfigError
from harness_lab.paths import data_dir

BASE = yaml.safe_load((data_dir() / "contracts" / "report_task.yaml").read_text(encoding="utf-8"))


def _write(tmp_path: Path, where: tuple[str, ...], value: Any) -> Path:
    raw = copy.deepcopy(BASE)
    node = raw
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize(("where", "value"), [
    (("stop", "budget", "max_decisions"), True),  # was read as a budget of 1 decision
    (("stop", "budget", "max_tool_calls"), "5"),
    (("stop", "budget", "max_tokens"), 100.0),
    (("stop", "budget", "wall_clock_seconds"), "30"),
    (("verification", "report", "min_distinct_citations"), "2"),
    (("verification", "max_repairs"), False),
    (("trigger", "still_valid"), "no"),  # was read as False: a string, not a switch
    (("human_gate", "timeout_seconds"), True),
])
def test_a_mistyped_number_or_switch_is_a_one_line_error_naming_the_field(where, value, tmp_path) -> None:
    path = _write(tmp_path, where, value)
    with pytest.raises(ConfigError) as info:
        load_contract(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: field {'.'.join(where)}: ")


@pytest.mark.parametrize("sections", [[[]], [["Conclusion"], [" "]]])
def test_a_required_section_without_a_name_is_refused(sections, tmp_path) -> None:
    # [[]] was accepted and rejected every report: 'section  is missing'.
    with pytest.raises(ConfigError, match=r"field verification\.report\.sections\.\d"):
        load_contract(_write(tmp_path, ("verification", "report", "sections"), sections))


@pytest.mark.parametrize("report_path", ["", "/etc/report.md", "../report.md", "out/../../report.md", "C:\\report.md"])
def test_a_report_path_outside_the_workspace_is_refused(report_path: str, tmp_path) -> None:
    # The sandbox never reads such a path: every finish was 'report missing' until the budget ran out.
    with pytest.raises(ConfigError, match=r"field verification\.report\.path: .*relative path inside the workspace"):
        load_contract(_write(tmp_path, ("verification", "report", "path"), report_path))


def test_seconds_take_integers_and_with_budget_refuses_a_switch_for_a_count(tmp_path) -> None:
    contract = load_contract(_write(tmp_path, ("stop", "budget", "wall_clock_seconds"), 30))
    assert contract.budget.wall_clock_seconds == 30.0
    with pytest.raises(ValueError, match="max_decisions"):
        contract.with_budget(max_decisions=True)


@pytest.mark.parametrize(("gated", "hint"), [
    (["push", "delete_file"], "did you mean 'delete'?"),  # delete_file is gated as 'delete': it ran unasked
    (["pushh"], "did you mean 'push'?"),
    (["zzz"], "choose from delete, escalate_permission"),
])
def test_a_human_gate_category_that_gates_nothing_is_refused(gated: list[str], hint: str, tmp_path: Path) -> None:
    path = _write(tmp_path, ("human_gate", "required_for"), gated)
    with pytest.raises(ConfigError) as info:
        load_contract(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: field human_gate.required_for: ")
    assert "is no gate category" in message and hint in message


def test_every_default_gate_category_is_one_the_gate_matches() -> None:
    from harness_lab.records.actions import GATE_CATEGORIES, DeleteFile, GatedAction

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml")
    assert set(contract.human_gate.required_for) <= GATE_CATEGORIES
    assert DeleteFile(path="x").gate_category in GATE_CATEGORIES
    assert GatedAction(kind="push").gate_category == "push"
