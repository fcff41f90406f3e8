"""The default goal-layer reviewer reads each claim against its cited notes: numbers, negations,
entities, scope. Word overlap passed a report contradicting its notes (support 0.86) and an overclaim
phrased without its list of absolute words (issue 18)."""

from __future__ import annotations

import time

import pytest

from harness_lab.evidence import EvidenceNote
from harness_lab.scenarios import list_scenarios, load_scenario
from harness_lab.validation.claims import check_claim
from harness_lab.validation.semantic import EvidenceSupportReviewer


def _doc(conclusion: str) -> bytes:
    return f"# R\n\n## Conclusion\n{conclusion}\n\n## Evidence\n- framing\n\n## Limitations\nTest material.\n".encode()


def _finding(claim: str, evidence):  # type: ignore[no-untyped-def]
    verdict = EvidenceSupportReviewer().review(_doc(claim), evidence)
    assert len(verdict.findings) == 1
    return verdict, verdict.findings[0]


def test_a_claim_swapping_who_decides_contradicts_its_note(evidence) -> None:
    # The case: support 0.86 (the same words), the opposite statement.
    verdict, f = _finding("The model, not the runtime, decides which evidence moves the task state "
                          "[E:harness-boundary].", evidence)
    assert f.support == pytest.approx(0.86, abs=0.01)
    assert not verdict.passed and f.problem == "contradiction"
    assert [(m.aspect, m.claim_part) for m in f.mismatches] == [("negation", "The model, not the runtime")]
    assert "the runtime decides" in f.mismatches[0].detail
    # the note's own reading passes
    ok, _ = _finding("The runtime, not the model, decides which evidence moves the task state [E:harness-boundary].",
                     evidence)
    assert ok.passed


@pytest.mark.parametrize(("claim", "words"), [
    ("A run that spends its budget is reported as a success [E:budget-gates].", "reported, success"),
    ("A later edit of the file on disk changes what was accepted [E:acceptance-snapshot].", "changes, accepted"),
    ("Two valid citations show that the sources support a conclusion [E:semantic-review].",
     "show, sources, support, conclusion"),
    ("Budgets are checked after a call, not before [E:budget-gates].", "after, before"),
])
def test_a_claim_dropping_or_adding_a_negation_contradicts_its_note(claim: str, words: str, evidence) -> None:
    verdict, f = _finding(claim, evidence)
    assert f.support >= 0.8, "word overlap alone passes it"
    assert not verdict.passed and f.problem == "contradiction"
    assert f.mismatches[0].aspect == "negation" and f.mismatches[0].claim_part == words
    assert any(words.split(",")[0] in r for r in verdict.reasons)


@pytest.mark.parametrize("claim", [
    "A run that spends its budget is never reported as a success [E:budget-gates].",
    "Budgets are checked before a call, not after [E:budget-gates].",
    "Budgets are checked before a call [E:budget-gates].",
    "A later edit of the file on disk must not change what was accepted [E:acceptance-snapshot].",
    "Two valid citations do not show that the sources support a conclusion [E:semantic-review].",
    "A separate semantic review can be wrong too [E:semantic-review].",
])
def test_a_claim_keeping_its_notes_polarity_passes(claim: str, evidence) -> None:
    verdict, f = _finding(claim, evidence)
    assert verdict.passed, f.mismatches


@pytest.mark.parametrize(("claim", "pair"), [
    ("Structural checks accepted every incomplete report in the ten scripted scenarios [E:acceptance-snapshot].",
     "accepted"),
    ("A separate semantic review cannot be wrong [E:semantic-review].", "cannot"),
])
def test_an_opposite_word_contradicts_its_note(claim: str, pair: str, evidence) -> None:
    verdict, f = _finding(claim, evidence)
    assert f.problem == "contradiction" and pair in [m.claim_part for m in f.mismatches]


@pytest.mark.parametrize(("claim", "terms"), [
    ("A harness makes the model more accurate than the model alone [E:harness-boundary].", ["more", "accurate"]),
    ("A harness is the best control layer around a model [E:harness-boundary].", ["best"]),
    ("The runtime ensures each report is correct [E:harness-boundary].", ["ensures", "each"]),
    ("Acceptance binds the validated bytes to a receipt in all cases [E:acceptance-snapshot].",
     ["all", "in all cases"]),
])
def test_an_overclaim_without_the_old_absolute_words_fails(claim: str, terms: list[str], evidence) -> None:
    verdict, f = _finding(claim, evidence)
    assert f.problem == "overclaim" and list(f.unsupported_terms) == terms
    assert {m.aspect for m in f.mismatches} == {"scope"}


def test_a_scope_word_the_note_uses_is_no_overclaim(evidence) -> None:
    verdict, _ = _finding("Structural checks rejected every incomplete report in the ten scripted scenarios "
                          "[E:acceptance-snapshot].", evidence)
    assert verdict.passed


ROWS = {"n": EvidenceNote(id="n", data=b"The export ended with exit code 1: 0 rows; 120 expected. "
                                      b"12 of 120 checks failed in version 2.4.1 of loader.py.")}


