"""Shared helpers of the persistence tests: a run with a gated push, a counting outbox, outcomes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from runhelpers import CountingOutbox  # noqa: F401  (the persistence tests import it from here)

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.store import Store

REPORT = (
    "# Report\n\n## Conclusion\nChecks keep drafts out of review [E:harness-boundary] [E:acceptance-snapshot].\n\n"
    "## Evidence\n- The runtime decides [E:harness-boundary].\n- Receipts bind bytes [E:acceptance-snapshot].\n\n"
    "## Limitations\nTest material only.\n"
)
# read, read, write a note, push (gated, approved by policy), write the report, overwrite the note, finish
ACTIONS: list[dict[str, Any]] = [
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "write_file", "path": "notes/plan.txt", "content": "draft the report, then push"},
    {"kind": "push", "ref": "main"},
    {"kind": "write_report", "text": REPORT},
    {"kind": "write_file", "path": "notes/plan.txt", "content": "report written and pushed"},
    {"kind": "finish"},
]
PUSH_STEP = 4


def push_run(workspace: Path, store: Store | None, outbox: CountingOutbox, run_id: str = "R1",
             actions: list[dict[str, Any]] | None = None, max_decisions: int = 12) -> Run:
    # Only max_decisions limits it: the token and wall-clock defaults are lifted (they are tests/loop's
    # business; long runs here would spend the 20,000 tokens).
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=max_decisions, max_tool_calls=max_decisions, max_tokens=None, wall_clock_seconds=None)
    return Run(contract=contract, proposer=ScriptedProposer(actions or ACTIONS),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
               approver=AutoApprove(), effects=outbox, run_id=run_id, store=store)


def outcome(run: Run) -> dict[str, Any]:
    """What an interrupted-then-resumed run must share with an uninterrupted one."""
    return {
        "state": run.state.value,
        "stop": run.stop_reason.code if run.stop_reason else None,
        "decisions": run.usage.decisions,
        "tool_calls": run.usage.tool_calls,
        "workspace": run.sandbox.workspace_hash(),
        "receipt": json.loads(run.receipt.model_dump_json()) if run.receipt else None,
    }


def kill_when(marker: Path, child: subprocess.Popen[str]) -> None:
    """SIGKILL ``child`` once ``marker`` exists (an event, polled; ~60 s at most on a loaded host), and reap it."""
    try:
        for _ in range(6000):
            if marker.exists() or child.poll() is not None:
                break
            time.sleep(0.01)
        assert marker.exists(), f"the command never started: {child.poll()} {child.stderr}"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
