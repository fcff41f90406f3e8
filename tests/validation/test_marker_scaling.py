"""Thousands of unclosed ``[E:`` markers cost linear work to validate and review: a search per marker for
its closing ']' ran to the end of the text (report.find_citations), and the reviewer's marker-stripping
pattern tried each unclosed marker to the end of its claim (semantic). Measured as characters the string
searches read (deterministic), never as time: a linear scan reads each character a few times, the
quadratic one read the rest of the text once per marker."""

from __future__ import annotations

import random
import re

import pytest

from harness_lab.contract import ReportContract
from harness_lab.validation.report import check_report, find_citations
from harness_lab.validation.semantic import EvidenceSupportReviewer, _without_markers

# One long line; one per line; nothing but markers. Each marker carries a few characters of its own, as
# an unclosed marker in a real report does.
LAYOUTS = {
    "one_line": "[E:x {pad} ",
    "many_lines": "[E:x {pad}\n",
    "bare": "[E:{pad}",
    "lookalike": "[e:x {pad} ",  # a look-alike marker: also searched for a fullwidth bracket
}
N = 2_000


class CountingText(str):
    """A str whose ``find`` adds up the characters each call read (to the hit, or to the end)."""

    scanned: int

    def find(self, sub: str, start: int | None = 0, end: int | None = None) -> int:  # type: ignore[override]
        begin = start or 0
        hit = super().find(sub, begin, len(self) if end is None else end)
        self.scanned = getattr(self, "scanned", 0) + ((len(self) if hit == -1 else hit) - begin)
        return hit


def _body(layout: str, n: int = N) -> str:
    return LAYOUTS[layout].format(pad="-" * 40) * n


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_finding_citations_reads_the_text_a_bounded_number_of_times(layout: str) -> None:
    text = CountingText(f"A claim {_body(layout)} and a closing ] at the very end")
    ids, malformed = find_citations(text)
    assert ids == [] and len(malformed) == N, "every unclosed marker is reported, as before"
    # Linear: each ']' search resumes past the last hit. Quadratic read ~N/2 times the text.
    assert text.scanned <= 3 * len(text), f"read {text.scanned / len(text):.0f}x the text for {N} markers"


@pytest.mark.parametrize("layout", ["bare", "one_line"])
def test_stripping_markers_from_a_claim_reads_it_a_bounded_number_of_times(layout: str) -> None:
    claim = CountingText(f"A claim {_body(layout)}")
    assert _without_markers(claim) == re.sub(r"\[E:[^\]]*\]", " ", claim)
    assert claim.scanned <= 3 * len(claim), f"read {claim.scanned / len(claim):.0f}x the claim"


def test_stripping_markers_matches_the_pattern_it_replaces() -> None:
    rng = random.Random(7)
    pieces = ["[E:", "]", "x", " ", "[E:ok]", "[", "E:", "\n", "[E:]"]
    for _ in range(5_000):
        claim = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _without_markers(claim) == re.sub(r"\[E:[^\]]*\]", " ", claim), claim


def test_a_report_of_thousands_of_unclosed_markers_gets_its_verdicts() -> None:
    report = f"# Report\n\n## Conclusion\nA claim {_body('one_line')}\n\n## Evidence\n- none\n\n## Limitations\nTest.\n"
    verdict = check_report(report.encode(), (), (), ReportContract())
    malformed = [e for e in verdict.errors if e.code == "citation_malformed"]
    # the first 20 spelled out, the rest counted (a verdict is stored and fed back: it stays small)
    assert len(malformed) == 21 and malformed[0].message.startswith("malformed citation marker '[E:")
    assert malformed[-1].message == f"and {N - 20} more malformed citation markers"
    review = EvidenceSupportReviewer().review(report.encode(), {})
    assert not review.passed and review.findings[0].problem == "no_citation"
    assert review.findings[0].claim.startswith("A claim [E:"), "unclosed markers are not stripped, as before"
