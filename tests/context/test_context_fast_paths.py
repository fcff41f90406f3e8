"""The hot path's shortcuts make exactly what the general paths make.

A step adds an interaction (``ItemRecord.add``, a positional ``_build``) and demotes the one that left
the window (``ItemRecord.relayer``): each must give the item, header and token count that
``new``/``restamp`` (the dataclass's own fields, a fresh count) give.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields

import pytest

from harness_lab.context import ContextItem, ContextManager, Layer
from harness_lab.context._versions import build as _build
from harness_lab.context.items import item_header
from harness_lab.context.record import ItemRecord
from harness_lab.context.tokens import approx_token_count, regex_token_count


def test_build_takes_the_dataclass_fields_in_order_with_their_defaults() -> None:
    params = inspect.signature(_build).parameters
    init = [f for f in fields(ContextItem) if f.init]
    assert list(params) == [f.name for f in init]
    for f in init:
        expected = inspect.Parameter.empty if f.default is MISSING else f.default
        assert params[f.name].default == expected, f.name
    values = dict(id="c9", layer=Layer.L3, text="t", source="s", round=4, tokens=7, seq=2, role="summary",
                  pinned=True, anomaly=True, key="k", freshness="stale", status="superseded", ref_id="ref_001",
                  supersedes="c1", superseded_by="c10", covers=("c1",), carries=("c2",), segment=3)
    built = _build(**values)  # type: ignore[arg-type]
    assert built == ContextItem(**values)  # type: ignore[arg-type]
    assert built.render() == f"{item_header(built)}\nt\n"  # no header cached: made when rendered


def _variants(rec: ItemRecord) -> list[ContextItem]:
    base = rec.make(layer=Layer.L2, text="> ls\na b", source="ls:x", round=3, role="interaction")
    return [
        base,
        rec.restamp(base, pinned=True, anomaly=True),
        rec.restamp(base, status="superseded", superseded_by="c99"),
        rec.restamp(base, status="superseded"),
        rec.restamp(base, supersedes="c1,c2", freshness="stale"),
        rec.restamp(base, ref_id="ref_002", text="> big\n[output stored as ref_002: 错误 …]"),
        rec.make(layer=Layer.L0, text="system", source="system", round=0),
        rec.make(layer=Layer.L5, text="x" * 41, source="s", round=12345, key="file:a", role="feedback"),
    ]


@pytest.mark.parametrize("counter", [approx_token_count, regex_token_count, lambda s: s.count("L4") * 1000 + len(s)])
def test_relayer_is_restamp_of_the_layer(counter: object) -> None:
    rec = ItemRecord(counter)  # type: ignore[arg-type]
    for item in _variants(rec):
        for layer in Layer:
            fast, slow = rec.relayer(item, layer), rec.restamp(item, layer=layer)
            assert fast == slow and fast.tokens == slow.tokens
            assert fast.render() == slow.render() == f"{item_header(slow)}\n{slow.text}\n"
    # An item this record did not count (loaded, out of the view): counted afresh
    loaded = ContextItem.from_dict({**_variants(rec)[0].to_dict(), "tokens": 1})
    assert rec.relayer(loaded, Layer.L4).tokens == rec.restamp(loaded, layer=Layer.L4).tokens != 1


def test_add_is_new_with_those_fields() -> None:
    fast, slow = ItemRecord(approx_token_count), ItemRecord(approx_token_count)
    for rec in (fast, slow):
        rec.segment = 2
        rec.new(layer=Layer.L1, text="task", source="task", round=0)
    a = fast.add(Layer.L5, "> big\nhead", "run:x", 4, "interaction", True, "file:x", "ref_001")
    b = slow.new(layer=Layer.L5, text="> big\nhead", source="run:x", round=4, role="interaction", anomaly=True,
                 key="file:x", ref_id="ref_001")
    assert a == b and a.render() == b.render() and (fast.total, fast.next) == (slow.total, slow.next)
    assert list(fast.live) == list(slow.live) and fast.take_changes()[0] == slow.take_changes()[0]


def test_a_demoted_interaction_reads_as_before() -> None:
    ctx = ContextManager()
    items = [ctx.add_interaction(r, f"step {r}", "ok", source=f"s{r}") for r in range(5)]
    first = ctx.item(items[0].id)
    assert first.layer == Layer.L4 and first.render().startswith("[L4 | round 0 | from s0 | fresh | current |")
    assert first.tokens == approx_token_count(first.render())


def test_approx_count_is_utf8_bytes_over_four_for_any_text() -> None:
    for text in ["", "a", "abcd", "abcde", "é", "错误" * 3, "x" * 4097, "mixed é text\x00\n"]:
        assert approx_token_count(text) == -(-len(text.encode("utf-8")) // 4), text
