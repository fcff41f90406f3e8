"""Fuzzing the report validator (issue 17): random Markdown-ish texts and mutations of a conforming report
(headings, [E:...] markers and look-alikes, nested fences, comments, emphasis, huge lines, unicode, NULs,
bytes that are not UTF-8) never raise and always come back as a verdict, and the check stays linear in
the report's size, shape by shape (CPU time for n and 4n: a ratio, never a wall-clock bound).

What the fuzzing found: a heading title of many '*' (or '*_' pairs) was peeled one emphasis at a time
by copying the rest (400k: 9.4 s and 80 s of CPU), and the inline-code regex scanned to the paragraph's
end from every opening run that never closed (runs of 1, 2, 3... backticks: 400 KB, 21 s).
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_lab.contract import ReportContract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.validation import MAX_REPORT_BYTES, ReportVerdict, check_report
from harness_lab.validation._markdown import _blank_code_spans, title_key
from harness_lab.validation.report import CheckCode

EVIDENCE = EvidenceCatalogue.from_dir(data_dir() / "evidence")
CONTRACT = ReportContract()
READ = {"harness-boundary", "acceptance-snapshot"}
CONFORMING = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")
CODES = set(get_args(CheckCode))
FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

_PIECES = [
    "# ", "## ", "###### ", "####### ", "#", "Conclusion", "Evidence", "Limitations", "结论", "证据", "局限",
    "**", "__", "*", "_", ":", "\n", "\n\n", "\r\n", "\r", " ", "    ", "\t", "===", "---", "***", "- ", "1. ", "> ",
    "|", "```", "~~~", "````", "`", "``", "<!--", "-->", "[E:", "]", "[E:harness-boundary]",
    "[E:acceptance-snapshot]", "[E:UNKNOWN]", "[E:]", "[E: x]", "[e:", "\uff3bE\uff1a", "\uff3d", "[\u0415:",
    "harness-boundary", "text", "\x00", "\u200b", "\ufeff", "\u2028", "\x85", "\u3164", "é", "😀", "\ud800",
]
_TEXT = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=60).map("".join)


def _verdict_is_data(snapshot: bytes | None) -> ReportVerdict:
    verdict = check_report(snapshot, READ, EVIDENCE, CONTRACT)
    assert isinstance(verdict, ReportVerdict)
    assert verdict.accepted == (not verdict.errors)
    assert {e.code for e in verdict.errors} <= CODES
    verdict.model_dump_json()  # storable as it is: a step record carries it
    return verdict


@FUZZ
@given(_TEXT)
def test_a_random_markdown_text_is_a_verdict(text: str) -> None:
    _verdict_is_data(text.encode("utf-8", "surrogatepass"))  # a lone surrogate is bytes no UTF-8 reader takes


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_are_a_verdict(data: bytes) -> None:
    _verdict_is_data(data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(CONFORMING)), st.integers(0, 40), _TEXT), min_size=1, max_size=4))
def test_a_mutated_conforming_report_is_a_verdict(edits: list[tuple[int, int, str]]) -> None:
    text = CONFORMING
    for at, cut, insert in edits:  # replace `cut` characters at `at` with a random piece
        text = text[:at] + insert + text[at + cut:]
    verdict = _verdict_is_data(text.encode("utf-8", "surrogatepass"))
    if text == CONFORMING:
        assert verdict.accepted


# -- the linear readings are the regex readings they replaced -------------------------------------------
_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
_EMPHASIS = re.compile(r"^(\*\*|__|\*|_)(.+)\1$")


def _title_by_regex(title: str) -> str:
    text = "".join(ch for ch in unicodedata.normalize("NFKC", title) if unicodedata.category(ch) != "Cf").strip()
    while m := _EMPHASIS.match(text):
        text = m.group(2).strip()
    return text.rstrip(":").strip().casefold()


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(["`", "``", "```", "a", " ", "\n", "\t", "\n\n", "\n \n", "x`y"]), max_size=25).map("".join))
def test_code_spans_are_the_ones_the_regex_found(text: str) -> None:
    assert _blank_code_spans(text) == _SPAN.sub(lambda m: " " * len(m.group(0)), text)


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(["*", "**", "_", "__", " ", "a", ":", "\u200b", "\u3000", "Ａ", "\t"]), max_size=14)
       .map("".join))
def test_a_title_peels_as_the_regex_peeled_it(title: str) -> None:
    assert title_key(title) == _title_by_regex(title)


# -- linear time, shape by shape --------------------------------------------------------------------------
# Each shape at n characters (about); 4n must cost under 8x the CPU time of n (quadratic: 16x).
SHAPES: dict[str, Callable[[int], str]] = {
    "a heading of stars": lambda n: "# " + "*" * n + "\n",
    "a heading of emphasis pairs": lambda n: "# " + "*_" * (n // 4) + "x" + "_*" * (n // 4) + "\n",
    "backtick runs of every length": lambda n: "# Conclusion\n" + " ".join("`" * k for k in range(1, int((2 * n) ** 0.5))),
    "one-backtick lines": lambda n: "# Conclusion\n" + "` x\n" * (n // 4),
    "unclosed markers": lambda n: "# Conclusion\n" + "[E:" * (n // 3),
    "fullwidth look-alikes": lambda n: "# Conclusion\n" + "\uff3bE\uff1a" * (n // 3),
    "required headings, nested": lambda n: "".join(f"{'#' * (1 + i % 6)} Evidence\nx [E:harness-boundary]\n"
                                                   for i in range(n // 40)),
    "comments and fences": lambda n: "## Evidence\n" + "<!-- a\n```\n-->\n~~~~\n" * (n // 20),
    "setext paragraphs": lambda n: ("Conclusion\n" * 3 + "---\n") * (n // 37),
    "one huge line": lambda n: "# Conclusion\n" + "x [E:harness-boundary] " * (n // 24),
}


def _cpu(text: bytes, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):  # the best of a few: a collection or a page fault is not the validator
        start = time.process_time()
        check_report(text, READ, EVIDENCE, CONTRACT)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_check_is_linear_in_the_report_size(shape: str) -> None:
    make = SHAPES[shape]
    # Backtick runs of every length cost n^1.5 to a scan per opening run (8x for 4x): told apart at 16x.
    factor = 16 if shape == "backtick runs of every length" else 4
    small, large = make(32_000).encode(), make(32_000 * factor).encode()
    assert len(large) < MAX_REPORT_BYTES
    a, b = _cpu(small), _cpu(large)
    # Linear is ~factor x; below 5 ms the clock's grain dominates, so such a pair passes as it is.
    assert b < 2 * factor * max(a, 0.005), f"{shape}: {len(small)} bytes {a:.3f}s, {len(large)} bytes {b:.3f}s CPU"


def test_a_report_of_megabytes_is_checked_in_linear_time() -> None:
    # Every shape at once, 512 KiB against 2 MiB (the limit is 4 MiB).
    mixed = "".join(make(4_000) for make in SHAPES.values()).encode()
    small, large = mixed * (2**19 // len(mixed)), mixed * (2**21 // len(mixed))
    assert len(large) < MAX_REPORT_BYTES
    a, b = _cpu(small, 2), _cpu(large, 2)
    assert b < 8 * a, f"{len(small)} bytes {a:.3f}s, {len(large)} bytes {b:.3f}s CPU"


def test_a_flood_of_bad_citations_is_a_small_verdict() -> None:
    # 4 MiB of '[E:' made 1.3M failures (175 MB of JSON) in a verdict a step stores and feeds back.
    flood = ("# Conclusion\n" + "[E:" * 600_000 + "\n" + "".join(f"[E:nope-{i}] " for i in range(100_000))
             + "[E:unclosed " + "x" * 100_000).encode()
    verdict = check_report(flood, READ, EVIDENCE, CONTRACT)
    assert len(verdict.model_dump_json()) - len(str(verdict.cited)) < 10_000
    assert [e.message for e in verdict.errors if e.message.startswith("and ")] == [
        "and 599981 more malformed citation markers", "and 99980 more unknown evidence ids"]
