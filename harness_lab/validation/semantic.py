"""Semantic review: does the cited evidence support each claim? A separate, optional layer.

The structural verdict (:mod:`.report`) says a report is *well formed*; a semantic reviewer says
whether its claims are *backed* by the sources they cite. The two verdicts are recorded apart
(``Receipt.structural`` vs ``Receipt.semantic``) and neither means "true": a reviewer is one more
judge that can be wrong, and a reviewer that shares the writer's false premise agrees with it.

Any object with ``name`` and ``review(report, evidence) -> SemanticVerdict`` plugs in (an LLM
judge - :class:`~harness_lab.validation.model_reviewer.ModelReviewer` -, a fact checker, a human queue).
The default, :class:`EvidenceSupportReviewer`, is deterministic and offline: each claim sentence with
citations is read against the cited notes by :func:`~harness_lab.validation.claims.check_claim` -
numbers (with their units, or a percentage derivable as stated), negations and opposite words, entities
(names, ids, versions, paths) and scope (quantifiers, absolute words, comparatives, superlatives) -
and the share of its content words found in them is kept as ``support``. Each finding names what did
not match (``ClaimFinding.mismatches``). Word overlap alone passed "it is reported as a success"
against "it is never reported as a success" (support 1.0).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ..evidence import EvidenceNote
from ._markdown import headings, read_lines, thematic_break, title_key
from .claims import ASPECTS, SCOPE_TERMS, Mismatch, MismatchAspect, NoteText, check_claim
from .report import find_citations

__all__ = [
    "ABSOLUTE_TERMS",
    "ClaimFinding",
    "ClaimProblem",
    "EvidenceSupportReviewer",
    "SemanticReviewer",
    "SemanticVerdict",
]

# Wording that asserts certainty or universality; a claim may use it only if a cited note does.
ABSOLUTE_TERMS: tuple[str, ...] = (
    "guarantee", "guaranteed", "guarantees", "100%", "always", "never", "any", "all", "every",
    "certainly", "proves", "proven", "impossible", "perfect", "perfectly", "completely",
    "保证", "任何", "百分之百", "一定", "绝对", "完全", "所有",
)
_STOPWORDS = frozenset(
    "a an and are as at be been but by can do does for from has have in into is it its more most "
    "not of on or out so than that the their them then there these this those to was were which "
    "who will with without our we you they one two also only both each per".split()
)
_CLAIM_SECTIONS = ("conclusion", "结论", "evidence", "证据")
# The report's sections: a subsection with one of these names is that section, not its parent's text.
_SECTIONS = (*_CLAIM_SECTIONS, "limitations", "局限")
_WORD = re.compile(r"[a-z0-9%]+|[\u4e00-\u9fff]+")
_QUOTE = re.compile(r"^(?:>[ \t]?)+")
_ITEM_MARK = re.compile(r"^(?:\d{1,9}[.)][ \t]+)?(?:\[[ xX]\][ \t]+)?")
_RULE_CELL = re.compile(r"[ \t]*:?-+:?[ \t]*")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")


# One label per claim, the first that applies in this order (its mismatches list them all).
ClaimProblem = Literal["ok", "no_citation", "unknown_source", "overclaim", "contradiction", "number_mismatch",
                       "unknown_entity", "weak_support", "not_reviewed"]
_PROBLEM_OF: dict[MismatchAspect, ClaimProblem] = {
    "scope": "overclaim", "negation": "contradiction", "number": "number_mismatch", "entity": "unknown_entity"}


class ClaimFinding(BaseModel):
    """The review of one claim sentence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["claim_finding"] = "claim_finding"
    section: str
    claim: str
    cited: tuple[str, ...]
    support: float  # share of the claim's content words found in the cited notes, 0..1
    unsupported_terms: tuple[str, ...] = ()  # the scope words no cited note uses
    problem: ClaimProblem
    mismatches: tuple[Mismatch, ...] = ()  # what did not match, aspect by aspect
    note: str = ""  # a reviewer's own words on the claim (a model's reason), if it gave any


