"""An item's compact JSON written directly (the usual item) is the JSON of its compact dict, byte for byte."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from harness_lab.context import ContextManager, Layer
from harness_lab.context._versions import build
from harness_lab.context.items import compact_json
from harness_lab.persistence.checkpoint import _dumps

_ascii = st.text(st.characters(max_codepoint=127), max_size=12)
_texts = st.one_of(st.text(max_size=12), _ascii,
                   st.sampled_from(["> ls\nok", 'a"b\\c', "\x00\x1f\x7f", "é😀", "\u2028", "c1"]))
_items = st.builds(
    build, id=st.one_of(st.sampled_from(["c1", "c22", "c 1", 'c"1', "é1"]), _ascii),
    layer=st.sampled_from(list(Layer)), text=st.one_of(_ascii, _texts), source=st.one_of(_ascii, _texts),
    round=st.one_of(st.integers(), st.booleans()), tokens=st.integers(min_value=0), seq=st.integers(),
    role=st.sampled_from(["note", "interaction", "feedback", "summary", "conclusion", "subtask", "resume", "other",
                          'q"']),
    # optional fields mostly at their default (the direct path), each sometimes not
    pinned=st.sampled_from([False] * 6 + [True, 0]), anomaly=st.sampled_from([False] * 7 + [True]),
    key=st.one_of(st.none(), st.none(), st.none(), _texts), freshness=st.sampled_from(["fresh"] * 7 + ["stale"]),
    status=st.sampled_from(["current"] * 7 + ["superseded"]), ref_id=st.sampled_from([None] * 7 + ["ref_001"]),
    covers=st.sampled_from([()] * 7 + [("c1",)]), segment=st.sampled_from([0] * 6 + [1, False]))


@settings(max_examples=1500, deadline=None)
@given(_items)
def test_the_direct_json_of_an_item_is_the_json_of_its_compact_dict(item: object) -> None:
    fast = compact_json(item)  # type: ignore[arg-type]
    if fast is not None:
        assert fast == _dumps(item.to_dict(compact=True))  # type: ignore[attr-defined]


def test_items_of_the_usual_shapes_take_the_direct_path_and_others_not() -> None:
    rng = random.Random(7)
    direct = 0
    for n in range(3000):
        item = build(f"c{n}", rng.choice(list(Layer)), rng.choice(["> ls\nok", 'say "hi"\t', "é", "x\x01"]),
                     rng.choice(["step 1:think", "read_file:a.txt", "ü"]), n, rng.randint(0, 99), n,
                     role=rng.choice(["note", "interaction", "summary"]), pinned=rng.random() < 0.1,
                     key=rng.choice([None] * 9 + ["k"]), freshness=rng.choice(["fresh"] * 9 + ["stale"]))
        fast = compact_json(item)
        assert (fast or _dumps(item.to_dict(compact=True))) == _dumps(item.to_dict(compact=True))
        usual = not (item.pinned or item.key or item.freshness == "stale") and (item.text + item.source).isascii()
        assert (fast is not None) == usual
        direct += usual
    assert 1000 < direct < 3000


def test_a_step_s_interaction_takes_the_direct_path() -> None:
    ctx = ContextManager()
    item = ctx.add_interaction(7, "read_file notes.txt", 'line "one"\n\tline two', source="read_file:notes.txt")
    assert compact_json(item) == _dumps(item.to_dict(compact=True))
    note = ctx.add(Layer.L1, "task: fix config", source="task", round=0)
    assert compact_json(note) == _dumps(note.to_dict(compact=True))
