"""Token counting that works offline: a pluggable counter, no tokenizer download at run time.

The default, :func:`approx_token_count`, is ``ceil(len(text.encode("utf-8")) / 4)``. Four UTF-8
bytes per token is close to what BPE tokenizers give for English prose and code, and for CJK text
(3 bytes a character) it gives ~0.75 tokens a character, again near real tokenizers. It is exact
arithmetic, deterministic and costs one encode: fast enough to run on every item once.

Because ``ceil(a/4) + ceil(b/4) >= ceil((a+b)/4)``, a sum of per-item counts never undercounts the
counted whole, so a view whose items sum within the budget renders within the budget too.

Any ``Callable[[str], int]`` can replace it (e.g. a real tokenizer's ``len(enc.encode(s))``);
:func:`regex_token_count` is a second offline choice that counts words and punctuation marks.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = ["TokenCounter", "approx_token_count", "regex_token_count"]


class TokenCounter(Protocol):
    """Anything that maps a text to a token count (a plain function is fine)."""

    def __call__(self, text: str, /) -> int: ...


def approx_token_count(text: str) -> int:
    """ceil(UTF-8 bytes / 4): the default, offline and deterministic."""
    # An ASCII str (str.isascii is O(1)) has as many UTF-8 bytes as characters: no encode needed.
    return -(-(len(text) if text.isascii() else len(text.encode("utf-8"))) // 4)


# A word (ASCII letters/digits/underscore run), one CJK character, or one other non-space mark.
_TOKEN_RE = re.compile(r"[A-Za-z0-9_]+|[\u3400-\u9fff\uf900-\ufaff]|[^\sA-Za-z0-9_]")


def regex_token_count(text: str) -> int:
    """Words, CJK characters and punctuation marks each count one token."""
    return len(_TOKEN_RE.findall(text))
