"""Retrieval of stored history by relevance (seed 003, section 3: what left the view stays findable).

Stored history is what the view no longer shows whole: items that compression summarized or dropped,
the process a closed subtask collapsed, superseded items (all still recorded; see
:mod:`~harness_lab.context.record` for when an item is retired for good), and every large output kept
as an L5 reference. :meth:`ContextManager.search_history` ranks them for a query with Okapi BM25
(k1 = 1.2, b = 0.75) over lower-cased word tokens, common English words left out (a run of CJK characters is split into its
characters, so Chinese text matches without a segmenter); ties keep the older item first. Each hit has
an id that ``read_ref`` opens (``c12``: the item's text; ``ref_003``: the stored output) and an excerpt
around the best-matching line.

The index is built when a search asks, never per step (the hot path stays flat), and reused until the
record or the ref store changes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HistoryDoc", "HistoryHit", "HistoryIndex", "tokenize"]

_WORD = re.compile(r"[^\W\u3040-\u30ff\u3400-\u9fff]+|[\u3040-\u30ff\u3400-\u9fff]", re.UNICODE)
_K1, _B = 1.2, 0.75
_EXCERPT_CHARS = 240


# Words too common to tell one piece of history from another (a query in prose is mostly these).
_STOP = frozenset("a an and are as at be by do does for from has have how i in is it its of on or that the this "
                  "to was were what when where which who why with".split())


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens, common English words left out; each CJK character is a token of its own."""
    return [t for t in _WORD.findall(text.lower()) if t not in _STOP]


@dataclass(frozen=True, slots=True)
class HistoryDoc:
    """One searchable piece of stored history."""

    id: str  # what read_ref opens: an item id (c12) or a stored output id (ref_003)
    source: str
    round: int
    text: str
    why: str  # where it is now: "summarized", "dropped", "subtask process", "stored output", ...


@dataclass(frozen=True, slots=True)
class HistoryHit:
    """A search result: the id to open with ``read_ref``, where it came from, and why it is history."""

    id: str
    source: str
    round: int
    score: float
    why: str
    excerpt: str
    kind: Literal["history_hit"] = "history_hit"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "source": self.source, "round": self.round,
                "score": round(self.score, 4), "why": self.why, "excerpt": self.excerpt}

    def line(self) -> str:
        """One line for a model: ``c12 (round 3, from step 3:read_file; summarized): <excerpt>``."""
        excerpt = self.excerpt.replace("\n", " / ")
        return f"{self.id} (round {self.round}, from {self.source}; {self.why}): {excerpt}"


class HistoryIndex:
    """BM25 over a fixed list of documents (built once; see :meth:`search`)."""

    def __init__(self, docs: Iterable[HistoryDoc]) -> None:
        self.docs: list[HistoryDoc] = list(docs)
        self._terms: list[Counter[str]] = [Counter(tokenize(d.text)) for d in self.docs]
        self._lengths = [sum(t.values()) for t in self._terms]
        self._avg = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        df: Counter[str] = Counter()
        for terms in self._terms:
            df.update(terms.keys())
        n = len(self.docs)
        self._idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def search(self, query: str, k: int = 5) -> list[HistoryHit]:
        """The *k* best documents for *query* (score > 0 only), best first."""
        wanted = list(dict.fromkeys(tokenize(query)))
        scored: list[tuple[float, int]] = []
        for i, terms in enumerate(self._terms):
            score = 0.0
            norm = _K1 * (1 - _B + _B * self._lengths[i] / self._avg) if self._avg else _K1
            for term in wanted:
                tf = terms.get(term)
                if tf:
                    score += self._idf[term] * tf * (_K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [self._hit(self.docs[i], score, wanted) for score, i in scored[:k]]

    @staticmethod
    def _hit(doc: HistoryDoc, score: float, wanted: Sequence[str]) -> HistoryHit:
        return HistoryHit(id=doc.id, source=doc.source, round=doc.round, score=score, why=doc.why,
                          excerpt=_excerpt(doc.text, set(wanted)))


def _excerpt(text: str, wanted: set[str]) -> str:
    """The line with the most query terms (the first such), clipped; the text's start if none has any."""
    best, best_hits = "", 0
    for line in text.splitlines():
        hits = len(wanted.intersection(tokenize(line)))
        if hits > best_hits:
            best, best_hits = line.strip(), hits
    if not best:
        best = text.strip().replace("\n", " / ")
    return best if len(best) <= _EXCERPT_CHARS else best[:_EXCERPT_CHARS] + " ..."