class SemanticVerdict(BaseModel):
    """The semantic layer's own verdict, kept apart from the structural one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["semantic_verdict"] = "semantic_verdict"
    layer: Literal["semantic"] = "semantic"
    reviewer: str
    passed: bool
    findings: tuple[ClaimFinding, ...] = ()
    # "could_not_review": the reviewer gave no judgement (an endpoint down, an answer it could not
    # read); ``passed`` is then False and ``detail`` says why. Data, not an exception.
    status: Literal["reviewed", "could_not_review"] = "reviewed"
    detail: str = ""

    @property
    def reasons(self) -> list[str]:
        head = [f"could_not_review: {self.detail}"] if self.status == "could_not_review" else []
        return head + [
            f"{f.problem}: {f.claim[:80]!r} (cites {', '.join(f.cited) or 'nothing'}; support {f.support:.2f}"
            + (f"; unsupported: {', '.join(f.unsupported_terms)}" if f.unsupported_terms else "")
            + "".join(f"; {m.aspect} {m.claim_part!r}: {m.detail[:100]}" for m in f.mismatches
                      if m.aspect != "scope")
            + (f"; {f.note[:100]}" if f.note else "") + ")"
            for f in self.findings if f.problem != "ok"]


class SemanticReviewer(Protocol):
    """Judges claims against evidence; returns its own verdict, never touches the structural one."""

    @property
    def name(self) -> str: ...

    def review(self, report: bytes, evidence: Mapping[str, EvidenceNote]) -> SemanticVerdict: ...


class EvidenceSupportReviewer:
    """Deterministic claim-to-evidence check over the local evidence notes, sentence by sentence.

    A claim sentence (in Conclusion / Evidence) fails when it cites nothing (Conclusion only), cites
    an unknown note, states a number, a negation, an entity or a scope the cited notes do not (the
    ``aspects`` checked: see :mod:`.claims`), or shares fewer than ``min_support`` of its content words
    with them. Linear in the report and the cited notes: each distinct set of cited notes is read once
    per review. It does not parse syntax; a claim that swaps who does what passes.
    """

    def __init__(self, *, min_support: float = 0.3, absolute_terms: Iterable[str] = SCOPE_TERMS,
                 aspects: Iterable[MismatchAspect] = ASPECTS) -> None:
        if not 0.0 <= min_support <= 1.0:
            raise ValueError(f"min_support must lie in [0, 1], got {min_support}")
        self.min_support = min_support
        self.absolute_terms = tuple(absolute_terms)
        self.aspects = tuple(aspects)
        if unknown := [a for a in self.aspects if a not in ASPECTS]:
            raise ValueError(f"aspects: unknown {', '.join(map(repr, unknown))}; known: {', '.join(ASPECTS)}")
        self._scope_terms = frozenset(t.casefold() for t in self.absolute_terms)

    @property
    def name(self) -> str:
        shown = "" if self.aspects == ASPECTS else f", aspects={'+'.join(self.aspects) or 'none'}"
        return f"evidence-support(min_support={self.min_support}{shown})"

    def review(self, report: bytes, evidence: Mapping[str, EvidenceNote]) -> SemanticVerdict:
        text = report.decode("utf-8-sig", errors="replace")
        notes: dict[tuple[str, ...], NoteText] = {}  # each set of cited notes read once per review
        findings = [self._judge(section, claim, evidence, notes) for section, claim in _claims(text)]
        kept = [f for f in findings if f is not None]
        return SemanticVerdict(reviewer=self.name, passed=all(f.problem == "ok" for f in kept), findings=tuple(kept))

    def _judge(self, section: str, claim: str, evidence: Mapping[str, EvidenceNote],
               notes: dict[tuple[str, ...], NoteText]) -> ClaimFinding | None:
        cited = tuple(dict.fromkeys(find_citations(claim)[0]))
        bare = _without_markers(claim).strip()
        if not cited:
            if section in ("conclusion", "结论"):
                return ClaimFinding(section=section, claim=bare, cited=(), support=0.0, problem="no_citation")
            return None  # uncited prose in Evidence is framing, not a claim the reviewer scores
        if any(cid not in evidence for cid in cited):
            return ClaimFinding(section=section, claim=bare, cited=cited, support=0.0, problem="unknown_source")
        source = " ".join(evidence[cid].text for cid in cited).casefold()
        source_stems = {_stem(w) for w in _words(source)}
        words = [w for w in _words(bare.casefold()) if w not in _STOPWORDS and (len(w) > 2 or not w.isascii())]
        if not _words(bare.casefold()) and section not in ("conclusion", "结论"):
            return None  # citations alone in Evidence (a source list): no claim to score; a Conclusion must say something
        support = sum(_stem(w) in source_stems for w in words) / len(words) if words else 0.0
        if (read := notes.get(cited)) is None:
            read = notes[cited] = _read_notes("\n\n".join(evidence[cid].text for cid in cited))
        mismatches = tuple(check_claim(bare, read, aspects=self.aspects, scope_terms=self._scope_terms))
        unsupported = tuple(m.claim_part for m in mismatches if m.aspect == "scope")
        problem = next((_PROBLEM_OF[aspect] for aspect in ("scope", "negation", "number", "entity")
                        if any(m.aspect == aspect for m in mismatches)),
                       "weak_support" if support < self.min_support else "ok")
        return ClaimFinding(section=section, claim=bare, cited=cited, support=round(support, 4),
                            unsupported_terms=unsupported, problem=problem, mismatches=mismatches)


@functools.lru_cache(maxsize=64)
def _read_notes(text: str) -> NoteText:
    """The notes' text read once for many reviews (a study reviews the same few notes thousands of times);
    a NoteText is not changed after it is made."""
    return NoteText(text)


def _claims(text: str) -> list[tuple[str, str]]:
    """(section, sentence) for every sentence under a claim-bearing heading."""
    out: list[tuple[str, str]] = []
    section: str | None = None
    open_headings: list[tuple[int, str]] = []  # (level, title key) of the headings enclosing this line
    lines = read_lines(text)
    found = {start: (stop, level, title) for start, stop, level, title in headings(lines)}
    skip_to = 0  # past a heading's lines (a setext title spans its paragraph and underline)
    for n, line in enumerate(lines):  # as rendered: no headings or claims in code blocks or comments
        if line.code or line.fence or n < skip_to:
            continue
        if n in found:
            skip_to, level, title = found[n]
            while open_headings and open_headings[-1][0] >= level:
                open_headings.pop()
            open_headings.append((level, title_key(title)))
            # the innermost enclosing report section decides: a plain subsection of Conclusion is
            # Conclusion's, a Limitations nested in it is not (its sentences were scored as claims)
            named = next((key for _, key in reversed(open_headings) if key in _SECTIONS), None)
            section = named if named in _CLAIM_SECTIONS else None
            continue
        if section is None or thematic_break(line.text):  # a drawn line ('___') says nothing
            continue
        body = _QUOTE.sub("", line.text.strip()).lstrip("-*+ ").strip()
        body = _ITEM_MARK.sub("", body)  # '1.' or '[x]' is list syntax, not a sentence
        if body.startswith("|"):  # a table: its rule and header row are layout, each other row a claim
            following = lines[n + 1].text if n + 1 < len(lines) else ""
            if _table_rule(body) or _table_rule(following.strip()):
                continue
            body = body.replace("|", " ").strip()
        out.extend((section, s.strip()) for s in _SENTENCE_END.split(body) if s.strip())
    return out


def _without_markers(claim: str) -> str:
    """``re.sub(r"\\[E:[^\\]]*\\]", " ", claim)`` in linear time: that pattern tried every unclosed marker
    to the end of the claim (quadratic). Once no ']' follows a marker, none follows a later one."""
    out: list[str] = []
    i = 0
    while (start := claim.find("[E:", i)) != -1 and (close := claim.find("]", start + 3)) != -1:
        out += (claim[i:start], " ")
        i = close + 1
    out.append(claim[i:])
    return "".join(out)


def _table_rule(line: str) -> bool:
    """'|---|:---:|': a table's rule row (cell by cell: one pattern for the row backtracked badly)."""
    return "-" in line and all(_RULE_CELL.fullmatch(cell) for cell in line.strip().strip("|").split("|"))


def _words(text: str) -> list[str]:
    words: list[str] = []
    for token in _WORD.findall(text):
        if token.isascii():
            words.append(token)
        else:  # CJK runs have no spaces: score character bigrams
            words.extend(token[i : i + 2] for i in range(max(1, len(token) - 1)))
    return words


def _stem(word: str) -> str:
    # Crude and deterministic: "validating"/"validated"/"validate" share a 6-char prefix.
    return word[:6] if word.isascii() else word
