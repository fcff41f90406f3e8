"""Made faster, unchanged: items and views filled on a slot twin are the frozen classes, and the
kept answers for short texts (anomaly check, summary gist) are the answers for those texts."""

from __future__ import annotations

import dataclasses

import pytest

from harness_lab.context import ANOMALY_PATTERN, ContextItem, ContextManager, ContextView, Layer, is_anomalous
from harness_lab.context._versions import build, replace
from harness_lab.context.compress import default_summarizer


def test_items_and_views_made_fast_are_the_frozen_classes() -> None:
    item = build("c1", Layer.L2, "t", "s", 1, 3, 1)
    copies = [item, replace(item, {"layer": Layer.L4}), ContextItem.from_dict(item.to_dict())]
    for made in copies:
        assert type(made) is ContextItem
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.text = "changed"  # type: ignore[misc]
    assert copies[2] == item and copies[1] == dataclasses.replace(item, layer=Layer.L4)
    view = ContextView.unordered([item], 3, 10)
    assert type(view) is ContextView and view.items == (item,) and view.total_tokens == 3
    with pytest.raises(AttributeError):
        view._total = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):
        view.total_tokens = 4  # type: ignore[misc]


def test_anomaly_answers_kept_for_short_texts_are_the_patterns() -> None:
    texts = ["noted", "ok", "build failed", "HTTP 200 but the body says 500", "fine " * 60,
             "fine " * 60 + "Traceback (most recent call last)", "x" * 300, "x" * 300 + " error"]
    for _ in range(2):  # the second round answers from what was kept
        for text in texts:
            assert is_anomalous(text) is (ANOMALY_PATTERN.search(text) is not None), text


def test_summary_gist_depends_on_the_role_and_the_text_only() -> None:
    ctx = ContextManager()
    a = ctx.add(Layer.L4, "> ls\na b\nerror: disk", source="s1", round=1)
    b = ctx.add_interaction(2, "ls", "a b\nerror: disk", source="s2", anomaly=False)
    c = ctx.add_interaction(3, "ls", "a b\nerror: disk", source="s3", anomaly=False)
    assert a.text == b.text == c.text
    assert default_summarizer([a, b, c, b]).splitlines() == [
        "- r1 s1: > ls", "error: disk",
        "- r2 s2: > ls -> a b", "error: disk",
        "- r3 s3: > ls -> a b", "error: disk",
        "- r2 s2: > ls -> a b", "error: disk",
    ]


def test_the_compact_form_leaves_out_exactly_the_fields_at_their_default() -> None:
    base = build("c1", Layer.L2, "t", "s", 1, 3, 1)
    variants = [base, replace(base, {"role": "interaction"}), replace(base, {"role": "interaction", "key": "k"}),
                replace(base, {"pinned": True}), replace(base, {"covers": ("c0",), "segment": 2}),
                ContextItem.from_dict(replace(base, {"role": "summary", "freshness": "stale"}).to_dict())]
    for item in variants:
        full = item.to_dict()
        defaults = {f.name: f.default for f in dataclasses.fields(ContextItem) if f.init and f.default is not dataclasses.MISSING}
        expected = {k: v for k, v in full.items() if k in ("kind", "id") or k not in defaults
                    or v != (list(defaults[k]) if isinstance(defaults[k], tuple) else defaults[k])}
        assert item.to_dict(compact=True) == expected
        assert list(item.to_dict(compact=True)) == [k for k in full if k in expected]
        assert ContextItem.from_dict(item.to_dict(compact=True)) == item
