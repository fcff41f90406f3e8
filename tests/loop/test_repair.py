"""Repair after failed verification: retry (cap 3) -> roll back with a note -> escalate."""

from __future__ import annotations

import pytest
from loophelpers import FINISH, GOOD, READ_A, READ_B, WRITE_GOOD, contract, make_run, notes

from harness_lab.loop.repair import RepairPolicy
from harness_lab.records.states import RunState

WRITE_BAD = {"kind": "write_report", "text": GOOD.replace("## Limitations\nTest material only.\n", "")}


def test_off_by_default_failed_checks_are_plain_feedback(tmp_path) -> None:
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH])
    run.run()
    assert run.repair is None and run.state is RunState.EXHAUSTED
    assert not any(notes(r, "repair") for r in run.records)
    assert not any(e.kind == "restored" for e in run.events)


def test_cap_3_then_rollback_with_a_note_then_escalate(tmp_path) -> None:
    policy = RepairPolicy()
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH], repair=policy)  # then: finish again
    run.run(max_steps=3)
    assert policy.healthy is not None, "a healthy snapshot was taken before the first draft"
    healthy = next(i for i in run.sandbox.snapshots() if i.id == policy.healthy)
    assert healthy.run_state is not None and healthy.run_state["state"] == "RUNNING"
    assert (run.workspace / "report.md").exists()

    for failure in (1, 2, 3):
        record = run.step()
        assert record.verdict is not None and not record.verdict.accepted
        assert run.state is RunState.RUNNING and policy.history[-1].action == "retry"
        assert policy.history[-1].failure == failure

    record = run.step()  # the 4th failure: over the cap
    step = policy.history[-1]
    assert step.action == "rollback" and step.snapshot == policy.healthy
    assert run.state is RunState.RUNNING and not (run.workspace / "report.md").exists(), "files rolled back"
    assert any(e.kind == "restored" for e in record.events), "run state and context restored too"
    view = run.context.view().render()
    assert "approach write_report(" in view and "failed because section_missing" in view
    assert run.usage.decisions == 7, "budget already spent stays spent"

    run.step()  # fails again after the rollback
    assert run.state is RunState.BLOCKED and run.stop_reason is not None
    assert run.stop_reason.code == "escalated" and "a person must decide" in run.stop_reason.message
    assert [s.action for s in policy.history] == ["retry"] * 3 + ["rollback", "escalate"]
    assert [n.data["action"] for r in run.records for n in notes(r, "repair")] == [s.action for s in policy.history]


def test_a_fix_within_the_cap_is_accepted(tmp_path) -> None:
    policy = RepairPolicy()
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH, WRITE_GOOD, FINISH], repair=policy)
    run.run()
    assert run.state is RunState.REVIEW_READY and [s.action for s in policy.history] == ["retry"]


def test_no_healthy_snapshot_escalates_instead_of_rolling_back(tmp_path) -> None:
    policy = RepairPolicy(max_retries=1)
    run = make_run(tmp_path, [READ_A, FINISH], repair=policy)  # never writes a draft
    run.run()
    assert run.state is RunState.BLOCKED and run.stop_reason.code == "escalated"  # type: ignore[union-attr]
    assert [s.action for s in policy.history] == ["retry", "escalate"]


def test_the_contracts_max_repairs_sets_the_retry_cap(tmp_path) -> None:
    # verification.max_repairs was never read: an edited contract still got 3 retries.
    base = contract()
    one = base.model_copy(update={"verification": base.verification.model_copy(update={"max_repairs": 1})})
    policy = RepairPolicy()
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH], repair=policy, contract_=one)
    run.run()
    assert run.state is RunState.BLOCKED and run.stop_reason.code == "escalated"  # type: ignore[union-attr]
    assert [s.action for s in policy.history] == ["retry", "rollback", "escalate"]
    assert policy.history[0].note.startswith("retry 1/1:")


def test_an_explicit_max_retries_overrides_the_contract(tmp_path) -> None:
    policy = RepairPolicy(max_retries=0)
    run = make_run(tmp_path, [READ_A, READ_B, WRITE_BAD, FINISH], repair=policy)
    run.run()
    assert [s.action for s in policy.history] == ["rollback", "escalate"]


def test_a_negative_retry_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RepairPolicy(max_retries=-1)


@pytest.mark.parametrize("spelling", ["./report.md", ".//report.md", "{ws}/report.md"])
def test_a_draft_written_under_another_spelling_of_the_report_path_is_the_first_draft(tmp_path, spelling) -> None:
    # write_file('./report.md') writes the report, but the healthy snapshot was not taken: the cap
    # then escalated with nothing to roll back to.
    policy = RepairPolicy(max_retries=0)
    path = spelling.format(ws=(tmp_path / "ws").resolve())
    bad = {"kind": "write_file", "path": path, "content": WRITE_BAD["text"]}
    run = make_run(tmp_path, [READ_A, READ_B, bad, FINISH], repair=policy)
    run.run(max_steps=4)
    assert policy.healthy is not None
    assert [s.action for s in policy.history] == ["rollback"]
    assert "approach write_file(" in policy.history[0].note
