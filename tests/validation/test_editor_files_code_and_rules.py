"""An evidence folder being edited, citations in indented code, and a section holding only a rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.validation import check_report
from harness_lab.validation.semantic import EvidenceSupportReviewer

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
READ = {"harness-boundary", "acceptance-snapshot"}


def codes(text: str, contract, evidence) -> list[str]:
    return [e.code for e in check_report(text.encode(), READ, evidence, contract.verification.report).errors]


def test_hidden_editor_files_in_the_evidence_folder_are_skipped_but_a_visible_bad_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("a note\n", encoding="utf-8")
    (tmp_path / ".draft.md").write_text("not yet\n", encoding="utf-8")
    (tmp_path / "notes.md~").write_text("backup\n", encoding="utf-8")
    (tmp_path / ".notes.md.swp").write_bytes(b"\x00vim swap")
    os.symlink("user@host.1234:1700000000", tmp_path / ".#notes.md")  # Emacs's lock: a dangling symlink
    assert list(EvidenceCatalogue.from_dir(tmp_path)) == ["notes"]

    (tmp_path / "My Notes.md").write_text("meant as a note\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"My Notes\.md: evidence id 'My Notes' must match \[a-z0-9_-\]\+"):
        EvidenceCatalogue.from_dir(tmp_path)


def test_a_citation_in_an_indented_code_block_is_neither_cited_nor_malformed(contract, evidence) -> None:
    # Only the code block cites acceptance-snapshot; [E: x] there is an example, not a marker.
    text = GOOD.replace(" [E:acceptance-snapshot]", "") + "\nExample:\n\n    see [E:acceptance-snapshot] and [E: x]\n\tor [E:\n"
    verdict = check_report(text.encode(), READ, evidence, contract.verification.report)
    assert [e.code for e in verdict.errors] == ["too_few_citations"]
    assert verdict.cited == ("harness-boundary",)
    # but an indented line continuing a paragraph or a list item is prose: it cites
    lazy = GOOD.replace(" [E:acceptance-snapshot]", "") + "\nMore text\n    with [E:acceptance-snapshot].\n"
    listed = GOOD.replace(" [E:acceptance-snapshot]", "").replace(
        "- The runtime decides", "- Bound to a receipt:\n\n    [E:acceptance-snapshot]\n- The runtime decides")
    assert codes(lazy, contract, evidence) == []
    assert codes(listed, contract, evidence) == []


def test_the_semantic_reviewer_does_not_score_a_claim_in_an_indented_code_block(evidence) -> None:
    text = "## Conclusion\nFinish requests are claims [E:harness-boundary].\n\n    The model guarantees everything [E:harness-boundary].\n"
    verdict = EvidenceSupportReviewer().review(text.encode(), evidence)
    assert [f.problem for f in verdict.findings] == ["ok"]


@pytest.mark.parametrize("rule", ["---", "***", "* * *", "___", "  - - -"])
def test_a_section_whose_only_content_is_a_thematic_break_is_empty(rule: str, contract, evidence) -> None:
    text = GOOD.replace("Test material only.", "\n" + rule)
    assert codes(text, contract, evidence) == ["section_empty"]


def test_a_thematic_break_in_the_conclusion_is_not_an_uncited_claim(evidence) -> None:
    text = "## Conclusion\nFinish requests are claims [E:harness-boundary].\n\n___\n"
    verdict = EvidenceSupportReviewer().review(text.encode(), evidence)
    assert [f.problem for f in verdict.findings] == ["ok"]
