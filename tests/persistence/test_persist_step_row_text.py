"""The step row's shortcuts spell what the general code spells: a flat proposal's text from its template
equals ``full_proposal_json``'s, and a step row reads back equal whatever strings, key orders, extra
keys, shared or fresh records and event steps it holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_lab.loop._step_records import proposed, step_record, tool_called, usage
from harness_lab.persistence.row_text import FLAT_ROWS, dump_step_row, full_proposal_json, proposal_json
from harness_lab.records.actions import FLAT_SPECS
from harness_lab.records.events import Decision, StateChanged, load_step_row
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState
from harness_lab.records.tools import ToolResult

# ASCII with every control character, quote, backslash and DEL; then non-ASCII (and a lone surrogate).
_SPECIAL = ["", "\x7f", '"\\', "\x00\x1f\n\t\b\f\r", "é", "\u2028"]
_text = st.one_of(st.text(st.characters(max_codepoint=127), max_size=12), st.text(max_size=6),
                  st.sampled_from([*_SPECIAL, "\ud800"]))
_storable = st.one_of(st.text(st.characters(max_codepoint=127), max_size=12),  # what a store can write
                      st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), st.sampled_from(_SPECIAL))


@st.composite
def _raw(draw: st.DrawFn, text: st.SearchStrategy[str] = _text) -> dict[str, Any]:
    value = st.one_of(text, text, st.integers(), st.none(), st.lists(text, max_size=2))
    kind = draw(st.sampled_from(sorted(FLAT_SPECS)))
    names = [name for name, _, _ in FLAT_SPECS[kind]]
    raw: dict[str, Any] = {"kind": kind}
    for name in names:
        if draw(st.integers(0, 9)):  # mostly present
            raw[name] = draw(value)
    if draw(st.booleans()):  # a claim, or a key that is no field
        raw[draw(st.sampled_from(["confidence", "verified", "kind2"]))] = draw(value)
    keys = list(raw)
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    return {key: raw[key] for key in keys}


def test_every_flat_kind_has_a_row_template() -> None:
    assert len(FLAT_ROWS) == len(FLAT_SPECS) > 5


@settings(max_examples=600, deadline=None)
@given(_raw())
def test_a_flat_proposals_text_is_the_general_text(raw: dict[str, Any]) -> None:
    proposal = parse_proposal(raw)
    try:
        expected: str | Exception = full_proposal_json(proposal)
    except Exception as err:  # noqa: BLE001 - a lone surrogate: the same refusal either way
        expected = err
    try:
        text: str | Exception = proposal_json(proposal)
    except Exception as err:  # noqa: BLE001
        text = err
    if isinstance(expected, Exception):
        assert type(text) is type(expected)
    else:
        assert text == expected


_DECISIONS = [Decision(verdict="execute", reason="allowed"), Decision(verdict="refuse", reason='no "way"')]
_RESULTS = [ToolResult.success("think", "noted"), ToolResult.failure("read_file", "missing", "list it first"), None]


@settings(max_examples=300, deadline=None)
@given(_raw(_storable),
       st.sampled_from(_DECISIONS), st.sampled_from(_RESULTS), st.integers(1, 10**6), st.booleans(),
       st.sampled_from(list(RunState)), st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 3))
def test_a_step_row_reads_back_equal(raw: dict[str, Any], decision: Decision, result: ToolResult | None, step: int,
                                     fresh: bool, after: RunState, elapsed: float, shape: int) -> None:
    proposal = parse_proposal(raw)
    if fresh:  # an equal record that is not the remembered one
        decision = Decision(verdict=decision.verdict, reason=decision.reason)
    events: list[Any] = [proposed(2 * step, step if shape != 1 else step - 1, proposal, decision)]
    if result is not None:
        events.append(tool_called(2 * step + 1, step, result.tool, result if shape != 2 else result.model_copy()))
    if shape == 3:
        events.insert(0, StateChanged(seq=2 * step - 1, step=step, before=RunState.RUNNING, after=after, reason="r"))
    record = step_record(step, RunState.RUNNING, after, proposal, decision, result, None,
                         usage(step, step, 7 * step, elapsed), tuple(events))
    row = dump_step_row(record)
    back = load_step_row(row)
    if elapsed == elapsed:  # NaN equals nothing, itself included
        assert back == record
    else:
        assert back.model_dump(exclude={"usage"}) == record.model_dump(exclude={"usage"})
    # the event repeating the record's own proposal (and result, when it is the same object) says so
    assert row.count('"same":true') == 1 + (result is not None and shape != 2)
    assert (f'"step":{step - 1}' in row) is (shape == 1)
