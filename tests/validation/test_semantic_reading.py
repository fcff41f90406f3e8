"""The semantic reviewer reads the claims a reader sees, wherever the Markdown puts them."""

from __future__ import annotations

import pytest

from harness_lab.validation.semantic import EvidenceSupportReviewer

OVERCLAIM = "The model guarantees every report is perfect [E:harness-boundary]."


def problems(text: str, evidence) -> list[str]:
    return [f.problem for f in EvidenceSupportReviewer().review(text.encode(), evidence).findings]


@pytest.mark.parametrize("sub", ["### Key finding", "#### Details", "### 要点"])
def test_claims_under_a_subheading_of_the_conclusion_are_reviewed(sub: str, evidence) -> None:
    # The structural check counts a subsection's text as the Conclusion's; the reviewer skipped it.
    assert problems(f"## Conclusion\n{sub}\n{OVERCLAIM}\n", evidence) == ["overclaim"]


def test_a_sibling_or_higher_heading_still_ends_the_claim_section(evidence) -> None:
    text = f"## Conclusion\nFinish requests are claims [E:harness-boundary].\n## Limitations\n{OVERCLAIM}\n"
    assert "overclaim" not in problems(text, evidence)
    assert "overclaim" not in problems(f"### Conclusion\nok [E:harness-boundary].\n## Notes\n{OVERCLAIM}\n", evidence)


SUPPORTED = "Finish requests are claims; the runtime decides [E:harness-boundary]."


@pytest.mark.parametrize("line", [f"1. {SUPPORTED}", f"2) {SUPPORTED}", f"> {SUPPORTED}", f"- [x] {SUPPORTED}",
                                  f"  10. {SUPPORTED}"])
def test_list_numbers_quote_marks_and_task_boxes_are_not_claims(line: str, evidence) -> None:
    # '1.' became a claim of its own (no citation: the conclusion failed review).
    verdict = EvidenceSupportReviewer().review(f"## Conclusion\n{line}\n".encode(), evidence)
    assert [(f.claim[:26], f.cited) for f in verdict.findings] == [("Finish requests are claims", ("harness-boundary",))]


def test_a_table_is_read_by_its_rows_not_its_header_or_rule(evidence) -> None:
    text = f"## Conclusion\n| claim | source |\n|---|:---:|\n| {OVERCLAIM} |\n"
    assert problems(text, evidence) == ["overclaim"]


def test_a_bold_or_colon_conclusion_heading_is_reviewed(evidence) -> None:
    assert problems(f"## **Conclusion:**\n{OVERCLAIM}\n", evidence) == ["overclaim"]


@pytest.mark.parametrize("line", ["- [E:harness-boundary] [E:acceptance-snapshot]", "[E:harness-boundary]",
                                  "([E:harness-boundary], [E:acceptance-snapshot])"])
def test_a_line_of_citations_alone_is_no_claim_to_fail(line: str, evidence) -> None:
    # It was a 'weak_support' finding with an empty claim, failing a report for nothing it said.
    text = f"## Conclusion\nFinish requests are claims [E:harness-boundary].\n## Evidence\n{line}\n"
    assert problems(text, evidence) == ["ok"]


def test_a_conclusion_of_citations_alone_still_fails(evidence) -> None:
    assert problems("## Conclusion\n[E:harness-boundary]\n", evidence) == ["weak_support"]
