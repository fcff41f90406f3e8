"""How a report reads once rendered: which lines are code, which text a comment hides.

The report contract judges what a reader of the rendered Markdown sees. A heading inside a fenced
code block or an HTML comment is not a section; a citation there is not a citation; a section whose
only "text" is a comment or invisible characters (zero-width spaces, a stray byte order mark, NUL)
is empty. This is a small reading of CommonMark (fences of three or more backticks or tildes, up to
three spaces indented; indented code blocks; ``<!-- ... -->`` comments, an unclosed one running to
the end; inline code spans; thematic breaks), not a full parser: where it errs, it errs towards
fewer sections and citations (a reject), never towards more.

An indented code block is a run of lines indented four spaces (or a tab) that starts where no
paragraph is open: at the start, after a blank line, a heading, a thematic break, a closing fence or
an HTML comment block. Lists are tracked only simply: after a list item, indented lines are its
continuation (not code) until a line at column 0 that is not an item starts after a blank line
(or is a heading or a fence); code nested inside a list item is therefore read as prose.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from typing import NamedTuple

__all__ = ["Line", "heading", "headings", "prose_text", "read_lines", "thematic_break", "title_key", "visible"]

# The opening of an ATX heading; the title is trimmed in Python (a pattern that also trims the
# closing #s and blanks backtracked quadratically and worse on a line of many blanks).
_HEADING_OPEN = re.compile(r" {0,3}(#{1,6})[ \t]")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# A code span: a run of backticks, then the next run of exactly as many, no blank line between (see
# _blank_code_spans; as a regex, (?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`) under DOTALL, whose
# every unmatched opener scanned to its paragraph's end: runs of 1, 2, 3... backticks took minutes).
_TICKS = re.compile(r"`+")
_BREAK = re.compile(r"(?=\n[ \t]*\n)")  # where a blank line starts: no span crosses it
# A setext underline ('Title' over '====' or '----'), and the starts of blocks a paragraph line may
# not begin with for its paragraph to be a setext title (list item, quote, table row, indented code).
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_OTHER_BLOCK = re.compile(r" {0,3}(?:[-+*>|]|\d{1,9}[.)])(?:[ \t]|$)| {4}|\t")
_EMPHASIS = ("**", "__", "*", "_")  # tried in this order, as a reader pairs them
_INDENTED = re.compile(r" {4}| {0,3}\t")
_LIST_ITEM = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_THEMATIC_BREAK = re.compile(r" {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})")
# Letters that render as nothing although Unicode does not call them format characters.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


class Line(NamedTuple):
    text: str  # the line as a reader sees it: comments removed (code lines: unchanged)
    code: bool  # inside a fenced or indented code block (its content)
    fence: bool  # a fence delimiter line


def read_lines(text: str) -> list[Line]:
    out: list[Line] = []
    fence: str | None = None  # the opening fence's run, while inside a block
    comment = False
    indented = False  # inside an indented code block
    may_open = True  # no paragraph is open: an indented line here starts a code block
    in_list = False  # after a list item: an indented line may be its continuation
    for raw in text.splitlines():
        if fence is not None:
            m = _FENCE.match(raw)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence, may_open = None, True
                out.append(Line("", False, True))
            else:
                out.append(Line(raw, True, False))
            continue
        blank = not raw.strip()
        if not comment and not blank and _INDENTED.match(raw) and (indented or (may_open and not in_list)):
            indented = True
            out.append(Line(raw, True, False))
            continue
        if not blank:
            indented = False
        if not comment and (m := _FENCE.match(raw)) and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            in_list = in_list and raw[0] in " \t"
            out.append(Line("", False, True))
            continue
        in_comment = comment
        kept: list[str] = []
        # '<!--' inside a code span on the line opens nothing (code spans bind first)
        plain = _blank_code_spans(raw) if "`" in raw else raw
        i = 0
        while i < len(raw):
            if comment:
                j = raw.find("-->", i)
                if j == -1:
                    break
                comment, i = False, j + 3
            else:
                j = plain.find("<!--", i)
                if j == -1:
                    kept.append(raw[i:])
                    break
                kept.append(raw[i:j])
                comment, i = True, j + 4
        line = "".join(kept)
        if blank:
            may_open = True
        elif not in_comment:  # a line wholly inside a comment changes nothing
            if _LIST_ITEM.match(line):
                in_list = True
            elif in_list and line[:1] not in ("", " ", "\t") and (may_open or heading(line)):
                in_list = False
            may_open = not line.strip() or bool(heading(line)) or thematic_break(line)
        out.append(Line(line, False, False))
    return out


def thematic_break(text: str) -> bool:
    """True for a line a reader sees as a horizontal rule (``---``, ``* * *``, ``___``)."""
    return bool(_THEMATIC_BREAK.fullmatch(text))


def prose_text(lines: list[Line]) -> str:
    """The report's prose: no fenced code, no comments, inline code spans blanked."""
    text = "\n".join("" if line.code or line.fence else line.text for line in lines)
    return _blank_code_spans(text) if "`" in text else text


