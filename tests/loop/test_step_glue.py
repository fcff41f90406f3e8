"""The step's shortcuts decide what the long forms decided: the gate's set of plain tool types still
lets a subclass of ``finish`` or of a forbidden action through to its own check, and the workspace
hash the scanner keeps spelled follows every change of the tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loophelpers import READ_A, READ_B, contract, evidence, make_run

from harness_lab.clock import FakeClock
from harness_lab.loop.run import Run
from harness_lab.proposers import FunctionProposer
from harness_lab.records.actions import Finish, ForbiddenAction
from harness_lab.records.events import Usage
from harness_lab.records.proposal import Proposal
from harness_lab.sandbox.mhash import manifest_hash


class _MyFinish(Finish):
    """A finish of the caller's own (not among the parser's models)."""


class _MyForbidden(ForbiddenAction):
    """A forbidden action of the caller's own."""


def _run_proposing(tmp_path: Path, proposal: Proposal) -> Run:
    return Run(contract=contract(), evidence=evidence(), proposer=FunctionProposer(lambda view: proposal),
               workspace=tmp_path / "ws")


def test_a_subclass_of_finish_is_validated_as_a_finish(tmp_path: Path) -> None:
    with _run_proposing(tmp_path, Proposal(raw={"kind": "finish"}, action=_MyFinish())) as run:
        record = run.step()
    assert record.decision.verdict == "validate"
    assert record.tool_result is None


def test_a_subclass_of_a_forbidden_action_is_blocked(tmp_path: Path) -> None:
    action = _MyForbidden(requested_kind="set_state", args={})
    with _run_proposing(tmp_path, Proposal(raw={"kind": "set_state"}, action=action)) as run:
        record = run.step()
    assert record.decision.verdict == "block"
    assert record.state_after.value == "BLOCKED"
    assert run.stop_reason is not None and run.stop_reason.code == "forbidden_action"


def test_the_kept_workspace_hash_follows_every_change(tmp_path: Path) -> None:
    think: dict[str, Any] = {"kind": "think", "thought": "wait"}
    with _run_proposing(tmp_path, Proposal(raw=think)) as run:
        sandbox = run.sandbox
        seen = [sandbox.workspace_hash()]
        for content in (b"one", b"two", b"one"):
            (run.workspace / "f.txt").write_bytes(content)
            seen.append(sandbox.workspace_hash())
            assert seen[-1] == sandbox.workspace_hash()  # asked twice, unchanged: the kept spelling
            assert seen[-1] == manifest_hash(sandbox.manifest())
        (run.workspace / "f.txt").unlink()
        seen.append(sandbox.workspace_hash())
    assert seen[1] != seen[0] and seen[2] != seen[1]
    assert seen[3] == seen[1] and seen[4] == seen[0]  # back to the same tree: the same hash


def test_usage_is_made_again_when_any_counter_moved(tmp_path: Path) -> None:
    clock = FakeClock(tick=0.25)
    with make_run(tmp_path, [READ_A, READ_B], clock=clock) as run:
        assert run.usage == Usage(decisions=0, tool_calls=0, tokens=0, elapsed_s=0.0)
        run.step()
        first = run.usage
        assert (first.decisions, first.tool_calls) == (1, 1) and first.tokens > 0 and first.elapsed_s > 0
        assert run.usage is first and run.records[-1].usage is first  # nothing moved: the same record
        run.step()
        second = run.usage
        assert (second.decisions, second.tool_calls) == (2, 2) and second.tokens > first.tokens
        run.halt("stop", "enough")  # no decision, no tool call, no token: only the clock moved
        third = run.usage
        assert third.elapsed_s > second.elapsed_s
        assert (third.decisions, third.tool_calls, third.tokens) == (second.decisions, second.tool_calls,
                                                                     second.tokens)
        assert run.records[-1].usage == third
