"""The report validator is linear and refuses a flood (issue 17): 100k headings took 28-45 s when each
heading scanned all the headings after it; a report past MAX_REPORT_BYTES is refused before parsing."""

from __future__ import annotations

import time
from pathlib import Path

from harness_lab import Run
from harness_lab.contract import ReportContract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.validation import MAX_REPORT_BYTES, check_report

EVIDENCE = EvidenceCatalogue.from_dir(data_dir() / "evidence")


def _flood(n: int) -> bytes:
    return ("# Conclusion\nx [E:harness-boundary]\n" + "".join(f"## h{i}\ntext\n" for i in range(n))).encode()


def _cpu_seconds(n: int) -> float:
    text = _flood(n)
    best = float("inf")
    for _ in range(2):  # the better of two: a collection or a page fault is not the parser
        start = time.process_time()
        check_report(text, {"harness-boundary"}, EVIDENCE, ReportContract())
        best = min(best, time.process_time() - start)
    return best


def test_the_check_grows_linearly_with_headings() -> None:
    # A complexity check, not a speed target: 8x the headings may cost ~8x the CPU time; the quadratic
    # scan (each heading copied the list of all headings after it) cost ~50x from 10k to 80k.
    small, large = _cpu_seconds(10_000), _cpu_seconds(80_000)
    assert large < 20 * small, f"10k headings {small:.3f}s, 80k {large:.3f}s CPU: {large / small:.0f}x for 8x the input"


def test_a_flood_past_the_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    flood = b"# Conclusion\n" + b"[E:" * (MAX_REPORT_BYTES // 3 + 10)
    verdict = check_report(flood, set(), EVIDENCE, ReportContract())
    assert not verdict.accepted and [e.code for e in verdict.errors] == ["report_too_large"]
    assert "\n" not in verdict.errors[0].message

    from harness_lab.contract import load_contract

    text = "# Conclusion\n" + "x" * (MAX_REPORT_BYTES + 100)
    # the token budget lifted: writing 4 MiB is charged ~1M tokens, which would stop the run before its finish
    run = Run(contract=load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_tokens=None),
              proposer=ScriptedProposer([{"kind": "write_report", "text": text}, {"kind": "finish"}]),
              evidence=EVIDENCE, workspace=tmp_path / "ws")
    run.step()
    finish = run.step()
    assert finish.verdict is not None and [e.code for e in finish.verdict.errors] == ["report_too_large"]
    run.close()
