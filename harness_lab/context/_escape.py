r"""How item text and header field values are escaped when an item is rendered (the rule is in the
docstring of :mod:`~harness_lab.context.items`, which uses these). Plain string functions: no item here.
"""

from __future__ import annotations

import re

__all__ = ["HEADERLIKE", "escape_field", "header_field", "shown_text"]

# str.splitlines' line breaks: a model may read any of them as a new line.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# Where a line of item text begins with "[L" (after spaces or tabs): rendering puts a backslash there.
HEADERLIKE = re.compile(f"(?:^|(?<=[{_LINE_BREAKS}]))(?=[^\\S{_LINE_BREAKS}]*\\[L)")


def shown_text(text: str) -> str:
    """*text* as rendered under its header: each line that would begin with ``[L`` (a header's start)
    gets a backslash in front (see :mod:`~harness_lab.context.items`). Text without ``[L`` is returned as it is."""
    return text if "[L" not in text else HEADERLIKE.sub("\\\\", text)


# A field value shown in a header: "|" (the separator), "]" (the end) and "\\" itself take a backslash, and
# an unprintable character (a line break: the header stays one line) is shown as its escape code.
_FIELD_ESCAPES = {"\\": "\\\\", "|": "\\|", "]": "\\]"}


def escape_field(value: str) -> str:
    """*value* with every ``\\``, ``|`` and ``]`` behind a backslash and every unprintable character as its escape code."""
    return "".join(_FIELD_ESCAPES.get(c) or (c if c.isprintable() else repr(c)[1:-1]) for c in value)


def header_field(value: str) -> str:
    """*value* as a header shows it: :func:`escape_field` where needed; most values are returned as they are."""
    if "|" in value or "]" in value or "\\" in value or not value.isprintable():
        return escape_field(value)
    return value
