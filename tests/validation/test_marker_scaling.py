"""Thousands of unclosed ``[E:`` markers cost linear time to validate and review: a search per marker for
its closing ']' ran to the end of the text (report.find_citations), and the reviewer's marker-stripping
pattern tried each unclosed marker to the end of its claim (semantic). Time growth is compared (4x the
markers must cost well under 16x the time), never an absolute time."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from harness_lab.contract import ReportContract
from harness_lab.validation.report import check_report
from harness_lab.validation.semantic import EvidenceSupportReviewer

# One long line; one per line; nothing but markers. Each marker carries a few characters of its own, as
# an unclosed marker in a real report does (the quadratic search reread them for every marker before).
LAYOUTS = {
    "one_line": "[E:x {pad} ",
    "many_lines": "[E:x {pad}\n",
    "bare": "[E:{pad}",
}


def _report(n: int, layout: str) -> bytes:
    body = LAYOUTS[layout].format(pad="-" * 40) * n
    return (f"# Report\n\n## Conclusion\nA claim {body}\n\n## Evidence\n- none\n\n## Limitations\nTest.\n").encode()


def _best(work: Callable[[], object]) -> float:
    # Without the cyclic collector: its passes over the tens of thousands of error records grow with the
    # heap (pytest's too), which is not the validator's algorithm and made the linear code read ~9x.
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return min(times)


def _growth(check: Callable[[bytes], object], layout: str, n: int) -> float:
    small, large = _report(n, layout), _report(4 * n, layout)
    check(small)  # warm up
    return _best(lambda: check(large)) / _best(lambda: check(small))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_structural_check_grows_linearly_with_unclosed_markers(layout: str) -> None:
    contract = ReportContract()

    def check(report: bytes) -> object:
        verdict = check_report(report, (), (), contract)
        malformed = [e for e in verdict.errors if e.code == "citation_malformed"]
        assert len(malformed) == report.count(b"[E:"), "every unclosed marker is reported, as before"
        assert malformed[0].message.startswith("malformed citation marker '[E:")
        return verdict

    growth = _growth(check, layout, 10_000)
    assert growth < 8, f"4x the unclosed markers cost {growth:.1f}x the time (quadratic: ~16x)"


@pytest.mark.parametrize("layout", ["bare", "one_line"])  # many lines: a claim each, linear before too
def test_the_semantic_review_grows_linearly_with_unclosed_markers(layout: str) -> None:
    reviewer = EvidenceSupportReviewer()

    def review(report: bytes) -> object:
        verdict = reviewer.review(report, {})
        assert not verdict.passed and verdict.findings[0].problem == "no_citation"
        assert verdict.findings[0].claim.startswith("A claim [E:"), "unclosed markers are not stripped, as before"
        return verdict

    growth = _growth(review, layout, 5_000)
    assert growth < 8, f"4x the unclosed markers cost {growth:.1f}x the time (quadratic: ~16x)"

