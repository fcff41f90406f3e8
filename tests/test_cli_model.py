"""`harness-lab run/resume --model`: the flags, where the endpoint and key come from, and a model run that
parks at a human gate and is resumed with --model.

STAND-IN: the endpoint is a local 127.0.0.1 server answering hand-written chat completions in order (not a
model; tests/model/ drives the real one). It checks that the key arrives only as a bearer header."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from jsonpost import JsonPostServer

from harness_lab.cli import main

KEY = "sk-cli-DO-NOT-LEAK-5d2e"
REPORT = (Path(__file__).resolve().parents[1] / "data" / "reports" / "conforming.md").read_text(encoding="utf-8")


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "chat.completion", "model": "stand-in",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": "call-1", "type": "function",
                                "function": {"name": name, "arguments": json.dumps(arguments)}}]}}],
            "usage": {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100}}


class StandIn(JsonPostServer):
    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies, self.auth = list(replies), []
        super().__init__(self._answer)
        self.start()

    def _answer(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        self.auth.append(headers.get("Authorization"))
        reply = self.replies.pop(0) if self.replies else {"error": "no reply queued"}
        return (200 if "choices" in reply else 500), reply


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn([
        _call("read_evidence", id="harness-boundary"),
        _call("push", branch="main"),  # gated: the run parks, the CLI returns
        _call("read_evidence", id="acceptance-snapshot"),
        _call("write_report", text=REPORT),
        _call("finish"),
    ])
    yield server
    server.close()


@pytest.fixture
def model_env(monkeypatch: pytest.MonkeyPatch, stand_in: StandIn, own_tmp: Path) -> StandIn:
    for name in ("BASE_URL", "MODEL", "API_KEY"):
        monkeypatch.delenv(f"HARNESS_LAB_OPENAI_{name}", raising=False)
    monkeypatch.setenv("HARNESS_LAB_OPENAI_BASE_URL", stand_in.url)
    monkeypatch.setenv("HARNESS_LAB_OPENAI_MODEL", "stand-in")
    monkeypatch.setenv("MY_KEY", KEY)
    return stand_in


def test_a_model_run_parks_at_a_gate_and_resume_needs_model_to_go_on(model_env: StandIn, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "runs.sqlite")
    assert main(["run", "conforming_report", "--model", "--api-key-env", "MY_KEY", "--db", db, "--run-id", "R",
                 "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["proposal"]["action"]["kind"] for s in lines[:-1]] == ["read_evidence", "push"]
    assert lines[-1]["final_state"] == "WAITING_FOR_HUMAN" and lines[-1]["tokens"] == 200

    # the run was a model's: a resume without --model would need the script it does not have
    assert main(["resume", "--db", db, "--run-id", "R"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "driven by a model: resume it with --model" in err

    assert main(["resume", "--db", db, "--run-id", "R", "--model", "--api-key-env", "MY_KEY",
                 "--gate-policy", "approve"]) == 0
    out, err = capsys.readouterr()
    steps = out.splitlines()
    assert "resumed: " in err and steps[0].startswith("step 3: push") and "approved by policy:approve" in steps[0]
    assert [s.split(":")[1].split("(")[0].strip() for s in steps[1:4]] == ["read_evidence", "write_report", "finish"]
    assert steps[-2].startswith("final: REVIEW_READY")
    assert steps[-1].startswith("usage: 5 decisions, ") and " 500 tokens" in steps[-1]
    assert model_env.auth == [f"Bearer {KEY}"] * 5 and model_env.replies == []
    assert KEY not in out + err
    assert main(["trace", "--db", db, "--run-id", "R"]) == 0
    assert KEY not in capsys.readouterr().out
    assert not any(KEY.encode() in p.read_bytes() for p in tmp_path.glob("runs.sqlite*"))


def test_a_scripted_run_is_not_resumed_with_a_model(model_env: StandIn, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "runs.sqlite")
    assert main(["run", "conforming_report", "--db", db, "--run-id", "S"]) == 0
    capsys.readouterr()
    assert main(["resume", "--db", db, "--run-id", "S", "--model"]) == 2
    assert "is scripted: resume it without --model" in capsys.readouterr().err
    assert model_env.auth == []


@pytest.mark.parametrize(("argv", "says"), [
    (["--base-url", "http://127.0.0.1:1/v1"], "--base-url: only with --model"),
    (["--api-key-env", "MY_KEY"], "--api-key-env: only with --model"),
    (["--model", "--api-key-env", "NOT_SET_ANYWHERE"], "--api-key-env: NOT_SET_ANYWHERE is not set"),
    (["--model", "--base-url", "ftp://x"], "is not an http(s) URL"),
])
def test_model_flags_are_checked_before_anything_runs(model_env: StandIn, argv: list[str], says: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "conforming_report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and KEY not in err
    assert model_env.auth == []


def test_model_without_an_endpoint_says_where_it_comes_from(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("BASE_URL", "MODEL", "API_KEY"):
        monkeypatch.delenv(f"HARNESS_LAB_OPENAI_{name}", raising=False)
    assert main(["run", "conforming_report", "--model"]) == 2
    err = capsys.readouterr().err
    assert "HARNESS_LAB_OPENAI_BASE_URL (or --base-url)" in err and "HARNESS_LAB_OPENAI_MODEL (or --model-name)" in err
    assert "harness-lab model serve" in err


def test_flags_override_the_environment(model_env: StandIn, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HARNESS_LAB_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    monkeypatch.setenv("HARNESS_LAB_OPENAI_API_KEY", "wrong-key")
    model_env.replies[1:] = [_call("finish")]
    assert main(["run", "conforming_report", "--model", "--base-url", model_env.url, "--model-name", "stand-in",
                 "--api-key-env", "MY_KEY", "--no-validation", "--json"]) == 0
    final = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (final["final_state"], final["tokens"]) == ("REVIEW_READY", 200)
    assert model_env.auth == [f"Bearer {KEY}"] * 2
