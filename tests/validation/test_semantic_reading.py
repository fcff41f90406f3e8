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
