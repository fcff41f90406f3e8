"""Seed 004's report contract, checked against one snapshot of the report's bytes.

Checks, in order: the report exists and is non-empty; each required section (Markdown heading of any
level, ATX or setext, whose text is the section name, case-insensitive, bold or with a colon alike; English or
Chinese; not inside a code block or an HTML comment) exists and has a body a reader can see (a
comment, zero-width characters or a thematic break alone leave it empty); every citation marker is well formed (all
``[E:`` markers are scanned first, so ``[E:UNKNOWN]``, ``[E:]``, ``[E: x]`` and an unclosed ``[E:``
are errors, not ignored; markers in code (fenced or indented) or comments are neither); every cited id is a known
evidence id *and* was read in this run; at least N distinct such ids are cited.

Passing means "structurally conforming", never "factually supported".
"""

from __future__ import annotations

import re
from collections.abc import Collection

from ..contract import ReportContract
from ..evidence import EVIDENCE_ID
from ..records.verdicts import CheckCode, CheckFailure, ReportVerdict
from ._markdown import Line, headings, prose_text, read_lines, thematic_break, title_key, visible

__all__ = ["MAX_REPORT_BYTES", "CheckCode", "CheckFailure", "ReportVerdict", "check_report", "find_citations"]

# A report is read by a person: past this it is refused before it is parsed (the checks are linear,
# but a run's finish should not take seconds on a generated flood).
MAX_REPORT_BYTES = 4 << 20
# Failures of one code spelled out, and the characters of a marker quoted; the rest are counted. A
# verdict is stored with its step and fed back: 4 MiB of '[E:' made 1.3M failures, 175 MB of JSON.
_LISTED = 20
_QUOTED = 80

_MARKER = "[E:"
# The marker and what a reader would take for it: any case, Cyrillic/Greek/fullwidth E, fullwidth
# bracket or colon, blanks inside.
_MARKER_LIKE = re.compile("[\\[\uff3b][ \\t]*[Ee\u0415\u0435\u0395\u03b5\uff25\uff45][ \\t]*[:\uff1a]")


def check_report(
    snapshot: bytes | None,
    read_ids: Collection[str],
    known_ids: Collection[str],
    contract: ReportContract,
) -> ReportVerdict:
    errors: list[CheckFailure] = []

    def fail(code: CheckCode, message: str) -> None:
        errors.append(CheckFailure(code=code, message=message))

    if snapshot is None:
        fail("report_missing", f"no report at {contract.path}")
        return ReportVerdict(accepted=False, errors=tuple(errors))
    if len(snapshot) > MAX_REPORT_BYTES:
        fail("report_too_large", f"{contract.path} is over {MAX_REPORT_BYTES >> 20} MiB; write a report a person can review")
        return ReportVerdict(accepted=False, errors=tuple(errors))
    try:
        text = snapshot.decode("utf-8-sig")  # a leading byte order mark is not part of the first heading
    except UnicodeDecodeError:
        fail("report_not_text", f"{contract.path} is not UTF-8 text")
        return ReportVerdict(accepted=False, errors=tuple(errors))
    if not visible(text):
        fail("report_empty", f"{contract.path} is empty")
        return ReportVerdict(accepted=False, errors=tuple(errors))

    lines = read_lines(text)
    bodies = _section_bodies(lines, {title_key(name) for names in contract.sections for name in names})
    for names in contract.sections:
        found = [bodies[key] for key in map(title_key, names) if key in bodies]
        label = " / ".join(names)
        if not found:
            fail("section_missing", f"section {label} is missing")
        elif not any(visible(body) for body in found):
            fail("section_empty", f"section {label} is empty")

    cited, malformed = find_citations(prose_text(lines))  # a marker in code or a comment cites nothing
    for marker in malformed[:_LISTED]:
        quoted = marker if len(marker) <= _QUOTED else marker[:_QUOTED] + "..."
        fail("citation_malformed", f"malformed citation marker {quoted!r}; use [E:<id>] with id [a-z0-9_-]+")
    if len(malformed) > _LISTED:
        fail("citation_malformed", f"and {len(malformed) - _LISTED} more malformed citation markers")
    valid: list[str] = []
    seen: dict[CheckCode, int] = {"citation_unknown": 0, "citation_not_read": 0}
    for cid in dict.fromkeys(cited):
        if cid in known_ids and cid in read_ids:
            valid.append(cid)
            continue
        code: CheckCode = "citation_unknown" if cid not in known_ids else "citation_not_read"
        seen[code] += 1
        if seen[code] <= _LISTED:
            fail(code, f"cites unknown evidence id {cid!r}" if code == "citation_unknown"
                 else f"cites {cid!r}, which was not read in this run")
    for code, count in seen.items():
        if count > _LISTED:
            fail(code, f"and {count - _LISTED} more " + ("unknown evidence ids" if code == "citation_unknown"
                                                         else "ids not read in this run"))
    if len(valid) < contract.min_distinct_citations:
        fail(
            "too_few_citations",
            f"cites {len(valid)} distinct evidence item(s) read in this run; "
            f"at least {contract.min_distinct_citations} required",
        )
    return ReportVerdict(accepted=not errors, errors=tuple(errors), cited=tuple(dict.fromkeys(cited)))


