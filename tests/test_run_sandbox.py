"""The run and its sandbox together: refusals are data, irreversible calls are snapshotted first,
and a rollback restores files *and* run state and context."""

from __future__ import annotations

from pathlib import Path

from harness_lab import Run, RunState, ScriptedProposer


def _run(contract, evidence, tmp_path, actions) -> Run:
    roomy = contract.with_budget(max_decisions=20, max_tool_calls=20)
    return Run(contract=roomy, evidence=evidence, proposer=ScriptedProposer(actions), workspace=tmp_path / "ws")


def test_escape_attempt_is_denied_fed_back_and_the_run_goes_on(contract, evidence, tmp_path) -> None:
    run = _run(contract, evidence, tmp_path, [{"kind": "write_file", "path": "../escape.txt", "content": "x"}])
    record = run.step()
    assert record.tool_result is not None and record.tool_result.status == "denied"
    assert not (tmp_path / "escape.txt").exists()
    assert run.state is RunState.RUNNING
    assert "denied" in run.context.view().render()


def test_every_irreversible_call_has_a_snapshot_before_it(contract, evidence, tmp_path) -> None:
    actions = [
        {"kind": "write_file", "path": "notes.txt", "content": "v1"},
        {"kind": "write_file", "path": "notes.txt", "content": "v2"},
        {"kind": "run_command", "argv": ["true"], "timeout": 10},
        {"kind": "write_file", "path": "fresh.txt", "content": "new"},
    ]
    run = _run(contract, evidence, tmp_path, actions)
    run.run(max_steps=4)
    results = [r.tool_result for r in run.records]
    assert all(r is not None and r.ok for r in results), [r.reason for r in results if r and not r.ok]
    snapshots = {s.id: s for s in run.sandbox.snapshots()}
    irreversible = [results[1], results[2]]  # an overwrite and a command
    for result in irreversible:
        assert result is not None
        snap = snapshots[result.data["snapshot_before"]]
        assert snap.run_state is not None and snap.run_state["state"] == "RUNNING"
    assert "snapshot_before" not in results[0].data and "snapshot_before" not in results[3].data


def test_rollback_restores_files_run_state_and_context(contract, evidence, tmp_path) -> None:
    actions = [
        {"kind": "read_evidence", "id": "harness-boundary"},
        {"kind": "write_file", "path": "notes.txt", "content": "first draft"},
        {"kind": "read_evidence", "id": "budget-gates"},
        {"kind": "write_file", "path": "notes.txt", "content": "second draft"},
        {"kind": "write_file", "path": "later.txt", "content": "made after the snapshot"},
    ]
    run = _run(contract, evidence, tmp_path, actions)
    run.run(max_steps=2)
    healthy = run.sandbox.snapshot("healthy")
    view_before = run.context.view().render()
    run.run(max_steps=3)
    assert (run.workspace / "later.txt").exists() and "budget-gates" in run.executor.observed
    assert "budget-gates" in run.context.view().render()

    run.rollback(healthy.id)

    assert (run.workspace / "notes.txt").read_bytes() == b"first draft"
    assert not (run.workspace / "later.txt").exists()
    assert set(run.executor.observed) == {"harness-boundary"}, "the run must not remember undone reads"
    assert run.context.view().render() == view_before
    pending = run.pending
    assert pending is not None and pending.action is not None
    assert pending.action.model_dump() == {"kind": "read_evidence", "id": "budget-gates"}
    # the restore is an event, then a note naming the snapshot (what run.at(n) reads the rollback from)
    restored, note = run.events[-2:]
    assert restored.kind == "restored"
    assert note.kind == "note" and note.topic == "rolled_back" and healthy.id in note.message


def test_close_removes_only_the_directories_the_run_made(contract, evidence, tmp_path) -> None:
    with Run(contract=contract, evidence=evidence, proposer=ScriptedProposer([{"kind": "finish"}])) as own:
        made = own.workspace
        snapshots = own.sandbox.capabilities["snapshot_dir"]
        assert made.is_dir()
    assert not made.exists() and not Path(snapshots).exists()
    with _run(contract, evidence, tmp_path, [{"kind": "write_file", "path": "a.txt", "content": "x"}]) as run:
        run.step()
    assert (tmp_path / "ws" / "a.txt").read_text() == "x"


def test_an_external_change_to_a_file_marks_its_observation_stale(contract, evidence, tmp_path) -> None:
    run = _run(contract, evidence, tmp_path, [
        {"kind": "write_file", "path": "config.yaml", "content": "port: 1"},
        {"kind": "read_file", "path": "config.yaml"},
    ])
    run.run(max_steps=2)
    stale = run.context.mark_stale("file:config.yaml")
    assert len(stale) == 2
    fresh = [i for i in run.context.view().items if i.source.startswith("step ")]
    assert fresh and all(i.freshness == "stale" for i in fresh if "config.yaml" in i.text)


