"""Review pass on the report contract: reports a harness engineer writes that the contract misread."""

from __future__ import annotations

from harness_lab.paths import data_dir
from harness_lab.validation import check_report
from harness_lab.validation.semantic import EvidenceSupportReviewer

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
READ = {"harness-boundary", "acceptance-snapshot"}


def codes(text: str, contract, evidence) -> list[str]:
    return [e.code for e in check_report(text.encode(), READ, evidence, contract.verification.report).errors]


def _setext(text: str) -> str:
    # '## Title' -> 'Title' underlined with '---' (pandoc and many exporters write headings so)
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            out += [line[3:], "-" * len(line[3:])]
        elif line.startswith("# "):
            out += [line[2:], "=" * len(line[2:])]
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_setext_headings_are_sections(contract, evidence) -> None:
    text = _setext(GOOD)
    assert "Conclusion\n----------" in text
    assert codes(text, contract, evidence) == []


def test_a_paragraph_under_a_dash_line_is_a_subheading_not_body(contract, evidence) -> None:
    # CommonMark renders 'Test material only.' over '---' as a level-2 heading: Limitations shows nothing.
    text = GOOD.replace("## Limitations", "# Limitations") + "---\n"
    assert codes(text, contract, evidence) == ["section_empty"]
    # after a list item or a blank line the same dashes are a rule
    assert codes(GOOD.replace("## Limitations", "- item\n---\n\n---\n## Limitations"), contract, evidence) == []


def test_the_semantic_reviewer_reads_setext_sections_too(evidence) -> None:
    text = "Conclusion\n==========\nThe model guarantees every report is perfect [E:harness-boundary].\n"
    verdict = EvidenceSupportReviewer().review(text.encode(), evidence)
    assert [f.problem for f in verdict.findings] == ["overclaim"]
    assert verdict.findings[0].section == "conclusion"


def test_a_required_section_whose_only_content_is_another_required_section_is_empty(contract, evidence) -> None:
    # '## Evidence' followed by '### Limitations': the Limitations text counted for both sections.
    nested = GOOD.replace("## Evidence\n- The runtime decides [E:harness-boundary].\n"
                          "- Accepted bytes are bound to a receipt [E:acceptance-snapshot].\n\n## Limitations",
                          "## Evidence\n### Limitations")
    assert "### Limitations\nTest material only." in nested
    assert codes(nested, contract, evidence) == ["section_empty"]
    # a subsection that is no required section still belongs to its parent's body
    sourced = GOOD.replace("## Evidence\n", "## Evidence\n### Source notes\n")
    assert codes(sourced, contract, evidence) == []


def test_the_semantic_reviewer_does_not_score_a_limitations_subsection_as_conclusion_claims(evidence) -> None:
    # '### Limitations' under '## Conclusion' was read as Conclusion text: an uncited limitation
    # failed the review as 'no_citation'.
    text = ("## Conclusion\nFinish requests are claims the runtime checks [E:harness-boundary].\n"
            "### Details\nThe runtime decides [E:harness-boundary].\n"
            "### Limitations\nThis is test material and was not compared with real runs.\n"
            "### More details\nAn uncited sentence.\n")
    verdict = EvidenceSupportReviewer().review(text.encode(), evidence)
    assert [(f.section, f.problem) for f in verdict.findings] == [
        ("conclusion", "ok"), ("conclusion", "ok"), ("conclusion", "no_citation")]