def find_citations(text: str) -> tuple[list[str], list[str]]:
    """Every ``[E:`` marker: (well-formed ids in order, malformed markers as written).

    A look-alike of the marker (``[e:``, a Cyrillic or Greek E, fullwidth brackets or colon, a
    space inside) is a malformed marker: a reader takes it for a citation, so it is never skipped.
    """
    ids: list[str] = []
    malformed: list[str] = []
    starts = [(m.start(), m.group()) for m in _MARKER_LIKE.finditer(text)]
    # The next ']' (and fullwidth one) at or after the marker, searched again only once a marker is past
    # it (-1: there is none): a search per marker ran to the end of the text for every unclosed one.
    square = wide = -2
    for n, (start, marker) in enumerate(starts):
        following = starts[n + 1][0] if n + 1 < len(starts) else -1
        if square != -1 and square < start:
            square = text.find("]", start)
        if marker != _MARKER:
            if wide != -1 and wide < start:
                wide = text.find("\uff3d", start)
            closes = [c for c in (square, wide) if c != -1]
            close = min(closes) if closes else -1
            end = close + 1 if close != -1 and (following == -1 or close < following) else (
                following if following != -1 else len(text))
            malformed.append(text[start:end].split("\n", 1)[0])
            continue
        close = square
        if close == -1 or (following != -1 and following < close):
            end = following if following != -1 else len(text)
            malformed.append(text[start:end].split("\n", 1)[0])
        else:
            cid = text[start + len(_MARKER) : close]
            if EVIDENCE_ID.fullmatch(cid):
                ids.append(cid)
            else:
                malformed.append(text[start : close + 1])
    return ids, malformed


def _section_bodies(lines: list[Line], required: Collection[str]) -> dict[str, str]:
    """Heading text (casefolded) -> body up to the next heading of the same or a higher level, or
    up to a required section's heading at any level: an empty Evidence whose only content is a
    nested Limitations shows a reader nothing of its own (the text counted for both).

    Only headings a reader sees count (not in a code block or a comment); the body keeps code
    content and drops comments, so :func:`visible` tells whether the section shows anything.
    """
    found = [(start, stop, level, title_key(title)) for start, stop, level, title in headings(lines)]
    in_heading = {j for start, stop, *_ in found for j in range(start, stop)}
    # Each heading's end in linear time (a report of 100k headings took minutes when each heading
    # scanned all the ones after it): the next heading of the same or a higher level (a monotonic
    # stack), or the next required section's heading (one pass from the end), whichever comes first.
    ends = [len(lines)] * len(found)
    open_headings: list[int] = []
    for n, (start, _, level, _) in enumerate(found):
        while open_headings and found[open_headings[-1]][2] >= level:
            ends[open_headings.pop()] = start
        open_headings.append(n)
    next_required = len(lines)
    for n in range(len(found) - 1, -1, -1):
        ends[n] = min(ends[n], next_required)
        if found[n][3] in required:
            next_required = found[n][0]
    parts: dict[str, list[str]] = {}
    for (_, after, _, key), end in zip(found, ends, strict=True):
        if key not in required:  # only required sections are read; a required heading ends any body
            continue
        # a thematic break ('---' alone) is a drawn line, not content
        parts.setdefault(key, []).append("\n".join(
            line.text for j, line in enumerate(lines[after:end], after)
            if j not in in_heading and (line.code or not thematic_break(line.text))))
    return {key: "".join(texts) for key, texts in parts.items()}
