"""Recording a proposer's exchanges with an endpoint and replaying them without it (lesson 7's transcript).

Against a STAND-IN chat server (tests/standin_chat.py: scripted replies, not a model): a run recorded
through ``RecordingTransport`` and the same run replayed through ``TranscriptTransport`` make the same
step records; the key is in no byte of the saved file; a request the recording was not asked is reported
(``diverged_at``, ``note()``), never refused; what the recording met (a refused connection, no reply
left) is met again as the endpoint's failure, not the model's."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from standin_chat import KEY, StandInChat

from harness_lab import EvidenceCatalogue, FakeClock, Run, RunState
from harness_lab.contract import ControlContract
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer, urllib_transport
from harness_lab.proposers.transcript import MASK, RecordingTransport, TranscriptTransport

SETTINGS: dict[str, Any] = {"max_tokens": 160, "tool_choice": "required", "temperature": 1.0, "max_retries": 1}


def _run(contract: ControlContract, evidence: EvidenceCatalogue, url: str, transport: Any, tmp_path: Path,
         name: str, *, clock: FakeClock | None = None, key: str | None = KEY, **settings: Any) -> Run:
    config = OpenAICompatConfig(base_url=url, model="standin", api_key=key, **{**SETTINGS, **settings})
    proposer = OpenAICompatProposer(config, transport=transport, sleep=lambda s: None)
    return Run(contract=contract.with_budget(max_decisions=12, max_tool_calls=8, max_tokens=6000), proposer=proposer,
               evidence=evidence, clock=clock or FakeClock(), run_id="transcript", workspace=tmp_path / name)


def _records(run: Run, *, elapsed: bool = True) -> list[dict[str, Any]]:
    records = [r.model_dump(mode="json") for r in run.records]
    if not elapsed:  # a replay whose clock moves by the recorded latencies: the recording's own clock stood still
        for r in records:
            r["usage"].pop("elapsed_s")
    return records


@pytest.fixture
def recorded(contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path) -> tuple[Path, list[dict[str, Any]], Run]:
    with StandInChat() as server:
        recorder = RecordingTransport(urllib_transport, metadata={"model": "standin"})
        recorder.section("main")
        run = _run(contract, evidence, server.url, recorder, tmp_path, "live")
        run.run()
        path = recorder.save(tmp_path / "transcript.json")
        run.close()
    return path, _records(run), run


def test_a_replayed_run_makes_the_same_records_as_the_recorded_one(recorded, contract, evidence, tmp_path) -> None:
    path, live_records, live = recorded
    assert live.state is RunState.EXHAUSTED and len(live_records) > 8  # refusals, a finish, a loop hint, a stop
    replay = TranscriptTransport(path)
    replay.section("main")
    again = _run(contract, evidence, "http://127.0.0.1:9/v1", replay, tmp_path, "replay")  # nothing listens: unused
    again.run()
    assert _records(again) == live_records
    assert (again.state, again.stop_reason, again.usage) == (live.state, live.stop_reason, live.usage)
    assert replay.diverged_at is None and replay.remaining == 0
    assert "byte-identical" in replay.note()
    # the run was charged exactly the usage the (recorded) server reported
    assert again.usage.tokens == sum(e.total_tokens or 0 for e in replay.exchanges)
    again.close()


def test_the_key_is_in_no_byte_of_the_transcript(recorded) -> None:
    path, _, _ = recorded
    raw = path.read_bytes()
    assert KEY.encode() not in raw and b"Bearer" not in raw and b"Authorization" not in raw
    data = json.loads(raw)
    assert data["exchanges"] and all(len(e["request_sha256"]) == 64 for e in data["exchanges"])
    assert all(e["request"]["tools"] == {"$shared": next(iter(data["shared"]))}
               for e in data["exchanges"] if "$same_as" not in e["request"])


def test_a_key_the_server_echoes_is_masked_and_never_written(tmp_path: Path) -> None:
    key = "sk-echo-SECRET-31337"

    def echoing(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        return 401, json.dumps({"error": f"invalid key {headers['Authorization']} for {key}"}).encode()

    recorder = RecordingTransport(echoing, metadata={"note": f"started with {key}"})
    status, reply = recorder("http://127.0.0.1:1/v1/chat/completions", b'{"model": "m", "messages": []}',
                             {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}, 5.0)
    assert status == 401 and key.encode() in reply  # the caller still gets what the server said
    text = recorder.save(tmp_path / "t.json").read_text()
    assert key not in text and MASK in text
    assert "Authorization" not in text


def test_a_divergent_request_is_reported_and_still_answered(recorded, contract, evidence, tmp_path) -> None:
    path, live_records, _ = recorded
    replay = TranscriptTransport(path)
    replay.section("main")
    # a different reply cap: every request differs from the recorded ones in max_tokens
    changed = _run(contract, evidence, "http://127.0.0.1:9/v1", replay, tmp_path, "changed", max_tokens=100)
    first = changed.step()  # no exception: the recorded reply is returned
    assert replay.diverged_at == 0
    assert "max_tokens" in replay.divergences[0].detail
    assert first.decision.verdict == live_records[0]["decision"]["verdict"]
    assert "diverged" in replay.note() and "re-record" in replay.note()
    changed.close()


def test_a_call_past_the_recording_is_an_endpoint_failure_not_a_reply(recorded, contract, evidence, tmp_path) -> None:
    path, _, _ = recorded
    data = json.loads(path.read_text())
    data["exchanges"] = data["exchanges"][:2]
    replay = TranscriptTransport(data)
    replay.section("main")
    run = _run(contract, evidence, "http://127.0.0.1:9/v1", replay, tmp_path, "short")
    run.run()
    assert run.state is RunState.WAITING_FOR_ENDPOINT and run.stop_reason is not None
    assert run.usage.decisions == 2, "the two recorded replies were decided; nothing after them was charged"
    assert replay.diverged_at == 2 and "no recorded exchange left" in replay.divergences[0].detail
    run.close()


def test_a_refused_connection_is_recorded_and_raised_again_on_replay(contract, evidence, tmp_path) -> None:
    recorder = RecordingTransport(urllib_transport)
    recorder.section("down")
    down = _run(contract, evidence, "http://127.0.0.1:9/v1", recorder, tmp_path, "down")  # port 9: nothing listens
    assert down.run() is RunState.WAITING_FOR_ENDPOINT
    path = recorder.save(tmp_path / "down.json")
    clock = FakeClock()
    replay = TranscriptTransport(path, clock=clock)
    replay.section("down")
    again = _run(contract, evidence, "http://127.0.0.1:9/v1", replay, tmp_path, "down-again", clock=clock)
    assert again.run() is RunState.WAITING_FOR_ENDPOINT
    assert _records(again, elapsed=False) == _records(down, elapsed=False)
    assert {e.error["type"] for e in replay.exchanges if e.error} == {"ConnectionRefusedError"}
    assert (again.usage.decisions, again.usage.tokens) == (0, 0)
    assert clock.now() == pytest.approx(sum(replay.latencies)), "the replay's clock moved by the recorded latencies"
    down.close()
    again.close()


def test_sections_keep_a_short_section_from_shifting_the_next(tmp_path: Path) -> None:
    def answer(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        return 200, body  # echo: each reply names its request

    recorder = RecordingTransport(answer)
    recorder.section("a")
    for n in range(3):
        recorder("http://x/v1/chat/completions", f'{{"n": {n}}}'.encode(), {}, 1.0)
    recorder.section("b")
    recorder("http://x/v1/chat/completions", b'{"n": "b"}', {}, 1.0)
    replay = TranscriptTransport(recorder.save(tmp_path / "s.json"))
    replay.section("a")
    replay("http://x/v1/chat/completions", b'{"n": 0}', {}, 1.0)  # one call of three
    replay.section("b")
    assert replay("http://x/v1/chat/completions", b'{"n": "b"}', {}, 1.0) == (200, b'{"n": "b"}')
    assert replay.diverged_at == 1 and "2 call(s) fewer" in replay.divergences[0].detail
    # asking past a section's end gets no reply of the next section
    replay.section("a")
    for n in range(3):
        replay("http://x/v1/chat/completions", f'{{"n": {n}}}'.encode(), {}, 1.0)
    assert replay("http://x/v1/chat/completions", b'{"n": 3}', {}, 1.0)[0] == 503


def test_reply_bytes_that_are_not_utf8_round_trip(tmp_path: Path) -> None:
    recorder = RecordingTransport(lambda url, body, headers, timeout: (200, b"\xff\xfe not text"))
    recorder("http://x/v1/chat/completions", b"{}", {}, 1.0)
    replay = TranscriptTransport(recorder.save(tmp_path / "b.json"))
    assert replay("http://x/v1/chat/completions", b"{}", {}, 1.0) == (200, b"\xff\xfe not text")
    assert replay.diverged_at is None


def test_a_transcript_of_another_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format"):
        TranscriptTransport({"format": 99, "exchanges": []})


def test_the_shipped_lesson_transcript_is_small_keyless_and_names_its_server() -> None:
    from harness_lab.paths import data_dir

    path = data_dir() / "transcripts" / "07_real_model.json"
    raw = path.read_bytes()
    assert len(raw) < 200 * 1024
    assert b"Bearer" not in raw and b"Authorization" not in raw
    replay = TranscriptTransport(path)
    meta = replay.metadata
    assert meta["model"] == "SmolLM2-135M-Instruct" and "llama-server" in meta["server_version"]
    assert meta["server"]["gguf_sha256"] and meta["recorded_at"]
    # recorded with the chat template the repository ships: a changed template needs a new recording
    template = data_dir() / "model" / meta["server"]["chat_template"]
    assert hashlib.sha256(template.read_bytes()).hexdigest() == meta["server"]["chat_template_sha256"]
    assert set(replay.sections) == {"run 1", "run 2", "run 3", "run 4", "endpoint"}
    assert any(e.status == 200 for e in replay.recorded) and any(e.error for e in replay.recorded)
