"""The report contract read as Markdown: what a reader sees decides, not what the bytes spell."""

from __future__ import annotations

import pytest

from harness_lab.paths import data_dir
from harness_lab.validation import check_report

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
READ = {"harness-boundary", "acceptance-snapshot"}


def codes(text: str | bytes, contract, evidence) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [e.code for e in check_report(data, READ, evidence, contract.verification.report).errors]


def test_a_utf8_byte_order_mark_before_the_first_heading_is_not_part_of_it(contract, evidence) -> None:
    # Notepad and some exporters write one; the first section was 'missing' behind it.
    starts_with_conclusion = GOOD.split("\n", 2)[2]
    assert starts_with_conclusion.startswith("## Conclusion")
    assert codes("\ufeff" + starts_with_conclusion, contract, evidence) == []
    assert codes(b"\xef\xbb\xbf" + GOOD.encode(), contract, evidence) == []


def test_the_semantic_reviewer_reads_past_a_byte_order_mark_too(evidence) -> None:
    from harness_lab.validation.semantic import EvidenceSupportReviewer

    text = "\ufeff## Conclusion\nThe model guarantees every report is perfect [E:harness-boundary].\n"
    verdict = EvidenceSupportReviewer().review(text.encode(), evidence)
    assert [f.problem for f in verdict.findings] == ["overclaim"]
