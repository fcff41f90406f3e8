"""The endpoint behind a proposer fails, not the model: recorded as an endpoint event, never shown to
the model, never charged as a decision; a few in a row park the run WAITING_FOR_ENDPOINT, from which a
later step or a resume goes on (issue 16)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_lab import Run
from harness_lab.context import ContextView
from harness_lab.persistence.replay import replay_run
from harness_lab.proposers import EndpointFailure, ProposerOutput, ScriptedProposer
from harness_lab.records.events import Note, StepRecord
from harness_lab.records.states import RunState
from harness_lab.records.tool_specs import tool_names
from harness_lab.scenarios import load_scenario
from harness_lab.store import SQLiteStore

DOWN = EndpointFailure(reason="HTTP 503: model is loading", status=503, attempts=3)
WRONG_KEY = EndpointFailure(reason="HTTP 401: invalid api key", status=401, attempts=1, retryable=False)


class Flaky:
    """The conforming script, with the endpoint failing on the calls numbered in ``down`` (from 1)."""

    def __init__(self, down: set[int], failure: EndpointFailure = DOWN) -> None:
        scenario = load_scenario("conforming_report")
        self.script = ScriptedProposer(scenario.actions, then=scenario.then)
        self.down, self.failure, self.calls = down, failure, 0
        self.views: list[str] = []

    def propose(self, view: ContextView) -> object:
        self.calls += 1
        self.views.append(view.render())
        if self.calls in self.down:
            return self.failure
        return self.script.propose(view)

    def state(self) -> dict[str, Any]:
        return self.script.state()

    def restore(self, state: dict[str, Any]) -> None:
        self.script.restore(state)


def _failures(record: StepRecord) -> list[Note]:
    return [e for e in record.events if isinstance(e, Note) and e.topic == "endpoint_failure"]


def test_an_endpoint_failure_is_an_event_not_a_decision_and_not_shown_to_the_model(tmp_path: Path) -> None:
    proposer = Flaky(down={2})
    run = Run.from_scenario("conforming_report", proposer=proposer, workspace=tmp_path / "ws")
    run.step()
    failed = run.step()
    assert failed.proposal is None and failed.decision.verdict == "unavailable"
    assert failed.decision.reason == DOWN.reason and failed.state_after is RunState.RUNNING
    (note,) = _failures(failed)
    assert note.data == {"status": 503, "attempts": 3, "retryable": True, "consecutive": 1}
    assert run.usage.decisions == 1 and run.usage.tool_calls == 1, "the failed step charged nothing"
    assert run.run() is RunState.REVIEW_READY
    assert run.usage.decisions == 4, "four decisions: two reads, the report, finish"
    assert not any("model is loading" in v for v in proposer.views), "the failure never reached the model"


def test_three_failures_in_a_row_park_the_run_and_a_later_step_goes_on(tmp_path: Path) -> None:
    proposer = Flaky(down={2, 3, 4})
    run = Run.from_scenario("conforming_report", proposer=proposer, workspace=tmp_path / "ws")
    assert run.run() is RunState.WAITING_FOR_ENDPOINT
    assert [r.decision.verdict for r in run.records] == ["execute", "unavailable", "unavailable", "unavailable"]
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    assert "3 time(s) in a row" in run.stop_reason.message
    assert not run.step_due and run.run() is RunState.WAITING_FOR_ENDPOINT and proposer.calls == 4, \
        "run() does not hammer a failed endpoint"
    # The caller drives: an explicit step asks again; the endpoint answers, the run goes on.
    back = run.step()
    assert back.state_before is RunState.WAITING_FOR_ENDPOINT and back.decision.verdict == "execute"
    assert run.stop_reason is None and run.state is RunState.RUNNING
    assert run.run() is RunState.REVIEW_READY and run.usage.decisions == 4


def test_a_failure_asking_again_cannot_heal_parks_the_run_at_once(tmp_path: Path) -> None:
    proposer = Flaky(down=set(range(1, 100)), failure=WRONG_KEY)
    run = Run.from_scenario("conforming_report", proposer=proposer, workspace=tmp_path / "ws")
    assert run.run() is RunState.WAITING_FOR_ENDPOINT and proposer.calls == 1
    assert run.stop_reason is not None and "HTTP 401" in run.stop_reason.message
    again = run.step()  # still failing: the run stays where it is, one more event
    assert again.state_after is RunState.WAITING_FOR_ENDPOINT and _failures(again)[0].data["consecutive"] == 2


def test_pending_shows_no_proposal_when_the_endpoint_failed_and_the_step_records_it_once(tmp_path: Path) -> None:
    proposer = Flaky(down={1})
    run = Run.from_scenario("conforming_report", proposer=proposer, workspace=tmp_path / "ws")
    assert run.pending is None and proposer.calls == 1
    record = run.step()
    assert record.decision.verdict == "unavailable" and proposer.calls == 1, "the failure seen by pending is recorded"
    assert run.pending is not None and run.pending.raw["kind"] == "read_evidence"


def test_a_waiting_run_resumes_from_its_checkpoint_and_replays_identically(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = Run.from_scenario("conforming_report", proposer=Flaky(down={3, 4, 5}), workspace=tmp_path / "ws",
                            store=store, run_id="R1")
    assert run.run() is RunState.WAITING_FOR_ENDPOINT
    store.close()
    store = SQLiteStore(db, create=False)
    try:
        # A new process: the endpoint is asked afresh, and answers.
        resumed = Run.resume(store, "R1", proposer=Flaky(down=set()))
        assert resumed.resume_report is not None and resumed.resume_report.ok
        assert resumed.state is RunState.WAITING_FOR_ENDPOINT and resumed.step_due
        assert resumed.run() is RunState.REVIEW_READY
        assert resumed.usage.decisions == 4 and resumed.receipt is not None
        replay = replay_run(store, "R1", workspace=tmp_path / "replay")
        assert replay.identical, replay.detail
        replay.run.close()
        resumed.close()
    finally:
        store.close()
    run.close()


def test_the_model_is_told_exactly_the_tools_it_is_sent(tmp_path: Path) -> None:
    run = Run.from_scenario("conforming_report", workspace=tmp_path / "ws")
    system = run.context.view().render()
    listed = system.split("Tools: ", 1)[1].split(". ", 1)[0]
    assert [entry.split("(")[0] for entry in listed.split("), ")] == list(tool_names())
    assert "delete_file" in tool_names()


def test_the_view_tells_a_proposer_what_is_left_of_the_token_budget(tmp_path: Path) -> None:
    seen: list[int | None] = []

    def charge(view: ContextView) -> ProposerOutput:
        seen.append(view.tokens_left)
        return ProposerOutput(raw={"kind": "think", "thought": f"t{len(seen)}"}, tokens=400)

    from harness_lab.contract import load_contract
    from harness_lab.evidence import EvidenceCatalogue
    from harness_lab.paths import data_dir
    from harness_lab.proposers import FunctionProposer

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_tokens=1000)
    run = Run(contract=contract, proposer=FunctionProposer(charge), evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"),
              workspace=tmp_path / "ws")
    run.run()
    assert seen == [1000, 600, 200] and run.stop_reason is not None and run.stop_reason.code == "token_budget"


@pytest.mark.parametrize("bad", [{"reason": ""}, {"reason": "x", "attempts": 0}, {"reason": "x", "attempts": True}])
def test_an_endpoint_failure_needs_a_reason_and_a_count(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="EndpointFailure"):
        EndpointFailure(**bad)


def test_the_external_loop_retries_an_unavailable_endpoint_once_then_blocks(tmp_path: Path) -> None:
    from harness_lab.loop.scheduler import ExternalLoop
    from harness_lab.records.states import LoopState

    run = Run.from_scenario("conforming_report", proposer=Flaky(down=set(range(2, 100))), workspace=tmp_path / "ws")
    loop = ExternalLoop(run)
    first = loop.round()
    assert first.state_after is LoopState.READY and first.root_cause is not None
    assert first.root_cause.startswith("endpoint_unavailable")
    second = loop.round()  # the same root cause twice: blocked, with the decision a person must make
    assert second.state_after is LoopState.BLOCKED and "same root cause failed twice" in second.why
    assert run.state is RunState.WAITING_FOR_ENDPOINT and run.usage.decisions == 1


def test_a_model_run_stopped_by_its_token_budget_replays_identically(tmp_path: Path) -> None:
    """Replay charges each step what the saved step was charged (the endpoint's count), not a recount."""
    from harness_lab.contract import load_contract
    from harness_lab.evidence import EvidenceCatalogue
    from harness_lab.paths import data_dir
    from harness_lab.proposers import FunctionProposer

    def model(view: ContextView) -> ProposerOutput:
        return ProposerOutput(raw={"kind": "list_dir", "path": f"d{view.total_tokens % 7}"}, tokens=1500)

    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_tokens=4000)
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run(contract=contract, proposer=FunctionProposer(model), evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"),
              workspace=tmp_path / "ws", store=store, run_id="M1")
    try:
        assert run.run() is RunState.EXHAUSTED and run.stop_reason is not None
        assert run.stop_reason.code == "token_budget" and run.usage.tokens == 4500
        replay = replay_run(store, "M1", workspace=tmp_path / "replay")
        assert replay.identical, replay.detail
        assert replay.run.usage.tokens == 4500
        replay.run.close()
    finally:
        run.close()
        store.close()
