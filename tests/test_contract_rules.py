"""Seed 004's contract tests: each fails when the behaviour it names breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_lab.errors import WorkspaceError
from harness_lab.loop.run import Run
from harness_lab.paths import data_dir
from harness_lab.proposers import FunctionProposer, ScriptedProposer
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState
from harness_lab.validation import check_report

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
READ_TWO = [
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
]


def make_run(contract, evidence, tmp_path: Path, actions, **kw) -> Run:
    return Run(contract=contract, evidence=evidence, proposer=ScriptedProposer(actions),
               workspace=tmp_path / "ws", **kw)


def codes(text: str, read=("harness-boundary", "acceptance-snapshot"), *, contract, evidence) -> list[str]:
    verdict = check_report(text.encode(), set(read), evidence, contract.verification.report)
    return [e.code for e in verdict.errors]


def test_conforming_report_passes(contract, evidence) -> None:
    assert codes(GOOD, contract=contract, evidence=evidence) == []


@pytest.mark.parametrize("section", ["Conclusion", "Evidence", "Limitations"])
def test_empty_section_is_rejected(section: str, contract, evidence) -> None:
    lines = GOOD.splitlines()
    i = lines.index(f"## {section}")
    end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("## ")), len(lines))
    text = "\n".join(lines[: i + 1] + lines[end:])
    assert "section_empty" in codes(text, contract=contract, evidence=evidence)


def test_chinese_section_names_and_any_heading_level_accepted(contract, evidence) -> None:
    text = GOOD.replace("## Conclusion", "# 结论").replace("## Evidence", "### 证据").replace("## Limitations", "#### 局限")
    assert codes(text, contract=contract, evidence=evidence) == []


def test_section_names_match_case_insensitively(contract, evidence) -> None:
    assert codes(GOOD.replace("## Limitations", "## LIMITATIONS"), contract=contract, evidence=evidence) == []


@pytest.mark.parametrize("marker", ["[E:UNKNOWN]", "[E:]", "[E: harness-boundary]", "[E:harness-boundary"])
def test_odd_citation_syntax_is_rejected(marker: str, contract, evidence) -> None:
    text = GOOD.replace("Test material only.", f"Test material only {marker}")
    assert "citation_malformed" in codes(text, contract=contract, evidence=evidence)


def test_unknown_and_unread_citations_are_rejected(contract, evidence) -> None:
    unknown = GOOD.replace("Test material only.", "See [E:nonexistent-note].")
    assert "citation_unknown" in codes(unknown, contract=contract, evidence=evidence)
    assert "citation_not_read" in codes(GOOD, read=("harness-boundary",), contract=contract, evidence=evidence)


def test_bad_arguments_are_fed_back_not_raised(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [{"kind": "read_evidence"}, {"kind": "read_evidence", "id": 7}])
    first = run.step()
    assert first.decision.verdict == "refuse" and run.state is RunState.RUNNING
    assert first.proposal is not None and first.proposal.error is not None
    assert first.proposal.error.code == "bad_arguments"
    assert run.usage.tool_calls == 0
    assert "argument id: Field required" in run.context.view().render(), "the error must reach the next view"


@pytest.mark.parametrize("raw", [{"kind": "read_evidence", "id": "x", 0: None}, {"kind": "push", 0: None},
                                 {"kind": "think", "thought": "x", 1: 2}, {"kind": "set_state", (1,): "x"}])
def test_a_non_string_argument_name_is_a_malformed_proposal_not_an_exception(contract, evidence, tmp_path,
                                                                              raw: dict[object, object]) -> None:
    proposal = parse_proposal(raw)
    assert proposal.action is None and proposal.error is not None and proposal.error.code == "malformed"
    assert "argument names must be strings" in proposal.error.message
    run = make_run(contract, evidence, tmp_path, [raw])
    record = run.step()  # refused and fed back, like any malformed proposal; nothing ran
    assert record.decision.verdict == "refuse" and run.state is RunState.RUNNING and run.usage.tool_calls == 0


def test_illegal_action_kind_is_refused_with_structured_error(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [{"kind": "teleport", "to": "prod"}])
    record = run.step()
    assert record.proposal is not None and record.proposal.error is not None
    assert record.proposal.error.code == "unknown_kind"
    assert run.state is RunState.RUNNING and run.usage.tool_calls == 0


def test_forbidden_state_change_blocks(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [{"kind": "set_state", "state": "REVIEW_READY"}])
    run.step()
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "forbidden_action" and run.receipt is None


def test_budget_is_checked_before_the_call(contract, evidence, tmp_path) -> None:
    tight = contract.with_budget(max_tool_calls=1)
    run = make_run(tight, evidence, tmp_path, [READ_TWO[0], {"kind": "write_report", "text": GOOD}])
    run.run()
    assert run.state is RunState.EXHAUSTED and run.stop_reason is not None
    assert run.stop_reason.code == "tool_budget"
    assert not (run.workspace / "report.md").exists(), "the over-budget call must not have run"
    assert run.usage.tool_calls == 1


def test_failure_reasons_reach_the_next_context(contract, evidence, tmp_path) -> None:
    seen: list[str] = []
    script = [*READ_TWO, {"kind": "write_report", "text": GOOD.split("## Limitations")[0]},
              {"kind": "finish"}, {"kind": "finish"}]
    scripted = ScriptedProposer(script)

    def propose(view):
        seen.append(view.render())
        return scripted.propose(view)

    run = make_run(contract, evidence, tmp_path, script)
    run.proposer = FunctionProposer(propose)
    for _ in range(5):
        run.step()
    assert "section_missing" not in seen[3], "no rejection has happened before the first finish"
    assert "section_missing" in seen[4], "the rejection reason must be in the view after the failed finish"


def test_forged_acceptance_field_is_ignored(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [*READ_TWO, {"kind": "finish", "verified": True, "accepted": True}])
    run.run()
    assert run.state is RunState.EXHAUSTED and run.receipt is None
    claims = [r.proposal.claims for r in run.records if r.proposal and r.proposal.claims]
    assert claims and claims[0] == {"verified": True, "accepted": True}


def test_accepted_bytes_stay_the_same_after_the_file_changes(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [*READ_TWO, {"kind": "write_report", "text": GOOD}, {"kind": "finish"}])
    assert run.run() is RunState.REVIEW_READY
    assert run.receipt is not None and run.accepted_bytes == GOOD.encode()
    (run.workspace / "report.md").write_text("tampered after acceptance")
    assert run.accepted_bytes == GOOD.encode()
    assert run.receipt.matches(run.accepted_bytes)
    assert not run.receipt.matches((run.workspace / "report.md").read_bytes())
    assert run.receipt.contract_version == contract.version
    assert set(run.receipt.evidence_sha256) == {"harness-boundary", "acceptance-snapshot"}
    assert run.receipt.evidence_sha256["harness-boundary"] == evidence["harness-boundary"].sha256


def test_reuse_of_an_old_task_directory_is_refused(contract, evidence, tmp_path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "report.md").write_text(GOOD)
    with pytest.raises(WorkspaceError, match="already holds a draft"):
        make_run(contract, evidence, tmp_path, [*READ_TWO, {"kind": "finish"}])


def test_pending_is_visible_before_it_executes(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [*READ_TWO, {"kind": "write_report", "text": GOOD}])
    pending = run.pending
    assert pending is not None and pending.action is not None and pending.action.kind == "read_evidence"
    assert run.executor.observed == {} and run.usage.decisions == 0
    record = run.step()
    assert record.proposal == pending
    assert "harness-boundary" in run.executor.observed


def test_every_step_records_one_before_after_pair_and_state_events(contract, evidence, tmp_path) -> None:
    run = make_run(contract, evidence, tmp_path, [*READ_TWO, {"kind": "write_report", "text": GOOD}, {"kind": "finish"}])
    run.run()
    assert [r.step for r in run.records] == [1, 2, 3, 4]
    assert run.records[0].state_before is RunState.CREATED
    assert run.records[-1].state_before is RunState.RUNNING and run.records[-1].state_after is RunState.REVIEW_READY
    changes = [(e.before.value, e.after.value) for e in run.events if e.kind == "state_changed"]
    assert changes == [("CREATED", "RUNNING"), ("RUNNING", "VALIDATING"), ("VALIDATING", "REVIEW_READY")]


def test_with_budget_validates_what_it_replaces() -> None:
    # It used model_copy(update=...): a negative budget went through, and a misspelt limit was dropped.
    from harness_lab.contract import load_contract
    from harness_lab.paths import data_dir

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml")
    with pytest.raises(ValueError, match="unknown budget limit 'max_tool_call'"):
        contract.with_budget(max_tool_call=3)
    with pytest.raises(ValueError, match="max_decisions: .*greater than or equal to 1.*got -1"):
        contract.with_budget(max_decisions=-1)
    changed = contract.with_budget(max_tool_calls=3, wall_clock_seconds=2.5)
    assert (changed.stop.budget.max_tool_calls, changed.stop.budget.wall_clock_seconds) == (3, 2.5)
    assert changed.version != contract.version and contract.stop.budget.max_tool_calls == 5


def test_a_clock_that_steps_back_gives_no_wall_clock_budget_back() -> None:
    from harness_lab.clock import FakeClock
    from harness_lab.contract import Budget
    from harness_lab.loop.gates import LoopGates
    from harness_lab.records.events import Usage

    clock = FakeClock(start=1000.0, tick=0.0)
    gates = LoopGates(Budget(wall_clock_seconds=60), clock)
    gates.start()
    clock.advance(50)
    assert gates.elapsed() == 50
    clock.advance(-500)  # a caller's clock stepped back
    assert gates.elapsed() == 50
    clock.advance(520)
    assert gates.elapsed() == 70 and gates.before_decision(Usage()) is not None
