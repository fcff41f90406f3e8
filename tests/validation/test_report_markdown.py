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


@pytest.mark.parametrize("body", ["\u200b", "\ufeff", "\u200b\u2060 \u200d", "\x00", "<!-- TODO -->",
                                  "<!--\nwrite this later\n-->"])
def test_a_section_with_only_invisible_characters_or_a_comment_is_empty(body: str, contract, evidence) -> None:
    text = GOOD.replace("Test material only.", body)
    assert codes(text, contract, evidence) == ["section_empty"]


@pytest.mark.parametrize("body", ["Only a caveat \u200b here.", "```\nlog line\n```", "<!-- c --> Some text."])
def test_visible_text_code_or_text_beside_a_comment_fills_a_section(body: str, contract, evidence) -> None:
    assert codes(GOOD.replace("Test material only.", body), contract, evidence) == []


@pytest.mark.parametrize("wrap", [("```text\n", "\n```"), ("~~~~\n", "\n~~~~"), ("<!--\n", "\n-->")])
def test_headings_inside_a_code_block_or_a_comment_are_not_sections(wrap: tuple[str, str], contract,
                                                                    evidence) -> None:
    hidden = "## Limitations\nTest material only."
    text = GOOD.replace(hidden, wrap[0] + hidden + wrap[1])
    assert codes(text, contract, evidence) == ["section_missing"]


def test_a_code_comment_inside_a_fence_does_not_end_the_section(contract, evidence) -> None:
    text = GOOD.replace("## Limitations\nTest material only.", "## Limitations\n```sh\n# only on Linux\n```\n")
    assert codes(text, contract, evidence) == []


CITED_ONLY_HERE = "## Conclusion\nThe runtime decides.\n## Evidence\n{body}\n## Limitations\nTest material only.\n"
BOTH = "[E:harness-boundary] [E:acceptance-snapshot]"


@pytest.mark.parametrize("body", [f"```\n{BOTH}\n```", f"Sources: `{BOTH}`", f"Sources <!-- {BOTH} -->",
                                  f"Sources.\n<!--\n{BOTH}\n-->"])
def test_markers_in_code_or_comments_are_not_citations(body: str, contract, evidence) -> None:
    assert codes(CITED_ONLY_HERE.format(body=body), contract, evidence) == ["too_few_citations"]


def test_markers_in_prose_still_count_beside_code(contract, evidence) -> None:
    body = f"Run `harness-lab check-report` on it.\n```\nx = 1\n```\nSources: {BOTH}."
    assert codes(CITED_ONLY_HERE.format(body=body), contract, evidence) == []


@pytest.mark.parametrize("marker", ["[e:made-up]", "[\u0415:made-up]", "[\u0395:made-up]", "\uff3bE:made-up\uff3d",
                                    "[\uff25\uff1amade-up]", "[E\uff1amade-up]", "[ E:made-up]", "[E :made-up]",
                                    "[e:harness-boundary]"])
def test_a_look_alike_citation_marker_is_malformed_not_ignored(marker: str, contract, evidence) -> None:
    # A reader sees a citation; the check saw no marker at all and passed the report.
    text = GOOD.replace("Test material only.", f"Test material only {marker}.")
    verdict = check_report(text.encode(), READ, evidence, contract.verification.report)
    assert [e.code for e in verdict.errors] == ["citation_malformed"]
    assert marker in verdict.errors[0].message


@pytest.mark.parametrize("prose", ["[see above]", "[Eq. 3]", "[Ex: 2]", "[E]", "arr[e] = 1", "E: fine"])
def test_ordinary_brackets_are_not_markers(prose: str, contract, evidence) -> None:
    assert codes(GOOD.replace("Test material only.", prose), contract, evidence) == []


@pytest.mark.parametrize("heading", [" ## Limitations", "   ## Limitations", "## Limitations ##"])
def test_a_heading_indented_up_to_three_spaces_is_a_heading(heading: str, contract, evidence) -> None:
    assert codes(GOOD.replace("## Limitations", heading), contract, evidence) == []



def test_a_comment_opener_inside_inline_code_opens_no_comment(contract, evidence) -> None:
    text = GOOD.replace("## Evidence", "Write `<!--` to start a note.\n\n## Evidence")
    assert codes(text, contract, evidence) == []


@pytest.mark.parametrize("heading", ["## **Limitations**", "## _Limitations_", "## Limitations:", "## 局限：",
                                     "## Limitations\u200b", "## \uff2c\uff49\uff4d\uff49\uff54\uff41\uff54\uff49\uff4f\uff4e\uff53"])
def test_a_heading_a_reader_sees_as_the_section_name_is_that_section(heading: str, contract, evidence) -> None:
    assert codes(GOOD.replace("## Limitations", heading), contract, evidence) == []


@pytest.mark.parametrize("heading", ["## Limitations of scope", "## L\u0456mitations", "## Limitation"])
def test_other_headings_are_still_other_sections(heading: str, contract, evidence) -> None:
    assert codes(GOOD.replace("## Limitations", heading), contract, evidence) == ["section_missing"]


def test_a_heading_line_padded_with_blanks_is_read_in_linear_time(contract, evidence) -> None:
    # '# a' + 20,000 blanks + 'x': the heading pattern backtracked for minutes (the run's validation hung).
    line = "## Notes" + " " * 20_000 + "x"
    assert codes(GOOD + "\n" + line + "\n" + "|---" + " " * 20_000 + "x\n", contract, evidence) == []


@pytest.mark.parametrize(("line", "level", "title"), [("## Evidence ##", 2, "Evidence"), ("#  C#", 1, "C"),
                                                      ("### ", 3, ""), ("#Evidence", None, None),
                                                      ("   # x", 1, "x"), ("####### x", None, None)])
def test_heading_lines_read_as_before(line: str, level: int | None, title: str | None) -> None:
    from harness_lab.validation._markdown import heading

    assert heading(line) == (None if level is None else (level, title))
