"""One claim sentence against the text of the notes it cites: numbers, negations, entities, scope.

Word overlap cannot tell "it is never reported as a success" from "it is reported as a success"
(the same words), nor "120 rows" from "0 rows; 120 expected" (the same number). This module reads
what a claim *asserts* and looks for it in the cited text, four ways, each a :class:`Mismatch`
naming what did not match:

* ``number``   - each number in the claim (with its percent sign or unit word) occurs in the notes
  with that unit, or is a percentage derivable as stated (``a / b`` of two numbers in the claim or
  the notes). "120 rows" fails against "0 rows; 120 expected": the notes give rows a different count.
* ``negation`` - the claim and the note sentence it matches best must agree on what is negated
  ("no", "not", "never", "without", "cannot", "fails to", ...) and must not use opposite words
  ("before"/"after", "passes"/"fails", "accepted"/"rejected", ...) for the same thing.
* ``entity``   - names, ids, versions, file paths, code spans and capitalised names in the claim occur
  in the notes.
* ``scope``    - quantifiers, absolute words, comparatives and superlatives ("all", "each", "ensures",
  "more accurate than", "the best") occur in the notes too; a claim may not widen what a note says.

Deterministic, offline, standard library only, and linear in the claim and notes' length (each check is
one pass with set look-ups). It is a reading aid with known blind spots: it does not parse syntax (a
swapped subject - "the model decides" against "the runtime decides" - passes), and negation in Chinese
text is not read (its numbers, entities and scope words are).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["ANTONYMS", "ASPECTS", "NEGATION_CUES", "SCOPE_TERMS", "Mismatch", "MismatchAspect", "NoteText", "check_claim"]

MismatchAspect = Literal["number", "negation", "entity", "scope"]

# A negation cue negates the words after it up to the next clause break.
NEGATION_CUES: frozenset[str] = frozenset(
    "no not never none nothing nobody neither nor cannot without fails fail failed failing lacks lacking "
    "isn't aren't wasn't weren't don't doesn't didn't can't won't couldn't shouldn't mustn't hasn't haven't".split()
)
# Pairs of words that say opposite things about the same subject (compared as lemmas, both directions).
ANTONYMS: tuple[tuple[str, str], ...] = (
    ("before", "after"), ("pass", "fail"), ("succeed", "fail"), ("success", "failure"), ("accept", "reject"),
    ("valid", "invalid"), ("true", "false"), ("always", "never"), ("increase", "decrease"), ("more", "less"),
    ("more", "fewer"), ("higher", "lower"), ("above", "below"), ("with", "without"), ("include", "exclude"),
    ("allow", "deny"), ("allow", "refuse"), ("enable", "disable"), ("same", "different"), ("can", "cannot"),
    ("complete", "incomplete"), ("correct", "incorrect"), ("safe", "unsafe"), ("trusted", "untrusted"),
    ("supported", "unsupported"), ("known", "unknown"), ("open", "closed"), ("start", "stop"),
    ("first", "last"), ("minimum", "maximum"), ("early", "late"), ("read", "write"), ("works", "broken"),
)
# Wording that widens a claim's reach: allowed only when a cited note uses it too. The old reviewer's
# absolute words are among them; comparatives and superlatives are also found by form ("-er than").
SCOPE_TERMS: frozenset[str] = frozenset(
    "guarantee guaranteed guarantees 100% always never any all every each everything everyone everybody "
    "nothing nobody none whatever whichever regardless universally certainly surely definitely proves proven "
    "impossible perfect perfectly completely entirely fully totally wholly ensures ensure ensured eliminates "
    "eliminate eliminated prevents prevent solves solve solved only sole solely exclusively invariably "
    "more less fewer better worse greater smaller larger higher lower faster slower safer cheaper stronger "
    "weaker superior inferior outperforms outperform most least best worst fastest slowest safest cheapest "
    "strongest largest smallest highest lowest optimal unmatched unbeatable"
    " 保证 任何 百分之百 一定 绝对 完全 所有 总是 永远 最".split()
)
_SCOPE_PHRASES = ("no matter", "in all cases", "without exception", "in every case", "by far")

_STOPWORDS = frozenset(
    "a an and are as at be been but by can do does for from has have in into is it its of on or out so "
    "that the their them then there these this those to was were which who will with our we you they "
    "also both per than what when where how must may might should would could".split()
)
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero _ two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split()) if w != "_"}  # "one" is a pronoun as often as a count
_NUMBER_WORDS |= {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                  "hundred": 100, "thousand": 1000, "million": 1_000_000}
_TOKEN = re.compile(
    r"`[^`\n]{1,200}`"                                     # a code span: an entity as written
    r"|(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:\s?%|\s?percent\b)?(?![\w.]?\w)"  # a number, maybe a percentage
    r"|[A-Za-z0-9_][\w./\\:+#'-]*[\w%#+]|[A-Za-z0-9_%]"         # a word, id, version or path
    r"|[\u4e00-\u9fff]+"
    r"|[,;:.!?()\[\]。；：，！？]"                           # clause breaks
)
_BREAKS = frozenset(",;:.!?()[]。；：，！？")
# Sentences end at a full stop or a blank line; a wrapped line is not an end (notes are wrapped prose).
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n[ \t]*\n\s*")
_ID_SHAPE = re.compile(r"[A-Za-z]*\d[\w.-]*|\w+[_/\\]\S*|\S+\.[a-z]{1,5}|[A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}[\w-]*")
_DERIVE_FROM = 200
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


class Mismatch(BaseModel):
    """What in one claim did not match its cited notes (one aspect, one item)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    aspect: MismatchAspect
    claim_part: str  # the words of the claim that did not match
    detail: str  # what the notes say instead, or that they do not say it


