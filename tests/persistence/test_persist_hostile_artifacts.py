"""A command leaves something hostile where the report was: the checkpoint and resume hash the artifact
through the workspace boundary (regular files only, no link, non-blocking, streamed), so a FIFO cannot
hang the harness, /dev/zero cannot exhaust its memory, and a secret outside is never read (issue 17)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.persistence.checkpoint_record import Checkpoint
from harness_lab.proposers import ScriptedProposer
from harness_lab.records.states import RunState
from harness_lab.store import SQLiteStore

REPORT = "# Report\n\n## Conclusion\nx\n\n## Evidence\ny\n\n## Limitations\nz\n"


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail instead of hanging: before the fix a FIFO report blocked the commit for ever."""

    def hung(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the harness hung on the artifact")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("replace", [
    ["mkfifo", "report.md"],
    ["ln", "-s", "/dev/zero", "report.md"],
    ["ln", "-s", "SECRET_TARGET", "report.md"],
])
def test_a_hostile_report_is_not_read_by_the_checkpoint_or_resume(tmp_path: Path, replace: list[str],
                                                                   deadline: None) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:password-hash\n")
    argv = [str(secret) if a == "SECRET_TARGET" else a for a in replace]
    actions = [{"kind": "write_report", "text": REPORT},
               {"kind": "run_command", "argv": ["rm", "report.md"]},
               {"kind": "run_command", "argv": argv},
               {"kind": "think", "thought": "what is report.md now?"}]
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=4)
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run(contract=contract, proposer=ScriptedProposer(actions), evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"),
              workspace=tmp_path / "ws", store=store, run_id="H1")
    try:
        run.run(max_steps=3)
        assert [r.tool_result.status for r in run.records if r.tool_result] == ["ok", "ok", "ok"]
        row = store.last_step("H1")
        assert row is not None and row.step == 3
        assert Checkpoint.from_row(row).artifact_sha256 == {}, \
            "no hash of something that is not a regular file in the workspace"
        store.close()
        store = SQLiteStore(tmp_path / "runs.sqlite", create=False)
        resumed = Run.resume(store, "H1", proposer=ScriptedProposer(actions[3:]))
        assert resumed.resume_report is not None and resumed.resume_report.ok, resumed.resume_report
        assert resumed.run() is RunState.EXHAUSTED
        resumed.close()
    finally:
        run.close()
        store.close()