def _blank_code_spans(text: str) -> str:
    """``text`` with each inline code span (its backticks too) spaced out, in linear time: an opening
    run closes at the next run of the same length unless a blank line comes first; an opening run
    that never closes is text, and the next run is tried."""
    if text.count("`") < 2:  # a line's one backtick (read_lines asks per line)
        return text
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    if len(runs) < 2:
        return text
    breaks = [m.start() for m in _BREAK.finditer(text)]
    following: list[int] = [-1] * len(runs)  # the index of the next run of the same length
    last: dict[int, int] = {}
    for n in range(len(runs) - 1, -1, -1):
        size = runs[n][1] - runs[n][0]
        following[n] = last.get(size, -1)
        last[size] = n
    out: list[str] = []
    done = n = 0
    while n < len(runs):
        close = following[n]
        if close == -1:
            n += 1
            continue
        start, opened = runs[n]
        at = bisect_left(breaks, opened)
        if at < len(breaks) and breaks[at] < runs[close][0]:  # a blank line before the closing run
            n += 1
            continue
        end = runs[close][1]
        out += [text[done:start], " " * (end - start)]
        done, n = end, close + 1
    out.append(text[done:])
    return "".join(out)


def visible(text: str) -> bool:
    """True when *text* holds a character a reader can see."""
    return any(not ch.isspace() and ch not in _BLANK_LETTERS and unicodedata.category(ch) not in ("Cc", "Cf")
               for ch in text)


def title_key(title: str) -> str:
    """A heading's text as a reader takes it, for matching section names: compatibility forms
    folded (fullwidth letters), invisible characters dropped, emphasis around the whole title and a
    trailing colon removed, case folded. 'Limitations of scope' stays another section."""
    text = "".join(ch for ch in unicodedata.normalize("NFKC", title) if unicodedata.category(ch) != "Cf").strip()
    # Peeled by moving two ends, not by copying what is left: a title of 100k '*' took seconds a copy.
    # (A title is one line: no newline for the pairing to stop at.)
    lo, hi = 0, len(text)
    peeled = True
    while peeled:
        peeled = False
        for mark in _EMPHASIS:
            if hi - lo > 2 * len(mark) and text.startswith(mark, lo) and text.endswith(mark, lo, hi):
                lo, hi, peeled = lo + len(mark), hi - len(mark), True
                while lo < hi and text[lo].isspace():
                    lo += 1
                while hi > lo and text[hi - 1].isspace():
                    hi -= 1
                break
    return text[lo:hi].rstrip(":").strip().casefold()


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line (``## Title ##``), else None."""
    m = _HEADING_OPEN.match(line)
    if m is None:
        return None
    return len(m.group(1)), line[m.end() :].strip(" \t").rstrip("#").rstrip(" \t")


def headings(lines: list[Line]) -> list[tuple[int, int, int, str]]:
    """(first line, end line (exclusive), level, title) of each heading a reader sees, in order: ATX
    (``## Title``) and setext (a paragraph underlined with ``===``, level 1, or ``---``, level 2).
    A paragraph that continues a list item, a quote or a table is not taken for a title."""
    out: list[tuple[int, int, int, str]] = []
    start = 0  # the first line of the current run of paragraph lines
    for i, line in enumerate(lines):
        if line.code or line.fence or not line.text.strip():
            start = i + 1
        elif h := heading(line.text):
            out.append((i, i + 1, *h))
            start = i + 1
        elif start < i and (m := _SETEXT.fullmatch(line.text)):
            para = lines[start:i]
            if not any(_OTHER_BLOCK.match(p.text) for p in para):
                out.append((start, i + 1, 1 if m.group(1)[0] == "=" else 2, " ".join(p.text.strip() for p in para)))
            start = i + 1
    return out