@dataclass(frozen=True)
class _Token:
    text: str  # as written
    lemma: str  # casefolded, crude suffix stripping
    brk: bool  # a clause break
    start_of_sentence: bool


@dataclass
class NoteText:
    """The cited notes' text read once: its words, numbers with their units, and sentences."""

    text: str

    def __post_init__(self) -> None:
        self.folded = self.text.casefold()
        self.tokens = _tokens(self.text)
        self.lemmas = {t.lemma for t in self.tokens if not t.brk}
        self.words = {t.text.casefold() for t in self.tokens if not t.brk}
        self.numbers: dict[float, set[str]] = {}  # value -> the unit lemmas written after it
        self.units: dict[str, set[float]] = {}  # unit lemma -> the values written before it
        self.said: dict[str, list[str]] = {}  # unit lemma -> each number with it, as written
        for value, units, shown in _numbers(self.tokens):
            self.numbers.setdefault(value, set()).update(units)
            for unit in units:
                self.units.setdefault(unit, set()).add(value)
                self.said.setdefault(unit, []).append(shown)
        self.sentence_texts = [" ".join(s.split()) for s in _SENTENCE.split(self.text) if s.strip()]
        self.sentences = [_tokens(s) for s in self.sentence_texts]
        self._where: dict[str, list[int]] = {}  # lemma -> the sentences holding it (each once)
        for n, sentence in enumerate(self.sentences):
            for lemma in {t.lemma for t in sentence if not t.brk}:
                self._where.setdefault(lemma, []).append(n)

    def best_sentence(self, lemmas: set[str]) -> tuple[int, float]:
        """The note sentence sharing the most of ``lemmas`` (content words; the first on a tie), and the
        share it holds. Only the sentences holding one of the words are counted (an inverted index)."""
        content = {w for w in lemmas if w not in _STOPWORDS}
        scores: dict[int, int] = {}
        for lemma in content:
            for n in self._where.get(lemma, ()):
                scores[n] = scores.get(n, 0) + 1
        if not scores:
            return -1, 0.0
        best = min(scores, key=lambda n: (-scores[n], n))
        return best, scores[best] / len(content)


ASPECTS: tuple[MismatchAspect, ...] = ("number", "negation", "entity", "scope")


def check_claim(claim: str, notes: NoteText | str, *, min_match: float = 0.5,
                aspects: Iterable[MismatchAspect] = ASPECTS,
                scope_terms: frozenset[str] = SCOPE_TERMS) -> list[Mismatch]:
    """Every :class:`Mismatch` of ``claim`` (its citation markers removed) against ``notes``, the text
    of the notes it cites, for the ``aspects`` asked. ``min_match`` is the share of the claim's content
    words a note sentence must hold before their negations are compared (below it, they are not about
    the same thing)."""
    source = notes if isinstance(notes, NoteText) else NoteText(notes)
    tokens = _tokens(claim)
    wanted = set(aspects)
    out: list[Mismatch] = []
    if "number" in wanted:
        out += _number_mismatches(tokens, source)
    if "negation" in wanted:
        out += _negation_mismatches(tokens, source, min_match)
    if "entity" in wanted:
        out += _entity_mismatches(tokens, source)
    if "scope" in wanted:
        out += _scope_mismatches(claim, tokens, source, scope_terms)
    return out


