"""The bench/ scripts still run (tiny sizes) and print the lines the README's figures come from.

Smoke runs only: the figures themselves are measurements, read from full runs of these scripts, never
asserted here (house rule: speed targets live in bench/, not in timed tests). A script that an import or a
renamed helper broke fails here instead of the next time someone measures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness_lab.proposers import local_model

BENCH = Path(__file__).resolve().parents[1] / "bench"
MODEL_CACHE = local_model.default_cache_dir()  # resolved before the per-test scratch HOME

CASES = {
    "step_overhead": (["--steps", "60", "--no-langgraph"], ["harness-lab+store", "bare+sqlite", "ratios:"]),
    "core_targets": (["--steps", "40", "--rounds", "2", "--memory-steps", "60", "--no-peers"],
                     ["stored step / commit-only, NORMAL", "commit-only(FULL)", "memory: a 60-step run"]),
    "serializer": (["--steps", "20", "--repeats", "1", "--no-peers"],
                   ["context change log", "per stored step", "winner, encode:"]),
    "commit_path": (["--steps", "30", "--rounds", "2"], ["store write path:", "new  stored-effect", "/ commit-only"]),
    "step_breakdown": (["--steps", "60"], ["no-op step, no store:", "checkpoint commit, all of it"]),
    "fork_resume": (["--steps", "40", "--repeats", "2"], ["fork last", "resume", "history"]),
    "compare_cost": (["--steps", "20", "--repeats", "1"], ["compare, agree:", "compare, fork", "run() per step"]),
    "time_travel": (["--steps", "40", "--repeats", "2", "--points", "2"], ["at(n)", "fork(at_step=n)", "worst median"]),
    "memory": (["--steps", "30", "60"], ["peak RSS", "ratio of growth"]),
    "trace_memory": (["--steps", "120", "--rounds", "2"], ["trace memory:", "packed / plain CPU per step"]),
    "netallow_cost": (["--commands", "2", "--connections", "5", "--mib", "1"],
                      ["connect+roundtrip relayed / direct", "| bwrap |", "| unshare |"]),
    "snapshot_bench": (["--sizes", "1000", "--rounds", "1"], ["snapshot", "workspace_hash"]),
    "study_speed": (["--seeds", "1", "--workers", "1"], ["ten-scenario experiment", "study 4 groups"]),
    "functional_cost": (["--repeats", "2"], ["functional layer per finish:", "honest-fix run, validation on:"]),
    "stress_kill": (["--runs", "2", "--seed", "3"], ["effects applied twice: 0", "PRAGMA integrity_check"]),
    "stress_kill_wal": (["--runs", "2", "--seed", "3"], ["2 intact and resumed, 0 not"]),
    # records against a real server (minutes); the smoke run checks its plan and imports only
    "record_model_transcript": (["--dry-run"], ["plan:", "chat template", "07_real_model.ipynb"]),
}


@pytest.mark.parametrize("script", sorted(CASES))
def test_the_bench_script_runs_and_prints_its_figures(script: str, tmp_path: Path) -> None:
    args, expected = CASES[script]
    proc = subprocess.run([sys.executable, str(BENCH / f"{script}.py"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in expected:
        assert line in proc.stdout, f"{script}: {line!r} not in its output:\n{proc.stdout[-2000:]}"


@pytest.mark.model
def test_the_real_model_bench_runs_and_prints_its_figures(tmp_path: Path) -> None:
    state = local_model.status(MODEL_CACHE)
    if not state.ready:
        if os.environ.get("HARNESS_LAB_REQUIRE_MODEL") == "1":
            pytest.fail(f"no local model server: {state.summary()} (HARNESS_LAB_REQUIRE_MODEL=1)")
        pytest.skip(f"no local model server: {state.summary()}")
    env = {**os.environ, local_model.CACHE_ENV: str(MODEL_CACHE)}
    proc = subprocess.run([sys.executable, str(BENCH / "real_model.py"), "--seeds", "1", "--scenarios",
                           "conforming_report"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in ("server ready", "endpoint per call:", "harness per step", "tokens per call", "outcomes:"):
        assert line in proc.stdout, f"real_model: {line!r} not in its output:\n{proc.stdout[-2000:]}"


def test_every_bench_script_is_smoke_run() -> None:
    assert sorted(p.stem for p in BENCH.glob("*.py")) == sorted([*CASES, "real_model"])