@pytest.mark.parametrize(("claim", "part", "detail"), [
    ("The export wrote 120 rows [E:n].", "export wrote 120 rows", "the notes say 0 rows"),
    ("The export ended with exit code 0 [E:n].", "exit code 0", "the notes say exit code 1"),
    ("12% of the checks failed [E:n].", "12%", "not in the cited notes"),
    ("37 checks failed [E:n].", "37 checks failed", "the notes say 12 of 120 checks failed"),
])
def test_a_number_the_notes_do_not_give_fails_naming_what_they_say(claim: str, part: str, detail: str) -> None:
    verdict, f = _finding(claim, ROWS)
    assert not verdict.passed and f.problem == "number_mismatch"
    assert [(m.aspect, m.claim_part, m.detail) for m in f.mismatches] == [("number", part, detail)]


@pytest.mark.parametrize("claim", [
    "The export wrote 0 rows; 120 were expected [E:n].",
    "120 rows were expected [E:n].",
    "10% of the checks failed [E:n].",  # 12 of 120, derivable as stated
    "The export ended with exit code 1 [E:n].",
])
def test_a_number_the_notes_give_or_derive_passes(claim: str) -> None:
    verdict, f = _finding(claim, ROWS)
    assert verdict.passed, f.mismatches


@pytest.mark.parametrize(("claim", "entity"), [
    ("12 of 120 checks failed in version 2.5.0 of loader.py [E:n].", "2.5.0"),
    ("12 of 120 checks failed in version 2.4.1 of `parser.py` [E:n].", "parser.py"),
    ("12 of 120 checks failed, says Acme [E:n].", "Acme"),
    ("12 of 120 checks failed in LOADER_V2 [E:n].", "LOADER_V2"),
])
def test_an_entity_the_notes_do_not_name_fails(claim: str, entity: str) -> None:
    verdict, f = _finding(claim, ROWS)
    assert f.problem == "unknown_entity" and [m.claim_part for m in f.mismatches] == [entity]
    assert verdict.passed is False
    good, _ = _finding("12 of 120 checks failed in version 2.4.1 of `loader.py` [E:n].", ROWS)
    assert good.passed


def test_every_scenario_report_the_labels_accept_passes_and_the_overclaim_fails(evidence) -> None:
    # The study's semantic group reads these reports: the new checks must not hold back a conforming one.
    seen = 0
    for name in list_scenarios():
        scenario = load_scenario(name)
        for action in scenario.actions:
            if action.get("kind") != "write_report" or "## Conclusion" not in str(action["text"]):
                continue
            verdict = EvidenceSupportReviewer().review(str(action["text"]).encode(), evidence)
            bad = [(f.problem, f.mismatches) for f in verdict.findings if f.mismatches]
            if name == "overclaiming_conclusion":
                assert [p for p, _ in bad] == ["overclaim"]
            else:
                assert bad == [], name
            seen += 1
    assert seen >= 8


def test_check_claim_asks_only_the_aspects_named() -> None:
    note = "0 rows; 120 expected."
    assert [m.aspect for m in check_claim("Every run wrote 120 rows.", note)] == ["number", "scope"]
    assert [m.aspect for m in check_claim("Every run wrote 120 rows.", note, aspects=["scope"])] == ["scope"]
    reviewer = EvidenceSupportReviewer(aspects=["entity"])
    assert "aspects=entity" in reviewer.name
    with pytest.raises(ValueError, match="aspects: unknown 'numbers'"):
        EvidenceSupportReviewer(aspects=["numbers"])  # type: ignore[list-item]


def _cpu_seconds(claims: int) -> float:
    notes = {"n": EvidenceNote(id="n", data=ROWS["n"].data * 20)}
    line = ("The export, not the loader, wrote 120 rows; 10% of 120 checks failed in `x.py` v2 and "
            "nothing more than that, never less [E:n].\n")
    report = _doc(line * claims)
    best = float("inf")
    for _ in range(2):  # the better of two: a collection or a page fault is not the reviewer
        start = time.process_time()
        verdict = EvidenceSupportReviewer().review(report, notes)
        best = min(best, time.process_time() - start)
    assert len(verdict.findings) == claims and not verdict.passed
    return best


def test_the_review_grows_linearly_with_the_claims() -> None:
    # A complexity check, not a speed target: 8x the claims may cost ~8x the CPU time.
    small, large = _cpu_seconds(250), _cpu_seconds(2000)
    assert large < 20 * small, f"250 claims {small:.3f}s, 2000 {large:.3f}s CPU: {large / small:.0f}x"


def test_a_number_past_a_float_or_a_huge_denominator_is_read_without_error_or_a_walk() -> None:
    # int(inf) raised OverflowError; a percentage of a 10^300 denominator walked that many integers.
    note = "12 of 120 checks failed; 1" + "0" * 300 + " bytes."
    found = check_claim("9" * 400 + "% of them. 10% of the checks failed. 50% of the bytes.", note)
    assert [(m.aspect, m.claim_part) for m in found] == [("number", "50%")]
    start = time.process_time()
    flood = check_claim(" ".join(f"{i}%" for i in range(3000)) + ".", " ".join(str(i) for i in range(3000)))
    assert len(flood) > 2000 and time.process_time() - start < 10, "3000 percentages against 3000 numbers"