def _number_mismatches(tokens: list[_Token], source: NoteText) -> Iterable[Mismatch]:
    found = list(_numbers(tokens))
    # what a percentage may be derived from: the counts in the notes and in the claim itself (the first
    # _DERIVE_FROM: each percentage is tried against each, which must stay linear in a flood of numbers)
    pool = sorted({v for v, units in source.numbers.items() if units != {"%"}}
                  | {v for v, u, _ in found if "%" not in u})[:_DERIVE_FROM]
    claim_lemmas = {t.lemma for t in tokens if not t.brk}
    for value, units, shown in found:
        if value in source.numbers and ("%" not in units or "%" in source.numbers[value]):
            # the number is there; a unit the notes count differently is a mismatch ("120 rows" vs "0 rows")
            other = [u for u in sorted(units) if u in source.units and u not in source.numbers[value]]
            if other and not source.numbers[value] & claim_lemmas:  # "120 rows were expected" is fine
                said = "; ".join(dict.fromkeys(x for u in other for x in source.said[u]))
                yield Mismatch(aspect="number", claim_part=shown, detail=f"the notes say {said}")
            continue
        if shown.endswith("%") and _derivable_percent(value, shown, pool):
            continue
        elsewhere = "; ".join(dict.fromkeys(x for u in sorted(units) for x in source.said.get(u, ())))
        yield Mismatch(aspect="number", claim_part=shown,
                       detail=f"the notes say {elsewhere}" if elsewhere else "not in the cited notes")


def _derivable_percent(value: float, written: str, pool: list[float]) -> bool:
    """``value`` percent is ``a / b`` (``a < b``) of two numbers in ``pool`` (sorted), rounded as written:
    one pass over the denominators, each numerator range found by bisection (no pair search, and no walk
    over the integers of a range: a denominator of 10^300 spans that many)."""
    digits = written.split(".")[1] if "." in written else ""
    places = len(_NUMBER.match(digits).group(0)) if digits and _NUMBER.match(digits) else 0  # type: ignore[union-attr]
    half = 0.5 * 10.0**-places
    for b in pool:
        if b <= 0:
            continue
        low, high = (value - half) * b / 100, (value + half) * b / 100
        first = bisect.bisect_left(pool, low)
        # a < b: "100%" is said, not derived from one number over itself
        if first < len(pool) and pool[first] <= high and pool[first] < b:
            return True
    return False


def _negation_mismatches(tokens: list[_Token], source: NoteText, min_match: float) -> Iterable[Mismatch]:
    lemmas = {t.lemma for t in tokens if not t.brk}
    best, share = source.best_sentence(lemmas)
    if share < min_match:
        return  # no note sentence is about the same thing: nothing to compare negations with
    sentence, note_text = source.sentences[best], source.sentence_texts[best][:160]
    claim_neg, note_neg = _negated(tokens), _negated(sentence)
    written: dict[str, str] = {}  # lemma -> the claim's word as first written, for the finding
    for t in tokens:
        written.setdefault(t.lemma, t.text)
    # the words the claim and the note both use, negated in one and not the other: one finding
    shared = set(claim_neg) & set(note_neg) - _STOPWORDS - NEGATION_CUES
    flipped = [lemma for lemma in written if lemma in shared and not (claim_neg[lemma] & note_neg[lemma])]
    if flipped:
        yield Mismatch(aspect="negation", claim_part=", ".join(written[w] for w in flipped),
                       detail=f"the note says the opposite: {note_text!r}")
    for a, b in _ANTONYM_LEMMAS:
        for mine, theirs in ((a, b), (b, a)):
            if mine in claim_neg and theirs in note_neg and mine not in note_neg and theirs not in claim_neg:
                # opposite words agree only when one of them is negated ("not before" = "after")
                if claim_neg[mine] & note_neg[theirs]:
                    yield Mismatch(aspect="negation", claim_part=written.get(mine, mine),
                                   detail=f"the note says {theirs!r} instead: {note_text!r}")
    yield from _swapped_aside(tokens, sentence, note_text)


