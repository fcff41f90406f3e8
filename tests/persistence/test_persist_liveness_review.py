"""Review of long-running operation from the command line: a refused resume writes nothing, a run
stopped by SIGTERM is not called stuck, and the resume commands printed can be pasted into a shell."""

from __future__ import annotations

import json
import os
import shlex
import signal
import time
from pathlib import Path

import yaml
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.paths import data_dir
from harness_lab.persistence.heartbeat import Watchdog, drive
from harness_lab.store import SQLiteStore


def test_a_refused_resume_on_the_command_line_leaves_no_heartbeat_in_the_store(tmp_path: Path, capsys) -> None:
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = Run.from_scenario("conforming_report", store=store, run_id="R1", workspace=tmp_path / "ws")
    run.run(max_steps=2)
    run.close()
    store.close()
    (tmp_path / "ws" / "stray.txt").write_text("an outside edit")  # the resume is refused: concurrent change
    assert main(["resume", "--db", str(db), "--run-id", "R1", "--heartbeat", "0.01"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("resume refused: ") and "final: BLOCKED (resume_refused)" in captured.out
    store = SQLiteStore(db, create=False)
    try:
        # was: a beat "BLOCKED at step 3" from the CLI's process, for a run the store still has RUNNING at step 2
        assert store.last_beat("R1") is None
        assert store.last_step("R1").step == 2  # type: ignore[union-attr]
    finally:
        store.close()


def test_the_watchdog_leaves_a_run_stopped_by_sigterm_stopped_not_stuck(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    assert drive(run, store, lambda record: os.kill(os.getpid(), signal.SIGTERM), heartbeat_s=3600, grace_s=3600)
    verdict = Watchdog(store, timeout_s=90).check("R1", now=time.time() + 1000)
    assert verdict.status == "settled" and "SIGTERM after step 1" in verdict.reason
    info = store.run_info("R1")
    assert (info.status, info.status_reason) == ("stopped", "SIGTERM after step 1")  # was overwritten: stuck
    Run.resume(store, "R1", effects=CountingOutbox())  # resumed: the watchdog watches it again
    assert Watchdog(store, timeout_s=90).check("R1", now=time.time() + 1000).status == "stuck"


def _gated_scenario(tmp_path: Path) -> Path:
    scenario = yaml.safe_load((data_dir() / "scenarios" / "conforming_report.yaml").read_text(encoding="utf-8"))
    scenario["id"], scenario["labels"]["acceptable_reports"] = "gated", [3]
    scenario["actions"].insert(2, {"kind": "push", "branch": "main"})
    path = tmp_path / "gated.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    return path


def test_the_resume_hint_for_a_parked_run_quotes_a_store_path_with_a_space(tmp_path: Path, capsys) -> None:
    db = tmp_path / "my runs.sqlite"
    assert main(["run", str(_gated_scenario(tmp_path)), "--db", str(db), "--run-id", "G 1"]) == 0
    hint = capsys.readouterr().out.split("or with ")[1].strip()
    assert hint.startswith(f"harness-lab resume --db {shlex.quote(str(db))} --run-id 'G 1' --gate-policy")
    argv = shlex.split(hint.replace("approve|reject", "approve"))[1:]
    assert main(argv) == 0  # pasted as printed, it resumes the run
    assert "final: REVIEW_READY" in capsys.readouterr().out


def test_the_sigterm_hint_quotes_a_store_path_with_a_space(tmp_path: Path, capsys, monkeypatch) -> None:
    real = Run.step

    def step(self: Run) -> object:
        record = real(self)
        os.kill(os.getpid(), signal.SIGTERM)  # after the first step: the graceful stop takes over
        return record

    monkeypatch.setattr(Run, "step", step)
    db = tmp_path / "my runs.sqlite"
    assert main(["run", "conforming_report", "--db", str(db), "--run-id", "R 1"]) == 143
    hint = capsys.readouterr().err.split("resume with: ")[1].strip()
    assert hint == f"harness-lab resume --db {shlex.quote(str(db))} --run-id 'R 1'"
    monkeypatch.undo()
    assert main(shlex.split(hint)[1:]) == 0  # pasted as printed, it resumes the run
    assert "final: REVIEW_READY" in capsys.readouterr().out