def test_a_large_output_enters_the_view_as_a_reference_fetchable_by_read_ref(contract, evidence, tmp_path) -> None:
    big = "".join(f"line {i:05d} ok\n" for i in range(4000))  # ~60 KB
    run = _run(contract, evidence, tmp_path, [
        {"kind": "write_file", "path": "big.log", "content": big},
        {"kind": "read_file", "path": "big.log"},
    ])
    run.run(max_steps=2)
    view = run.context.view()
    assert view.total_tokens <= view.budget_tokens and len(view.render()) < 16_384
    refs = [i for i in view.items if i.ref_id]
    assert len(refs) == 1 and refs[0].layer.name == "L5"
    run.proposer = ScriptedProposer([{"kind": "read_ref", "ref": refs[0].ref_id, "start": 0, "end": 100_000},
                                     {"kind": "read_ref", "ref": "no-such-ref"}])
    fetched = run.step().tool_result
    assert fetched is not None and fetched.ok and big in (fetched.content or "")
    missing = run.step().tool_result
    assert missing is not None and missing.status == "error" and "no stored output" in (missing.reason or "")


def test_rolling_back_to_before_an_overwrite_puts_the_overwrite_back_in_front(contract, evidence, tmp_path) -> None:
    run = _run(contract, evidence, tmp_path, [
        {"kind": "write_file", "path": "plan.md", "content": "v1"},
        {"kind": "write_file", "path": "plan.md", "content": "v2"},
        {"kind": "list_dir", "path": "."},
    ])
    run.run(max_steps=2)
    before = run.records[-1].tool_result
    assert before is not None and "snapshot_before" in before.data
    run.rollback(before.data["snapshot_before"])
    assert (run.workspace / "plan.md").read_text() == "v1"
    pending = run.pending
    assert pending is not None and pending.raw == {"kind": "write_file", "path": "plan.md", "content": "v2"}
    run.step()
    assert (run.workspace / "plan.md").read_text() == "v2"


def test_the_validator_reads_the_report_only_inside_the_workspace(contract, evidence, tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "report.md").write_bytes((Path(__file__).parents[1] / "data/reports/conforming.md").read_bytes())
    report = contract.verification.report.model_copy(update={"path": "out/report.md"})
    nested = contract.model_copy(update={"verification": contract.verification.model_copy(update={"report": report})})
    run = Run(contract=nested, evidence=evidence, workspace=tmp_path / "ws", proposer=ScriptedProposer([
        {"kind": "read_evidence", "id": "harness-boundary"},
        {"kind": "read_evidence", "id": "acceptance-snapshot"},
        {"kind": "finish"},
    ]))
    (run.workspace / "out").symlink_to(outside)  # a middle component leading out of the workspace
    run.run(max_steps=3)
    last = run.records[-1]
    assert last.verdict is not None and [e.code for e in last.verdict.errors] == ["report_missing"]
    assert run.state is RunState.RUNNING and run.receipt is None


def test_think_is_a_pure_recorded_step(contract, evidence, tmp_path) -> None:
    from harness_lab.persistence.checkpoint import effect_class

    run = _run(contract, evidence, tmp_path, [{"kind": "think", "thought": "cite two notes, then finish"},
                                              {"kind": "think", "thought": ""}])
    before = run.sandbox.workspace_hash()
    record = run.step()
    assert record.decision.verdict == "execute" and record.tool_result is not None and record.tool_result.ok
    assert record.proposal is not None and record.proposal.action is not None
    assert effect_class(record.proposal.action) == "read"  # nothing to make durable before it runs
    assert run.sandbox.workspace_hash() == before and list((tmp_path / "ws").iterdir()) == []
    assert "cite two notes, then finish" in run.context.view().render()
    assert run.usage.tool_calls == 1
    empty = run.step()  # an empty thought is a bad argument fed back, not a crash
    assert empty.decision.verdict == "refuse" and empty.proposal is not None
    assert empty.proposal.error is not None and empty.proposal.error.code == "bad_arguments"


def test_run_command_without_a_timeout_uses_the_policy_limit(contract, evidence, tmp_path) -> None:
    # RunCommand.timeout defaults to None ("the policy's"), and the executor passed that None on:
    # the sandbox refused every command proposed without a timeout and charged the tool call.
    run = _run(contract, evidence, tmp_path, [{"kind": "run_command", "argv": ["echo", "hi"]}])
    result = run.step().tool_result
    assert result is not None and result.ok, result
    assert result.content == "hi\n" and result.data["timeout"] == run.sandbox.policy.timeouts["default"]
