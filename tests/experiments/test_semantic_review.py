"""The default semantic reviewer: a deterministic claim-to-evidence check over the local notes."""

from __future__ import annotations

import pytest

from harness_lab.evidence import EvidenceCatalogue, EvidenceNote
from harness_lab.scenarios import load_scenario
from harness_lab.validation.semantic import EvidenceSupportReviewer


def _report(name: str, index: int = -1) -> bytes:
    texts = [str(a["text"]) for a in load_scenario(name).actions if a.get("kind") == "write_report"]
    return texts[index].encode()


def _doc(conclusion: str, evidence_lines: str = "") -> bytes:
    return (f"# R\n\n## Conclusion\n{conclusion}\n\n## Evidence\n{evidence_lines}\n\n"
            "## Limitations\nAll of this is test material.\n").encode()


def test_conforming_report_passes(evidence: EvidenceCatalogue) -> None:
    verdict = EvidenceSupportReviewer().review(_report("conforming_report"), evidence)
    assert verdict.passed and verdict.layer == "semantic"
    assert len(verdict.findings) == 3 and all(f.problem == "ok" for f in verdict.findings)


def test_overclaiming_conclusion_fails_on_the_absolute_terms_no_note_uses(evidence: EvidenceCatalogue) -> None:
    verdict = EvidenceSupportReviewer().review(_report("overclaiming_conclusion"), evidence)
    assert not verdict.passed
    bad = [f for f in verdict.findings if f.problem != "ok"]
    assert len(bad) == 1 and bad[0].section == "conclusion" and bad[0].problem == "overclaim"
    assert set(bad[0].unsupported_terms) == {"guaranteed", "100%", "any"}
    assert "overclaim" in verdict.reasons[0]


def test_absolute_term_is_fine_when_the_cited_note_uses_it(evidence: EvidenceCatalogue) -> None:
    # acceptance-snapshot says "rejected every incomplete report"
    text = _doc("Structural checks rejected every incomplete report in the scripted scenarios [E:acceptance-snapshot].")
    assert EvidenceSupportReviewer().review(text, evidence).passed
    text = _doc("Structural checks rejected every incomplete report in the scripted scenarios [E:budget-gates].")
    verdict = EvidenceSupportReviewer().review(text, evidence)
    assert not verdict.passed and verdict.findings[0].problem == "overclaim"


def test_off_topic_citation_is_weak_support(evidence: EvidenceCatalogue) -> None:
    text = _doc("Acceptance binds the validated bytes to a receipt [E:budget-gates].")
    finding = EvidenceSupportReviewer().review(text, evidence).findings[0]
    assert finding.problem == "weak_support" and finding.support < 0.3
    assert EvidenceSupportReviewer(min_support=0.0).review(text, evidence).passed


def test_uncited_conclusion_and_unknown_source_fail(evidence: EvidenceCatalogue) -> None:
    verdict = EvidenceSupportReviewer().review(_doc("Harnesses are good."), evidence)
    assert [f.problem for f in verdict.findings] == ["no_citation"]
    verdict = EvidenceSupportReviewer().review(_doc("A harness decides [E:harness-boundary].", "- Surveys agree [E:nope]."), evidence)
    assert [f.problem for f in verdict.findings] == ["ok", "unknown_source"] and not verdict.passed


def test_chinese_sections_are_reviewed() -> None:
    notes = {"n1": EvidenceNote(id="n1", data="运行时决定哪些证据可以推进任务状态。".encode())}
    good = "# 报告\n\n## 结论\n运行时决定证据推进任务状态 [E:n1]。\n\n## 局限\n测试材料。\n".encode()
    bad = "# 报告\n\n## 结论\n任何模型都能保证百分之百正确 [E:n1]。\n\n## 局限\n测试材料。\n".encode()
    reviewer = EvidenceSupportReviewer()
    assert reviewer.review(good, notes).passed
    verdict = reviewer.review(bad, notes)
    assert not verdict.passed and {"任何", "保证", "百分之百"} <= set(verdict.findings[0].unsupported_terms)


def test_bad_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="min_support"):
        EvidenceSupportReviewer(min_support=2.0)
