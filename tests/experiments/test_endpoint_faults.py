"""Endpoint faults against a server no one here wrote: LLMock (``llmock==0.2.2`` from PyPI, pinned in the
``test`` extra), a maintained mock of the OpenAI chat-completions API built for fault injection, started
as a subprocess on 127.0.0.1 and scripted through its own control API (``POST /_llmock/scenario``).

How each fault is made, and the ending it must have (notes/ENDPOINT_API.md):

========================  =================================================  ==================================
fault                     made by                                            ending
========================  =================================================  ==================================
500 then success          LLMock ``fail 500`` once, then a scripted call     retried inside the call, no
                                                                             endpoint event; the run goes on
500 past the retries      ``fail 500`` twice (max_retries=1)                 one endpoint-failure step, then on
constant 500              ``fail 500`` for ever                              WAITING_FOR_ENDPOINT, resumable
down                      no server: a loopback port nothing listens on      WAITING_FOR_ENDPOINT, resumable
wrong key                 ``fail 401 invalid_api_key``, the message echoing  WAITING_FOR_ENDPOINT after one
                          the key as OpenAI's does (LLMock checks no key;    call, not retried; resumable
                          llama.cpp's ``llama-server --api-key`` does: the
                          test below it, when the local model is built)
slow first byte           ``delay`` (nothing, not even a status line) and    the call ends at its deadline
                          ``slow_first_token`` (a stream's headers, then
                          nothing)
drip-fed body             a stream paced by ``--stream-chunk-delay-ms``:     the call ends at its deadline,
                          each gap well inside the timeout, the whole far    not at the last byte
                          beyond it
prose reply               a scripted reply with text and no tool call        the model's: refused, fed back,
                                                                             charged
two tool calls            a scripted reply with two tool calls               the first runs, the second is a
                                                                             ``claims_ignored`` claim
arguments not JSON        ``tool_fault malformed_arguments`` (LLMock cuts    the model's: refused, fed back,
                          the JSON in half)                                  charged
========================  =================================================  ==================================

Every test also checks that no traceback reaches the run's records, its store or its trace, and that the
API key appears in none of them. Backoff sleeps are recorded instead of slept; deadlines are real.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_lab import cli
from harness_lab.contract import ControlContract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.run import Run
from harness_lab.paths import data_dir
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer
from harness_lab.records.events import Note, StepRecord
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore

# Not shaped like any secret the redactor knows: only the proposer's care keeps it out of the records.
KEY = "hlfault-key-5e0c7d21a94b"
TIMEOUT_S = 1.5
MAX_RETRIES = 1
CONFORMING = (data_dir() / "reports" / "conforming.md").read_text()
_READY = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
try:  # the local llama-server, where `make model` built it; its cache is found before tests move HOME
    _LOCAL_MODEL: Any = importlib.import_module("harness_lab.proposers.local_model")
    _MODEL_CACHE = _LOCAL_MODEL.default_cache_dir()
except ImportError:
    _LOCAL_MODEL, _MODEL_CACHE = None, None
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, whatever the env says


class LLMockServer:
    """``python -m llmock.cli serve`` on 127.0.0.1, port chosen by the OS and read from its log."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMOCK_")}
        env.update(NO_COLOR="1", TERM="dumb", PYTHONUNBUFFERED="1")
        self.log: list[str] = []
        self.url = ""
        self._port: int | None = None
        self._ready = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llmock.cli", "serve", "--host", "127.0.0.1", "--port", "0",
             "--log-level", "info", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            if not self._ready.wait(30) or self._port is None:
                raise RuntimeError("LLMock did not start within 30 s:\n" + "".join(self.log[-20:]))
            self.url = f"http://127.0.0.1:{self._port}"
            self.admin("GET", "/health")
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            if self._port is None and (m := _READY.search(line)):
                self._port = int(m.group(1))
                self._ready.set()
        self._ready.set()  # it exited: whoever waits learns it at once

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(3)
            except subprocess.TimeoutExpired:  # a held (delayed) request keeps uvicorn's graceful shutdown waiting
                self.process.kill()
                self.process.wait(5)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def admin(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with _NO_PROXY.open(request, timeout=10) as response:
            return json.loads(response.read())

    def script(self, *behaviors: dict[str, Any]) -> None:
        self.admin("POST", "/_llmock/scenario", {"behaviors": list(behaviors)})

    def reset(self) -> None:
        self.admin("POST", "/_llmock/reset")

    def requests(self) -> list[dict[str, Any]]:
        """Every chat request served since the last reset (waits up to 2 s for ones in flight)."""
        return [r for r in self.admin("GET", "/_llmock/requests")["requests"] if r["path"].endswith("/chat/completions")]

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@pytest.fixture(scope="module")
def mock_server() -> Iterator[LLMockServer]:
    server = LLMockServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mock(mock_server: LLMockServer) -> LLMockServer:
    mock_server.reset()
    return mock_server


@pytest.fixture
def dripping() -> Iterator[LLMockServer]:
    """A server of its own whose streams send one event every 0.25 s (the pace is a server setting)."""
    server = LLMockServer("--stream-chunk-delay-ms", "250")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


# -- building runs ---------------------------------------------------------------------------------
class Proposer(OpenAICompatProposer):
    """The real proposer; its backoff sleeps are recorded, not slept."""

    def __init__(self, base_url: str, *, key: str = KEY, **config: Any) -> None:
        self.sleeps: list[float] = []
        settings: dict[str, Any] = {"timeout_s": TIMEOUT_S, "max_retries": MAX_RETRIES, **config}
        super().__init__(OpenAICompatConfig(base_url=base_url, model="llmock-model", api_key=key, **settings),
                         sleep=self.sleeps.append)


def _run(tmp_path: Path, proposer: OpenAICompatProposer, contract: ControlContract, evidence: EvidenceCatalogue,
         store: SQLiteStore, run_id: str = "faults") -> Run:
    return Run(contract=contract, proposer=proposer, evidence=evidence, workspace=tmp_path / "ws",
               run_id=run_id, store=store)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _reply(*calls: dict[str, Any], text: str | None = None, times: int | None = 1) -> dict[str, Any]:
    return {"type": "reply", "tool_calls": list(calls), "text": text, "times": times}


def _to_review_ready() -> list[dict[str, Any]]:
    """Four scripted replies that carry the report task to REVIEW_READY."""
    return [_reply(_call("read_evidence", id="harness-boundary")),
            _reply(_call("read_evidence", id="acceptance-snapshot")),
            _reply(_call("write_report", text=CONFORMING)),
            _reply(_call("finish"))]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


# -- what every ending is checked against ----------------------------------------------------------
def _notes(record: StepRecord, topic: str) -> list[Note]:
    return [e for e in record.events if isinstance(e, Note) and e.topic == topic]


def _endpoint_notes(run: Run) -> list[Note]:
    return [e for e in run.events if isinstance(e, Note) and e.topic == "endpoint_failure"]


def _assert_unavailable(record: StepRecord, *, status: int | None, attempts: int, retryable: bool,
                        consecutive: int) -> None:
    assert record.proposal is None, record.summary()
    assert record.decision.verdict == "unavailable", record.summary()
    assert record.tool_result is None
    [note] = _notes(record, "endpoint_failure")
    assert note.data["status"] == status and note.data["attempts"] == attempts, note
    assert note.data["retryable"] is retryable and note.data["consecutive"] == consecutive, note
    assert "\n" not in note.message and "\n" not in record.decision.reason  # one line, no stack


def _assert_nothing_in_context(run: Run, *fragments: str) -> None:
    view = run.context.view().render()
    for fragment in ("HTTP 5", "HTTP 4", "endpoint_failure", "Traceback", *fragments):
        assert fragment not in view, f"{fragment!r} reached the model's context"


def _assert_clean(run: Run, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No traceback and no key in the run's records and events, its store (every byte) or its trace."""
    dumps = [*(r.model_dump_json() for r in run.records), *(e.model_dump_json() for e in run.events),
             json.dumps(run.capture()), repr(run.proposer)]
    for text in dumps:
        assert KEY not in text and "Traceback" not in text, text[:300]
    capsys.readouterr()
    assert cli.main(["trace", "--db", str(db), "--run-id", run.run_id]) == 0
    trace = capsys.readouterr()
    assert trace.out.strip() and KEY not in trace.out + trace.err and "Traceback" not in trace.out + trace.err
    stored = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert KEY.encode() not in stored and b"Traceback" not in stored


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "runs.sqlite"


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db)
    try:
        yield s
    finally:
        s.close()


def _resume_to_the_end(store: SQLiteStore, run: Run, mock: LLMockServer, evidence: EvidenceCatalogue) -> Run:
    """The endpoint answers again: the parked run resumes from its checkpoint and finishes the task."""
    assert run.state is RunState.WAITING_FOR_ENDPOINT
    run.close()
    mock.reset()
    mock.script(*_to_review_ready())
    resumed = Run.resume(store, run.run_id, proposer=Proposer(mock.base_url), evidence=evidence)
    assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
    assert resumed.run() is RunState.REVIEW_READY and resumed.state.terminal
    assert resumed.usage.decisions == 4 and resumed.receipt is not None
    return resumed


# -- the endpoint's faults -------------------------------------------------------------------------
def test_500_then_success_is_retried_inside_the_call(mock: LLMockServer, contract: ControlContract,
                                                     evidence: EvidenceCatalogue, tmp_path: Path, store: SQLiteStore,
                                                     db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.script({"type": "fail", "status": 500, "times": 1}, *_to_review_ready())
    proposer = Proposer(mock.base_url)
    run = _run(tmp_path, proposer, contract, evidence, store)
    first = run.step()
    assert first.proposal is not None and first.proposal.action is not None, first.summary()
    assert first.proposal.action.kind == "read_evidence" and first.decision.verdict == "execute"
    assert proposer.calls == 2 and len(proposer.sleeps) == 1 and proposer.sleeps[0] > 0  # one retry, after a backoff
    assert [r["status"] for r in mock.requests()] == [500, 200]
    assert run.run() is RunState.REVIEW_READY
    assert _endpoint_notes(run) == [] and run.usage.decisions == 4 and run.usage.tokens > 0
    _assert_nothing_in_context(run, "Internal server error")
    _assert_clean(run, db, capsys)


def test_500_past_the_retries_costs_one_endpoint_step_then_the_run_goes_on(
        mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.script({"type": "fail", "status": 500, "times": MAX_RETRIES + 1}, *_to_review_ready())
    run = _run(tmp_path, Proposer(mock.base_url), contract, evidence, store)
    failed = run.step()
    _assert_unavailable(failed, status=500, attempts=MAX_RETRIES + 1, retryable=True, consecutive=1)
    assert run.state is RunState.RUNNING and run.usage.decisions == 0 and run.usage.tokens == 0
    _assert_nothing_in_context(run, "Internal server error")
    ok = run.step()
    assert ok.proposal is not None and ok.proposal.action is not None and ok.proposal.action.kind == "read_evidence"
    assert run.usage.decisions == 1
    assert run.run() is RunState.REVIEW_READY and len(_endpoint_notes(run)) == 1
    _assert_clean(run, db, capsys)


def test_constant_500_parks_the_run_waiting_for_the_endpoint(
        mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.script({"type": "fail", "status": 500, "times": None})
    run = _run(tmp_path, Proposer(mock.base_url), contract, evidence, store)
    assert run.run() is RunState.WAITING_FOR_ENDPOINT
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    limit = contract.stop.budget.max_endpoint_failures
    assert len(run.records) == limit
    for n, record in enumerate(run.records, 1):
        _assert_unavailable(record, status=500, attempts=MAX_RETRIES + 1, retryable=True, consecutive=n)
    assert run.usage.decisions == 0 and run.usage.tokens == 0
    assert len(mock.requests()) == limit * (MAX_RETRIES + 1)
    _assert_nothing_in_context(run, "Internal server error")
    _assert_clean(run, db, capsys)
    _assert_clean(_resume_to_the_end(store, run, mock, evidence), db, capsys)


def test_a_server_that_is_down_parks_the_run(mock: LLMockServer, contract: ControlContract,
                                             evidence: EvidenceCatalogue, tmp_path: Path, store: SQLiteStore,
                                             db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proposer = Proposer(f"http://127.0.0.1:{_closed_port()}/v1")
    run = _run(tmp_path, proposer, contract, evidence, store)
    started = time.monotonic()
    assert run.run() is RunState.WAITING_FOR_ENDPOINT
    assert time.monotonic() - started < 5  # refused at once: no deadline waited out
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    for n, record in enumerate(run.records, 1):
        _assert_unavailable(record, status=None, attempts=MAX_RETRIES + 1, retryable=True, consecutive=n)
    assert len(run.records) == contract.stop.budget.max_endpoint_failures and run.usage.decisions == 0
    _assert_nothing_in_context(run, "Connection refused", "ConnectionRefused")
    _assert_clean(run, db, capsys)
    _assert_clean(_resume_to_the_end(store, run, mock, evidence), db, capsys)  # up again, at another address


def test_a_wrong_key_parks_the_run_after_one_call(mock: LLMockServer, contract: ControlContract,
                                                  evidence: EvidenceCatalogue, tmp_path: Path, store: SQLiteStore,
                                                  db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # What OpenAI answers a wrong key with, the key echoed in the message: it must be masked.
    mock.script({"type": "fail", "status": 401, "code": "invalid_api_key", "times": None,
                 "message": f"Incorrect API key provided: {KEY}. You can find your API key in your settings."})
    proposer = Proposer(mock.base_url)
    run = _run(tmp_path, proposer, contract, evidence, store)
    assert run.run() is RunState.WAITING_FOR_ENDPOINT
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    [record] = run.records
    _assert_unavailable(record, status=401, attempts=1, retryable=False, consecutive=1)
    assert proposer.calls == 1 and proposer.sleeps == [] and len(mock.requests()) == 1  # not retried
    assert run.usage.decisions == 0
    _assert_nothing_in_context(run, "Incorrect API key")
    _assert_clean(run, db, capsys)
    _assert_clean(_resume_to_the_end(store, run, mock, evidence), db, capsys)  # the right key this time


def test_a_wrong_key_against_llama_server(contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
                                          store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same ending from a server that really checks keys: llama.cpp's llama-server (``make model``)."""
    why = ("no harness_lab.proposers.local_model to start llama-server with" if _LOCAL_MODEL is None
           else "" if (state := _LOCAL_MODEL.status(_MODEL_CACHE)).ready
           else f"no local model server to check a real key against: {state.summary()}")
    if why and os.environ.get("HARNESS_LAB_REQUIRE_MODEL") == "1":
        pytest.fail(why + " (HARNESS_LAB_REQUIRE_MODEL=1: this run must not skip it)")
    if why:
        pytest.skip(why)
    with _LOCAL_MODEL.serve(api_key="hlfault-right-key-0d9e8f7a", cache_dir=_MODEL_CACHE, startup_timeout=60.0) as server:
        proposer = OpenAICompatProposer(OpenAICompatConfig(base_url=server.base_url, model=server.model, api_key=KEY,
                                                           timeout_s=10.0, max_retries=MAX_RETRIES))
        run = _run(tmp_path, proposer, contract, evidence, store)
        assert run.run() is RunState.WAITING_FOR_ENDPOINT
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    [record] = run.records
    _assert_unavailable(record, status=401, attempts=1, retryable=False, consecutive=1)
    assert proposer.calls == 1 and run.usage.decisions == 0
    _assert_nothing_in_context(run, "Invalid API Key")
    _assert_clean(run, db, capsys)


def _one_deadline_step(run: Run, proposer: Proposer) -> float:
    """One step against a server that holds every attempt past the deadline; returns its seconds."""
    started = time.monotonic()
    record = run.step()
    elapsed = time.monotonic() - started
    _assert_unavailable(record, status=None, attempts=MAX_RETRIES + 1, retryable=True, consecutive=1)
    assert proposer.calls == MAX_RETRIES + 1
    # Each attempt lasted its whole deadline, and no longer: the call's, not each socket read's.
    assert TIMEOUT_S * (MAX_RETRIES + 1) - 0.1 <= elapsed < TIMEOUT_S * (MAX_RETRIES + 1) + 1.5, elapsed
    assert run.state is RunState.WAITING_FOR_ENDPOINT and run.usage.decisions == 0
    assert run.stop_reason is not None and run.stop_reason.code == "endpoint_unavailable"
    return elapsed


@pytest.mark.parametrize("stream", [False, True], ids=["whole-reply", "stream"])
def test_a_slow_first_byte_ends_the_call_at_its_deadline(
        stream: bool, mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # delay: not a byte (not even the status line) for 6 s; slow_first_token: a stream's headers, then 6 s of nothing
    held = {"type": "slow_first_token" if stream else "delay", "seconds": 6, "times": None}
    mock.script(held, _reply(_call("read_evidence", id="harness-boundary"), times=None))
    proposer = Proposer(mock.base_url, stream=stream)
    run = _run(tmp_path, proposer, contract.with_budget(max_endpoint_failures=1), evidence, store)
    _one_deadline_step(run, proposer)
    _assert_nothing_in_context(run, "no reply within", "TimeoutError", "timed out")
    _assert_clean(run, db, capsys)


def test_a_drip_fed_body_ends_the_call_at_its_deadline(
        dripping: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ~40 stream events of a long write_report, 0.25 s apart: every read comes well inside the 1.5 s
    # timeout, the whole reply takes ~10 s. A per-read timeout would wait it out; the deadline must not.
    report = CONFORMING + "\n" + "More limitations, told at length. " * 8
    dripping.script(_reply(_call("write_report", text=report), times=None))
    proposer = Proposer(dripping.base_url, stream=True)
    run = _run(tmp_path, proposer, contract.with_budget(max_endpoint_failures=1), evidence, store)
    _one_deadline_step(run, proposer)
    assert not (run.workspace / run.contract.verification.report.path).exists()
    _assert_nothing_in_context(run, "no reply within", "TimeoutError", "timed out")
    _assert_clean(run, db, capsys)
    # The server was dripping, not stalled: several events went out on each attempt before it was dropped.
    sent = [r["chunks_sent"] for r in dripping.requests()]
    assert len(sent) == MAX_RETRIES + 1 and all(n >= 3 for n in sent), sent


# -- the model's faults: refused and fed back, charged as decisions ---------------------------------
def test_a_prose_reply_is_the_models_fault(mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue,
                                           tmp_path: Path, store: SQLiteStore, db: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    prose = "The report already looks complete to me, so no tool is needed."
    mock.script(_reply(text=prose), *_to_review_ready())
    proposer = Proposer(mock.base_url)
    run = _run(tmp_path, proposer, contract, evidence, store)
    record = run.step()
    assert record.proposal is not None and record.proposal.error is not None, record.summary()
    assert record.proposal.error.code == "malformed" and record.decision.verdict == "refuse"
    assert run.usage.decisions == 1 and run.usage.tokens > 0 and proposer.calls == 1
    assert _endpoint_notes(run) == [] and run.state is RunState.RUNNING
    assert f"refused: {record.decision.reason}" in run.context.view().render()  # fed back to the model
    assert run.run() is RunState.REVIEW_READY and run.usage.decisions == 5
    _assert_clean(run, db, capsys)


def test_two_tool_calls_run_the_first_and_record_the_second(
        mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.script(_reply(_call("read_evidence", id="harness-boundary"), _call("write_report", text=CONFORMING)))
    run = _run(tmp_path, Proposer(mock.base_url), contract, evidence, store)
    record = run.step()
    assert record.proposal is not None and record.proposal.action is not None, record.summary()
    assert record.proposal.action.kind == "read_evidence" and record.decision.verdict == "execute"
    assert record.tool_result is not None and record.tool_result.ok
    [claim] = _notes(record, "claims_ignored")
    [other] = claim.data["other_tool_calls"]
    assert other["name"] == "write_report"
    assert not (run.workspace / run.contract.verification.report.path).exists()  # the second call did not run
    assert run.usage.decisions == 1 and run.usage.tool_calls == 1 and _endpoint_notes(run) == []
    _assert_clean(run, db, capsys)


def test_arguments_that_are_not_json_are_the_models_fault(
        mock: LLMockServer, contract: ControlContract, evidence: EvidenceCatalogue, tmp_path: Path,
        store: SQLiteStore, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock.script(_reply(_call("read_evidence", id="harness-boundary")), {"type": "tool_fault", "kind": "malformed_arguments"},
                *_to_review_ready())
    proposer = Proposer(mock.base_url)
    run = _run(tmp_path, proposer, contract, evidence, store)
    record = run.step()
    assert record.proposal is not None and record.proposal.error is not None, record.summary()
    assert "not JSON" in str(record.proposal.raw) and record.decision.verdict == "refuse"
    assert run.usage.decisions == 1 and run.usage.tool_calls == 0 and proposer.calls == 1
    assert _endpoint_notes(run) == [] and run.state is RunState.RUNNING
    view = run.context.view().render()
    assert f"refused: {record.decision.reason}" in view and "not JSON" in view  # fed back to the model
    assert run.run() is RunState.REVIEW_READY
    _assert_clean(run, db, capsys)
