"""Every lesson runs headless under papermill with changed parameters and its own assertions pass.

The committed notebooks are validated separately by nbval (``make test``); here we check that the
lessons hold for parameters other than the stored ones, that a raising notebook fails with its cell
shown, and that the committed sources are what build_notebooks.py makes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from configparser import ConfigParser
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
LESSONS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

# Parameters other than the committed defaults, so the lesson is not only true for its stored run.
PARAMETERS: dict[str, dict[str, object]] = {
    "01_finish_validation": {"scenario": "cites_unknown_id", "validation": False},
    "02_context_layers": {"budget_tokens": 300, "output_rows": 5000},
    "03_sandbox_snapshots": {"escape_path": "/etc/hostname", "budget_decisions": 10},
    "04_gates_faults": {"reject_reason": "not during the freeze", "fault": "empty_result"},
    "05_crash_resume": {"scenario": "missing_section_then_fixed", "crash_step": 5},
    "06_experiments": {"seeds": 2, "noise": 0.1},
    "08_functional_verification": {"scenario": "coding_special_cases_input"},
    "09_context_cycle": {"expected_rows": 250},
    "10_watchdog": {"max_restarts": 1},
    "11_time_travel": {"budget": "keep"},
}

# What each changed parameter must visibly change in the lesson's output.
EXPECTED: dict[str, str] = {
    "01_finish_validation": "cites_unknown_id: REVIEW_READY (finish_unvalidated)",  # validation off: unchecked
    "02_context_layers": "/300 tokens",
    "03_sandbox_snapshots": "read_file(path='/etc/hostname') -> denied",
    "04_gates_faults": "rejected by human: not during the freeze",
    "05_crash_resume": "simulated crash at after_effect of step 5",
    "06_experiments": "10 scenarios x 2 seeds per group",
    # the default parameters replay the recorded transcript; the live run is test_lesson_7_live_... below
    "07_real_model": "REPLAY: no server is asked; replaying a transcript recorded from the real server",
    # special-casing the tests' input: the task's tests pass, the held-out check does not
    "08_functional_verification": "check tests: passed, exit status 0",
    "09_context_cycle": "True 0 rows; 250 expected",
    "10_watchdog": "-> resuming (restart 1/1, pid <pid>)",
    # "keep": the spend at step 3, not the source's spend at its end (8 decisions: exhausted at once)
    "11_time_travel": "spent at the fork (keep): 3 decisions, 3 tool calls, 1461 tokens",
}


def papermill(name: str, out: Path, params: dict[str, object]) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "papermill", str(NOTEBOOKS / f"{name}.ipynb"), str(out),
            "-k", "python3", "--cwd", str(NOTEBOOKS), "--no-progress-bar"]
    for key, value in params.items():
        args += ["-y", json.dumps({key: value})]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def outputs_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_the_lessons_exist_in_order():
    assert LESSONS == ["01_finish_validation", "02_context_layers", "03_sandbox_snapshots", "04_gates_faults",
                       "05_crash_resume", "06_experiments", "07_real_model", "08_functional_verification",
                       "09_context_cycle", "10_watchdog", "11_time_travel"]


@pytest.mark.notebook
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_headless_with_changed_parameters(name, tmp_path):
    out = tmp_path / f"{name}.out.ipynb"
    proc = papermill(name, out, PARAMETERS.get(name, {}))
    assert proc.returncode == 0, f"{name} failed under papermill:\n{proc.stderr[-4000:]}"
    text = outputs_text(out)
    assert "all claims hold" in text
    assert EXPECTED[name] in text
    nb = nbformat.read(out, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == (1 if PARAMETERS.get(name) else 0)


@pytest.mark.notebook
def test_a_lesson_whose_claim_breaks_fails_with_the_cell_shown(tmp_path):
    # an escape path inside the workspace is not denied, so lesson 3's first claim must fail
    proc = papermill("03_sandbox_snapshots", tmp_path / "bad.ipynb", {"escape_path": "notes/plan.md"})
    assert proc.returncode != 0
    assert "AssertionError" in proc.stderr and 'statuses == ["denied", "denied"]' in proc.stderr


@pytest.mark.parametrize("name", LESSONS)
def test_each_lesson_has_a_parameters_cell_and_ends_with_assertions(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code"
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "assert " in last.source and "all claims hold" in last.source
    assert nb.metadata["kernelspec"]["name"] == "python3"


def test_committed_notebooks_are_what_the_builder_makes():
    proc = subprocess.run([sys.executable, str(NOTEBOOKS / "build_notebooks.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_committed_outputs_hold_no_unsanitized_volatile_values():
    cfg = ConfigParser()
    cfg.read(NOTEBOOKS / "nbval_sanitize.cfg")
    patterns = [re.compile(cfg[s]["regex"]) for s in cfg.sections()]
    samples = {"sha256": "a" * 64, "temp_path": "/tmp/harness-lab-ws-ab12_x/report.md",
               "model_id": "0123456789abcdef0123456789abcdef", "address": "at 0x7f3a2b1c9d00"}
    for section, sample in samples.items():
        assert re.search(cfg[section]["regex"], sample), section
    for name in LESSONS:
        text = outputs_text(NOTEBOOKS / f"{name}.ipynb")
        for p in patterns:
            text = p.sub("", text)
        assert "/tmp/" not in text and not re.search(r"\b[0-9a-f]{40,}\b", text), name


@pytest.mark.notebook
def test_nbval_ignores_sanitized_values_and_catches_a_changed_output(tmp_path):
    nb = nbformat.read(NOTEBOOKS / "01_finish_validation.ipynb", as_version=4)
    cells = {c.id: c for c in nb.cells}
    receipt = cells["01-06"].outputs[0]
    sha = re.search(r"\b[0-9a-f]{64}\b", receipt["text"]).group(0)
    receipt["text"] = receipt["text"].replace(sha, "f" * 64)  # a different hash: sanitized, still passes
    steps = cells["01-04"].outputs[0]
    steps["text"] = steps["text"].replace("REVIEW_READY at", "EXHAUSTED at").replace("-> REVIEW_READY", "-> EXHAUSTED")
    tampered = tmp_path / "01_tampered.ipynb"
    nbformat.write(nb, tampered)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval", str(tampered),
                           "--nbval-sanitize-with", str(NOTEBOOKS / "nbval_sanitize.cfg"), "--rootdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=NOTEBOOKS)
    failed = re.findall(r"FAILED \S+::Cell (\d+)", proc.stdout)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert failed == ["2"], proc.stdout[-3000:]  # only the steps cell (code cell 2); the receipt cell passed


@pytest.mark.notebook
def test_lesson_7_live_against_a_stand_in_records_a_transcript_that_replays(tmp_path, monkeypatch):
    """live=True against a STAND-IN chat server (tests/standin_chat.py, scripted replies, not a model):
    the first output line says the run is live, the claims hold, the key (given by environment) is in no
    output, and the transcript the lesson records replays to the same step lines."""
    from standin_chat import KEY, StandInChat

    from harness_lab.proposers.transcript import TranscriptTransport

    monkeypatch.setenv("HARNESS_LAB_LESSON7_KEY", KEY)
    record = tmp_path / "transcript.json"
    with StandInChat() as server:
        proc = papermill("07_real_model", tmp_path / "live.ipynb",
                         {"live": True, "base_url": server.url, "model": "standin",
                          "api_key_env": "HARNESS_LAB_LESSON7_KEY", "record_to": str(record)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = outputs_text(tmp_path / "live.ipynb")
    assert text.startswith(f"LIVE: this run talks to standin at {server.url} now")
    assert "all claims hold" in text and KEY not in text and KEY not in (tmp_path / "live.ipynb").read_text()
    assert "WAITING_FOR_ENDPOINT | endpoint_unavailable | charged: 0 decisions, 0 tokens" in text
    raw = record.read_text()
    assert KEY not in raw and "Bearer" not in raw
    replay = TranscriptTransport(record)
    assert set(replay.sections) == {"run 1", "run 2", "run 3", "run 4", "endpoint"}
    assert replay.metadata["proposer"]["tool_choice"] == "required"
    assert replay.metadata["outcome"]["endpoint"]["state"] == "WAITING_FOR_ENDPOINT"
