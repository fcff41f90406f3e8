"""trigger.still_valid acts: re-verified at start and at resume, by a switch or a check the contract names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loophelpers import CONFORMING, contract, make_run

from harness_lab import Run
from harness_lab.contract import ControlContract, Trigger, load_contract
from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.loop.triggers import DEFAULT_TRIGGER_CHECKS, TRIGGER_INVALID, TriggerTest
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore


def _with_trigger(still_valid: Any) -> ControlContract:
    base = contract()
    return base.model_copy(update={"trigger": Trigger.model_validate({"source": "tracker", "condition": "ticket 42 is open",
                                                                       "still_valid": still_valid})})


def test_a_run_whose_trigger_is_false_does_not_start(tmp_path: Path) -> None:
    # still_valid: false was a static flag nobody read: the run read, wrote and finished REVIEW_READY.
    run = make_run(tmp_path, CONFORMING, contract_=_with_trigger(False))
    assert run.run() is RunState.BLOCKED
    assert run.stop_reason is not None and run.stop_reason.code == TRIGGER_INVALID
    assert "ticket 42 is open no longer holds" in run.stop_reason.message
    assert run.usage.decisions == 0 and run.usage.tool_calls == 0 and not (run.workspace / "report.md").exists()


def test_a_named_check_is_run_at_start(tmp_path: Path) -> None:
    ticket = tmp_path / "tickets" / "42.open"
    ticket.parent.mkdir()
    ticket.write_text("open")
    holds = _with_trigger({"check": "file_exists", "path": str(ticket)})
    assert make_run(tmp_path, CONFORMING, contract_=holds, name="a").run() is RunState.REVIEW_READY
    ticket.unlink()
    run = make_run(tmp_path, CONFORMING, contract_=holds, name="b")
    assert run.run() is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == TRIGGER_INVALID and "does not exist" in run.stop_reason.message
    # a path relative to the workspace is read there
    relative = make_run(tmp_path, CONFORMING, contract_=_with_trigger({"check": "file_absent", "path": "STOP"}), name="c")
    (relative.workspace / "STOP").write_text("")
    assert relative.run() is RunState.BLOCKED


def test_checks_come_from_the_mapping_passed_in(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def open_ticket(params: Any, workspace: Path) -> str | None:
        seen.append(dict(params))
        return None if params["id"] == 42 else f"ticket {params['id']} is closed"

    checks = {**DEFAULT_TRIGGER_CHECKS, "ticket_open": TriggerTest(("id",), open_ticket)}
    run = make_run(tmp_path, CONFORMING, contract_=_with_trigger({"check": "ticket_open", "id": 42}), trigger_checks=checks)
    assert run.run() is RunState.REVIEW_READY and seen == [{"id": 42}]
    with pytest.raises(ConfigError, match=r"no check named 'ticket_open'; known: file_absent, file_exists"):  # not global: absent by default
        make_run(tmp_path, CONFORMING, contract_=_with_trigger({"check": "ticket_open", "id": 42}), name="b")


@pytest.mark.parametrize(("still_valid", "message"), [
    ({"check": "file_exist", "path": "x"}, "no check named 'file_exist'; did you mean 'file_exists'?"),
    ({"check": "file_exists"}, "check 'file_exists' needs the parameter 'path'"),
    ({"check": "file_exists", "path": "x", "mode": "r"}, "check 'file_exists' takes no parameter 'mode'"),
])
def test_a_bad_check_is_one_line_when_the_run_is_made(tmp_path: Path, still_valid: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        make_run(tmp_path, CONFORMING, contract_=_with_trigger(still_valid))
    assert "\n" not in str(caught.value) and not (tmp_path / "ws").exists()


@pytest.mark.parametrize(("value", "message"), [
    ("'no'", "a switch (true or false) or {check: <name>"),
    ("{path: x}", "a check needs its name as 'check: <name>'"),
    ("{check: file_exists, path: [a]}", "parameter 'path' of check 'file_exists' must be a string"),
])
def test_a_contract_file_with_a_bad_still_valid_is_one_line(tmp_path: Path, value: str, message: str) -> None:
    text = (data_dir() / "contracts" / "report_task.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "c.yaml"
    bad.write_text(text.replace("condition: a user asked", f"still_valid: {value}\n  condition: a user asked", 1),
                   encoding="utf-8")
    with pytest.raises(ConfigError, match="field trigger.still_valid: ") as caught:
        load_contract(bad)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_resume_whose_trigger_stopped_holding_is_refused(tmp_path: Path) -> None:
    ticket = tmp_path / "42.open"
    ticket.write_text("open")
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run(contract=_with_trigger({"check": "file_exists", "path": str(ticket)}), proposer=ScriptedProposer(CONFORMING),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws",
              approver=AutoApprove(), run_id="T1", store=store)
    run.run(max_steps=2)
    run.close()
    ticket.unlink()
    rows = [s.checkpoint for s in store.steps("T1", start=0)]
    refused = Run.resume(store, "T1")
    assert refused.resume_report is not None and refused.state is RunState.BLOCKED
    trigger = next(c for c in refused.resume_report.checks if c.name == "trigger")
    assert not trigger.ok and "check file_exists: " in trigger.detail and "does not exist" in trigger.detail
    assert [s.checkpoint for s in store.steps("T1", start=0)] == rows  # nothing written
    refused.close()
    ticket.write_text("open again")
    resumed = Run.resume(store, "T1")
    assert resumed.resume_report is not None and resumed.resume_report.checks[0].ok
    assert resumed.run() is RunState.REVIEW_READY
    resumed.close()
