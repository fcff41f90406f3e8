"""Review of drive() and its liveness parts: drive closes a human gate past its timeout as Run.run()
does; the heartbeat thread outlives a store error (and ends quietly with a closed store); GracefulStop
refuses a non-main thread in one line and restores a handler not set from Python."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from persisthelpers import ACTIONS, PUSH_STEP, CountingOutbox, push_run

from harness_lab import Run, RunState
from harness_lab.clock import FakeClock
from harness_lab.contract import load_contract
from harness_lab.errors import HarnessLabError, StoreError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AskHuman
from harness_lab.paths import data_dir
from harness_lab.persistence.heartbeat import GracefulStop, HeartbeatThread, Watchdog, drive
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.events import StepRecord
from harness_lab.store import InMemoryStore, SQLiteStore, Store


def _gated_run(workspace: Path, store: Store, clock: FakeClock, timeout_s: float) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml")
    contract = contract.model_copy(update={"human_gate": contract.human_gate.model_copy(
        update={"timeout_seconds": timeout_s})})
    return Run(contract=contract, proposer=ScriptedProposer(ACTIONS),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
               approver=AskHuman(), effects=CountingOutbox(), run_id="R1", store=store, clock=clock)


def test_drive_closes_a_human_gate_whose_timeout_passed_after_a_resume(tmp_path: Path) -> None:
    # Before: drive() (harness-lab run --db / resume) stopped at any waiting run, so a parked run whose
    # gate had timed out stayed WAITING_FOR_HUMAN for good, where Run.run() closes it.
    store, clock = SQLiteStore(tmp_path / "runs.sqlite"), FakeClock()
    seen: list[StepRecord] = []
    run = _gated_run(tmp_path / "ws", store, clock, timeout_s=30)
    assert not drive(run, store, seen.append, heartbeat_s=3600, grace_s=3600)
    assert run.state is RunState.WAITING_FOR_HUMAN and run.step_no == PUSH_STEP
    clock.advance(29)
    assert not drive(run, store, seen.append, heartbeat_s=3600, grace_s=3600)
    assert run.step_no == PUSH_STEP, "within the timeout drive() waits, as run() does"
    run.close()
    clock.advance(2)
    outbox = CountingOutbox()
    resumed = Run.resume(store, "R1", approver=AskHuman(), effects=outbox, clock=clock)
    assert resumed.waiting is not None
    assert not drive(resumed, store, seen.append, heartbeat_s=3600, grace_s=3600)
    assert resumed.state is RunState.BLOCKED and resumed.step_no == PUSH_STEP + 1
    assert resumed.stop_reason is not None and resumed.stop_reason.code == "human_timeout"
    assert len(seen) == PUSH_STEP + 1 and seen[-1].state_before is RunState.WAITING_FOR_HUMAN
    assert outbox.applied == [] and store.last_step("R1").step == PUSH_STEP + 1  # type: ignore[union-attr]
    store.close()


class _FlakyStore(InMemoryStore):
    """A store whose first beats fail, as a locked or full database would, then work again."""

    def __init__(self, failing: int) -> None:
        super().__init__()
        self.failing = failing

    def beat(self, beat: Any) -> None:
        if self.failing > 0:
            self.failing -= 1
            raise StoreError("runs.sqlite: database is locked")
        super().beat(beat)


def _wait(until: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_heartbeat_thread_survives_store_errors_and_says_so_once(tmp_path: Path, capfd: Any) -> None:
    # Before: the first error killed the thread (an unhandled thread exception), no beat followed,
    # and the watchdog called the live run stuck.
    store = _FlakyStore(failing=3)
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    with HeartbeatThread(store, run, interval_s=0.005) as heart:
        _wait(lambda: heart.beats >= 2)
    assert heart.failures == 3 and heart.last_error == "StoreError: runs.sqlite: database is locked"
    err = capfd.readouterr().err
    assert err.count("heartbeat of run R1 failed (StoreError: runs.sqlite: database is locked)") == 1
    assert err.count("heartbeat of run R1 beats again (3 beat(s) lost)") == 1 and len(err.splitlines()) == 2
    assert Watchdog(store, timeout_s=90).check("R1").status == "alive"


def test_the_heartbeat_thread_ends_quietly_when_its_store_is_closed(tmp_path: Path, capfd: Any) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    heart = HeartbeatThread(store, run, interval_s=0.005).start()
    _wait(lambda: heart.beats >= 1)
    store.close()
    _wait(lambda: not heart._thread.is_alive())  # before: it died of an unhandled StoreError
    heart.stop()  # nothing left to do, and nothing raised
    err = capfd.readouterr().err
    assert err.count("heartbeat of run R1 stopped: its store is closed") == 1 and len(err.splitlines()) == 1
    assert heart.last_error is not None and "closed database" in heart.last_error


def test_drive_from_another_thread_is_refused_in_one_line_before_any_beat(tmp_path: Path) -> None:
    # Before: a bare ValueError from signal.signal, after a beat for a run that took no step.
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    raised: list[BaseException] = []

    def target() -> None:
        try:
            drive(run, store, lambda record: None, heartbeat_s=3600, grace_s=3600)
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    worker = threading.Thread(target=target, name="worker")
    worker.start()
    worker.join()
    (exc,) = raised
    assert type(exc) is HarnessLabError
    assert str(exc) == ("GracefulStop: Python handles signals in the main thread only, not in thread 'worker'; "
                        "drive the run from the main thread")
    assert store.last_beat("R1") is None and run.step_no == 0
    store.close()


def test_graceful_stop_restores_a_handler_that_was_not_set_from_python(monkeypatch: Any) -> None:
    # signal.signal answers None for a handler installed outside Python (C code, an embedding app);
    # before, __exit__ passed that None back to signal.signal: TypeError.
    real = signal.signal
    before = signal.getsignal(signal.SIGTERM)
    answers = iter([None])

    def fake(signum: int, handler: Any) -> Any:
        previous = real(signum, handler)
        return next(answers, previous)

    monkeypatch.setattr(signal, "signal", fake)
    try:
        with GracefulStop(3600) as stop:
            assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        real(signal.SIGTERM, signal.SIG_DFL if before is None else before)