def _swapped_aside(tokens: list[_Token], sentence: list[_Token], note_text: str) -> Iterable[Mismatch]:
    """"X, not Y, does P" says X does P and Y does not: the note's clause that says P must name X, not Y
    only (the aside is left out of the negation check, so a swap "the model, not the runtime, decides"
    is read here). One pass over the claim's clauses."""
    clauses = _clauses(tokens)
    note_clauses: list[set[str]] | None = None
    for k in range(len(clauses) - 2):
        (said_toks, said_end), (aside, aside_end), (rest, _) = clauses[k : k + 3]
        if said_end != "," or aside_end != "," or not aside or aside[0].lemma != "not":
            continue
        said, denied, predicate = _content(said_toks), _content(aside[1:]), _content(rest)
        if note_clauses is None:
            note_clauses = [_content(c) for c, _ in _clauses(sentence)]
        holds = max(note_clauses, key=lambda c: len(predicate & c))
        if predicate & holds and denied & holds and not said & holds:
            shown = f"{' '.join(t.text for t in said_toks)}, {' '.join(t.text for t in aside)}"
            yield Mismatch(aspect="negation", claim_part=shown,
                           detail=f"the note gives it to {' '.join(t.text for t in aside[1:])!r}: {note_text!r}")


def _clauses(tokens: list[_Token]) -> list[tuple[list[_Token], str]]:
    """The runs of words between clause breaks, each with the break that ends it ('' at the end)."""
    out: list[tuple[list[_Token], str]] = []
    current: list[_Token] = []
    for t in tokens:
        if t.brk:
            out.append((current, t.text))
            current = []
        else:
            current.append(t)
    out.append((current, ""))
    return out


def _content(tokens: list[_Token]) -> set[str]:
    return {t.lemma for t in tokens if not t.brk and t.lemma not in _STOPWORDS}


def _negated(tokens: list[_Token]) -> dict[str, set[bool]]:
    """lemma -> {True if it stands in a negation's scope, False if outside one}. A scope runs from its cue
    to the next clause break; an aside of its own ("the runtime, not the model, decides") contrasts, it
    does not negate the sentence, and is left out."""
    out: dict[str, set[bool]] = {}
    scope: list[str] | None = None  # the lemmas of the open negation's scope
    aside = False  # the open scope's cue came right after a clause break

    def close(at_break: bool) -> None:
        for lemma in scope or ():
            if not (aside and at_break):
                out.setdefault(lemma, set()).add(True)

    previous_break = True
    for t in tokens:
        if t.brk or t.lemma == "but":
            close(t.brk and t.text in ",;:()")
            scope, previous_break = None, True
            continue
        if t.lemma in NEGATION_CUES or t.lemma.endswith("n't"):
            close(False)
            # the cue is a word too: "fails" against "passes", "never" against "always"
            cue = "fail" if t.lemma.startswith("fail") else t.lemma
            out.setdefault(cue, set()).add(False)
            scope, aside, previous_break = [], previous_break, False
            continue
        previous_break = False
        if scope is not None:
            scope.append(t.lemma)
        else:
            out.setdefault(t.lemma, set()).add(False)
    close(False)
    return out


def _entity_mismatches(tokens: list[_Token], source: NoteText) -> Iterable[Mismatch]:
    seen: set[str] = set()
    for t in tokens:
        if t.brk or t.text in seen or not _is_entity(t):
            continue
        seen.add(t.text)
        name = t.text.strip("`")
        # a set look-up: the notes are split into words the same way (a code span with spaces is searched)
        if name.casefold() not in source.words and not (" " in name and name.casefold() in source.folded):
            yield Mismatch(aspect="entity", claim_part=name, detail="not in the cited notes")


def _is_entity(t: _Token) -> bool:
    if t.text.startswith("`"):
        return True
    if t.text.casefold() in ("e.g", "i.e", "etc", "vs"):
        return False
    if not t.text.isascii() or _NUMBER.fullmatch(t.text.rstrip("% ")) or t.text.endswith("percent"):
        return False  # numbers are the number check's
    if _ID_SHAPE.fullmatch(t.text):
        return True
    return t.text[:1].isupper() and not t.start_of_sentence and t.text[1:].islower() and len(t.text) > 1


