"""A real model drives the lab end to end: SmolLM2-135M-Instruct served by llama.cpp's llama-server
(built by ``make model``), through ``OpenAICompatProposer`` over HTTP on 127.0.0.1.

Not a stand-in: every proposal here is a tool call the model generated. What is asserted is the
harness's side, whatever the model proposes: its tool calls are parsed and executed, the server's
``usage.total_tokens`` is what the run is charged, the run ends in a terminal state for a reason of the
harness (not a proposer or endpoint failure), and the API key is nowhere in the store, the trace or a repr.
What the model achieves is recorded (test-artifacts/real-model.json), not asserted: a 135M model rarely
writes a report that passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from modelhelpers import RecordingTransport

from harness_lab.loop.run import Run
from harness_lab.proposers import local_model
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer
from harness_lab.records.events import StepRecord
from harness_lab.store import SQLiteStore

pytestmark = pytest.mark.model

# The report task's contract fits all three: a report to write, evidence to read, a budget to spend.
SCENARIOS = ["conforming_report", "missing_limitations", "endless_tool_calls"]
MAX_TOKENS = 256  # a reply's output cap: a runaway argument costs seconds, not minutes
NOT_HARNESS_STOPS = {"proposer_error", "endpoint_unavailable"}


def _proposer(server: local_model.LocalModelServer, transport: RecordingTransport) -> OpenAICompatProposer:
    config = OpenAICompatConfig(base_url=server.base_url, model=server.model, api_key=server.api_key,
                                temperature=0.0, max_tokens=MAX_TOKENS, tool_choice=local_model.TOOL_CHOICE)
    return OpenAICompatProposer(config, transport=transport)


def _executed_model_calls(records: list[StepRecord], transport: RecordingTransport) -> list[StepRecord]:
    """Steps that executed a tool call, each matched to a tool call (name and arguments) a server reply held."""
    made = [{**json.loads(call["function"]["arguments"] or "{}"), "kind": call["function"]["name"]}
            for reply in transport.replies for call in reply.tool_calls[:1]
            if _is_json_object(call["function"].get("arguments"))]
    executed = []
    for record in records:
        if record.tool_result is None or record.proposal is None or record.proposal.action is None:
            continue
        raw = {k: v for k, v in dict(record.proposal.raw).items() if k != "other_tool_calls"}
        assert raw in made, f"step {record.step} executed {raw}, which no server reply proposed"
        executed.append(record)
    return executed


def _is_json_object(text: object) -> bool:
    try:
        return isinstance(json.loads(text), dict) if isinstance(text, str) else False
    except ValueError:
        return False


def _store_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.glob(db.name + "*")))


def _figures(scenario: str, run: Run, transport: RecordingTransport, executed: int,
             server_start: float | None = None) -> dict[str, Any]:
    return {
        "scenario": scenario, "final_state": run.state.value,
        "stop_reason": run.stop_reason.code if run.stop_reason else None,
        "steps": run.step_no, "decisions": run.usage.decisions, "tool_calls": run.usage.tool_calls,
        "executed_model_tool_calls": executed, "tokens": run.usage.tokens,
        "call_seconds": [round(r.seconds, 3) for r in transport.replies],
        "call_tokens": [r.total_tokens for r in transport.replies],
        "http_statuses": [r.status for r in transport.replies],
        "receipt": run.receipt is not None,
        "server_started_in_s": server_start,
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_model_drives_a_scenario_to_a_terminal_state(scenario: str, model_server: local_model.LocalModelServer,
                                                         recorder: RecordingTransport, tmp_path: Path,
                                                         model_figures: list[dict[str, Any]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    key = model_server.api_key
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    proposer = _proposer(model_server, recorder)
    try:
        run = Run.from_scenario(scenario, proposer=proposer, store=store, workspace=tmp_path / "ws",
                                run_id=f"model-{scenario}")
        run.run()
        records = list(run.records)
        reprs = repr(run) + repr(proposer) + repr(proposer._config) + repr(model_server) + repr(run.usage)
        executed = _executed_model_calls(records, recorder)
        model_figures.append(_figures(scenario, run, recorder, len(executed), model_server.started_in_s))
        run.close()
    finally:
        store.close()

    # the model's tool calls were parsed and executed by the harness
    assert executed, f"no step executed a tool call of the model: {[r.summary() for r in records]}"
    # the server's token counts are what the run was charged, no more, no less
    assert recorder.replies and all(r.status == 200 for r in recorder.replies)
    assert run.usage.tokens == sum(r.total_tokens for r in recorder.replies) > 0
    # a terminal state, stopped by the harness's rules, not by a failing proposer or endpoint
    assert run.state.terminal, f"{run.state.value}: {run.stop_reason}"
    assert run.stop_reason is not None and run.stop_reason.code not in NOT_HARNESS_STOPS
    # the key is in no store byte, no trace line, no repr
    assert key.encode() not in _store_bytes(db)
    assert key not in reprs and key not in "".join(r.model_dump_json() for r in records)
    from harness_lab.cli import main

    assert main(["trace", "--db", str(db), "--run-id", f"model-{scenario}"]) == 0
    trace = capsys.readouterr().out
    assert trace.count("\n") == len(records) and key not in trace


def test_the_cli_runs_a_scenario_with_the_model_then_traces_and_replays_it(
        model_server: local_model.LocalModelServer, tmp_path: Path, model_figures: list[dict[str, Any]]) -> None:
    """`harness-lab run SCENARIO --model --db X` in a process of its own, the key read from a variable that
    `--api-key-env` names (so it is on no command line), then `trace` and `replay` of the stored run."""
    key = model_server.api_key
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_LAB_OPENAI_")}
    env.update(HARNESS_LAB_OPENAI_BASE_URL=model_server.base_url, HARNESS_LAB_OPENAI_MODEL=model_server.model,
               HARNESS_LAB_OPENAI_MAX_TOKENS=str(MAX_TOKENS), HARNESS_LAB_OPENAI_TOOL_CHOICE=local_model.TOOL_CHOICE,
               LAB_MODEL_KEY=key, TMPDIR=str(tmp_path))
    cli = [sys.executable, "-m", "harness_lab.cli"]
    db = tmp_path / "runs.sqlite"

    def harness_lab(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [*cli, *args]
        assert key not in " ".join(argv)
        return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    started = time.monotonic()
    ran = harness_lab("run", "missing_section_then_fixed", "--model", "--api-key-env", "LAB_MODEL_KEY",
                      "--db", str(db), "--run-id", "cli-model")
    seconds = time.monotonic() - started
    assert ran.returncode == 0, ran.stderr[-2000:]
    steps, final, usage = ran.stdout.splitlines()[:-2], ran.stdout.splitlines()[-2], ran.stdout.splitlines()[-1]
    assert steps and all(line.startswith("step ") for line in steps)
    assert final.startswith("final: ") and not any(code in final for code in NOT_HARNESS_STOPS)
    assert final.split()[1] in ("REVIEW_READY", "BLOCKED", "EXHAUSTED"), final
    assert usage.startswith("usage: ") and " 0 tokens" not in usage
    model_figures.append({"scenario": "missing_section_then_fixed (CLI)", "final": final, "usage": usage,
                          "process_seconds": round(seconds, 1)})

    traced = harness_lab("trace", "--db", str(db), "--run-id", "cli-model")
    assert traced.returncode == 0 and traced.stdout.splitlines() == steps  # the stored trace is what it printed
    replayed = harness_lab("replay", "--db", str(db), "--run-id", "cli-model")
    # the recorded proposals, re-run through the harness: the same decisions and states, no model needed
    assert replayed.returncode == 0 and replayed.stdout.startswith("identical: "), replayed.stdout + replayed.stderr
    for out in (ran, traced, replayed):
        assert key not in out.stdout + out.stderr
    assert key.encode() not in _store_bytes(db)


def test_a_model_run_stopped_after_two_steps_is_resumed_with_resume_model(
        model_server: local_model.LocalModelServer, recorder: RecordingTransport, tmp_path: Path) -> None:
    """Two steps in this process with a store, then `harness-lab resume --model` in another one goes on from
    the checkpoint with the same server: it asks the model again (more tokens charged) and ends the run."""
    key = model_server.api_key
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    try:
        run = Run.from_scenario("conforming_report", proposer=_proposer(model_server, recorder), store=store,
                                workspace=tmp_path / "ws", run_id="resumed")
        run.step()
        run.step()
        assert not run.state.terminal and len(recorder.replies) == 2
        tokens_before = run.usage.tokens
    finally:
        store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_LAB_OPENAI_")}
    env.update(model_server.env(), HARNESS_LAB_OPENAI_MAX_TOKENS=str(MAX_TOKENS), TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "harness_lab.cli", "resume", "--db", str(db), "--run-id", "resumed",
                           "--model", "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.startswith("resumed: ") and key not in done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    steps, final = lines[:-1], lines[-1]
    assert [s["step"] for s in steps] == list(range(3, 3 + len(steps))) and steps  # on from the checkpoint
    assert final["final_state"] in ("REVIEW_READY", "BLOCKED", "EXHAUSTED")
    assert final["stop_reason"] not in NOT_HARNESS_STOPS
    assert final["tokens"] > tokens_before  # the resumed process asked the model and was charged for it
    assert key.encode() not in _store_bytes(db)