def _scope_mismatches(claim: str, tokens: list[_Token], source: NoteText, scope_terms: frozenset[str]) -> Iterable[Mismatch]:
    folded = claim.casefold()
    terms: list[str] = []
    for i, t in enumerate(tokens):
        word = t.text.casefold()
        # a scope word, or a comparative by its form: "cheaper than", "more reliable than"
        than = i + 1 < len(tokens) and tokens[i + 1].lemma == "than" and not t.brk and word not in ("rather", "other")
        if (word in scope_terms or than) and word not in terms:
            terms.append(word)
    for phrase in (*_SCOPE_PHRASES, *sorted(w for w in scope_terms if not w.isascii() or " " in w)):
        if phrase in folded and phrase not in terms:  # phrases and CJK terms (no spaces to split at)
            terms.append(phrase)
    for term in terms:
        written_as_word = term.isascii() and term.isalpha()
        if not (term in source.words if written_as_word else term in source.folded):
            yield Mismatch(aspect="scope", claim_part=term, detail="the cited notes do not say it")


def _numbers(tokens: list[_Token]) -> Iterable[tuple[float, set[str], str]]:
    """(value, the unit lemmas after it up to a clause break - at most two -, the number and those words
    as written; a percentage is written "N%" and has no unit)."""
    for i, t in enumerate(tokens):
        if t.brk:
            continue
        text = t.text.casefold()
        if _NUMBER.fullmatch(text.removesuffix("percent").rstrip("% ")):
            value = float(text.removesuffix("percent").rstrip("% ").replace(",", ""))
            if not math.isfinite(value):  # 400 digits: past a float; such a number is no count to check
                continue
            written = t.text if not text.endswith("percent") else f"{_fmt(value)}%"
            written = written.replace(" ", "")
        elif text in _NUMBER_WORDS:
            value, written = float(_NUMBER_WORDS[text]), t.text
        else:
            continue
        if written.endswith("%"):  # a percentage matches a percentage, not the bare number
            yield value, {"%"}, written
            continue
        units: set[str] = set()
        shown = [written]
        # the words around it up to a clause break, two each side: "0 rows", "exit code 1"
        for side in (tokens[i + 1 : i + 3], tokens[max(0, i - 2) : i][::-1]):
            for u in side:
                if u.brk:
                    break
                if u.lemma not in _STOPWORDS and u.lemma.isalpha():
                    units.add(u.lemma)
        for u in tokens[i + 1 : i + 3]:
            if u.brk:
                break
            shown.append(u.text)
        for u in tokens[max(0, i - 2) : i][::-1]:
            if u.brk:
                break
            shown.insert(0, u.text)
        yield value, units, " ".join(shown)


def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    start = True
    for m in _TOKEN.finditer(text):
        word = m.group(0)
        if word in _BREAKS:
            out.append(_Token(word, word, True, False))
            start = word in ".!?。！？:"
            continue
        out.append(_Token(word, _lemma(word), False, start))
        start = False
    return out


def _lemma(word: str) -> str:
    """Crude and deterministic: 'checks'/'checked'/'checking'/'check' -> 'check', 'moves'/'move' -> 'mov'."""
    w = word.casefold().removesuffix("'s")
    if not w.isascii() or not w.isalpha() or w in NEGATION_CUES or len(w) <= 4:
        return w
    if w.endswith("ies"):
        w = w[:-3] + "y"
    elif w.endswith(("sses", "xes", "ches", "shes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif w.endswith("ing") and len(w) >= 7:
        w = w[:-3]
    elif w.endswith("ied"):
        w = w[:-3] + "y"
    elif w.endswith("ed") and len(w) >= 6:
        w = w[:-2]
    if len(w) >= 5 and w[-1] == w[-2] and w[-1] not in "sl":  # stopped -> stop, but pass, install stay
        w = w[:-1]
    return w[:-1] if len(w) > 4 and w.endswith("e") else w


_ANTONYM_LEMMAS: tuple[tuple[str, str], ...] = tuple((_lemma(a), _lemma(b)) for a, b in ANTONYMS)
