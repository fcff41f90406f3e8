"""Behaviour of the context manager's public API, one behaviour per test."""

from __future__ import annotations

import json

import pytest

from harness_lab.context import (
    ContextItem,
    ContextManager,
    ContextView,
    Layer,
    approx_token_count,
    regex_token_count,
)

SYSTEM = (
    "You are a careful agent.\nTools: read_file(path), run_command(cmd).\nNever write outside the workspace."
)
TASK = "Fix config loading.\nAcceptance: pytest passes; config.yaml is valid YAML."


def _ctx(budget: int = 4000, **kw: object) -> ContextManager:
    ctx = ContextManager(budget_tokens=budget, **kw)  # type: ignore[arg-type]
    ctx.add(Layer.L0, SYSTEM, source="system", round=0)
    ctx.add(Layer.L1, TASK, source="task", round=0)
    return ctx


def test_default_counter_is_utf8_bytes_over_four() -> None:
    assert approx_token_count("") == 0
    assert approx_token_count("abcd") == 1
    assert approx_token_count("abcde") == 2
    assert approx_token_count("配置") == 2  # 6 bytes
    assert regex_token_count("HTTP 200, ok") == 4


def test_custom_counter_is_used_for_every_item() -> None:
    ctx = ContextManager(budget_tokens=100, counter=lambda text: 7)
    item = ctx.add(Layer.L2, "anything", source="s", round=1)
    assert item.tokens == 7
    assert ctx.view().total_tokens == 7


def test_every_item_carries_layer_tokens_source_round_freshness_status() -> None:
    ctx = _ctx()
    ctx.add_interaction(1, "read_file config.yaml", "port: 8080", source="read_file:config.yaml")
    view = ctx.view()
    assert isinstance(view, ContextView)
    last = view.items[-1]
    assert (last.layer, last.source, last.round, last.freshness, last.status) == (
        Layer.L2,
        "read_file:config.yaml",
        1,
        "fresh",
        "current",
    )
    assert last.tokens == approx_token_count(last.render())
    assert view.total_tokens == sum(i.tokens for i in view.items)
    assert "[L2 | round 1 | from read_file:config.yaml | fresh | current" in view.render()


def test_rendered_view_counts_no_more_than_its_total() -> None:
    ctx = _ctx()
    for r in range(1, 6):
        ctx.add_interaction(r, f"step {r}", "ok " * r, source="tool")
    view = ctx.view()
    assert approx_token_count(view.render()) <= view.total_tokens


def test_last_three_interactions_stay_in_l2_older_move_to_l4() -> None:
    ctx = _ctx()
    items = [ctx.add_interaction(r, f"ls dir{r}", f"file{r}.py", source="ls") for r in range(1, 6)]
    view = ctx.view()
    assert [i.id for i in view.by_layer(Layer.L2)] == [i.id for i in items[2:]]
    assert [i.id for i in view.by_layer(Layer.L4)] == [i.id for i in items[:2]]
    assert view.get(items[0].id).text == items[0].text  # type: ignore[union-attr]


def test_view_orders_by_layer_and_is_cached_until_a_change() -> None:
    ctx = _ctx()
    ctx.add(Layer.L4, "explored src/", source="ls", round=1)
    ctx.add(Layer.L3, "config lives in config/settings.yaml", source="subtask:find", round=2)
    view = ctx.view()
    assert [i.layer for i in view.items] == [Layer.L0, Layer.L1, Layer.L3, Layer.L4]
    assert ctx.view() is view
    ctx.add(Layer.L2, "now editing", source="note", round=3)
    assert ctx.view() is not view


def test_a_view_is_a_snapshot_even_when_ordered_after_later_changes() -> None:
    ctx = _ctx()
    ctx.add(Layer.L4, "explored src/", source="ls", round=1)
    view = ctx.view()  # its items are put in order only when read: read them after changes
    ctx.add_interaction(2, "read_file a.txt", "alpha", source="step 2:read_file")
    ctx.add_resume_note("resumed after a crash", round=3)
    assert [i.text for i in view.items] == [SYSTEM, TASK, "explored src/"]
    assert view.total_tokens == sum(i.tokens for i in view.items)
    later = ctx.view()
    assert later.items[0].role == "resume" and len(later.items) == 5  # the resume note first
    assert later == ContextView(later.items, later.total_tokens, later.budget_tokens) and later != view
    with pytest.raises(AttributeError):
        view.total_tokens = 0  # type: ignore[misc]


def test_anomalies_are_detected_in_results() -> None:
    ctx = _ctx()
    bad = ctx.add_interaction(1, "GET /api", "HTTP 200 but body code 500", source="http_get:/api")
    good = ctx.add_interaction(2, "GET /health", '{"ok": true}', source="http_get:/health")
    forced = ctx.add_interaction(3, "ls", "fine", source="ls", anomaly=True)
    assert bad.anomaly and not good.anomaly and forced.anomaly


def test_large_output_is_a_reference_and_fetchable_unchanged() -> None:
    ctx = _ctx()
    payload = "".join(f"row {i}: value={i * 7} ü\n" for i in range(2500))
    assert len(payload.encode()) > 50_000
    item = ctx.add_interaction(4, "run_command dump", payload, source="run_command:dump")
    view = ctx.view()
    assert item.layer == Layer.L5 and item.ref_id is not None
    assert payload not in view.render()
    assert item.tokens < 200
    assert ctx.read_ref(item.ref_id) == payload
    assert ctx.read_ref(item.ref_id, 100, 250) == payload[100:250]
    assert ctx.read_ref(item.ref_id, len(payload) - 10) == payload[-10:]
    with pytest.raises(KeyError):
        ctx.read_ref("ref_999")


def test_output_cap_is_configurable() -> None:
    ctx = _ctx(output_cap_bytes=64)
    small = ctx.add_interaction(1, "cat a", "x" * 60, source="cat:a")
    large = ctx.add_interaction(2, "cat b", "x" * 65, source="cat:b")
    assert small.ref_id is None and large.ref_id == "ref_001"


def test_large_output_summary_shows_its_anomaly_lines() -> None:
    ctx = _ctx()
    payload = "ok\n" * 10_000 + "AssertionError: expected 3, got 4\n" + "ok\n" * 10
    item = ctx.add_interaction(5, "pytest", payload, source="run_command:pytest")
    assert item.anomaly
    assert "AssertionError: expected 3, got 4" in item.text


def test_feedback_is_pinned_anomaly_and_reaches_next_view() -> None:
    ctx = _ctx()
    fb = ctx.add_feedback(
        3, "check pytest failed: 2 tests red (test_load, test_port)", source="validator:pytest"
    )
    assert fb.pinned and fb.anomaly and fb.role == "feedback"
    assert fb.text in ctx.view().render()


def test_finish_subtask_collapses_process_into_l3_conclusion() -> None:
    ctx = _ctx()
    ctx.begin_subtask("find-config", "find where the config lives", round=1)
    process = [ctx.add_interaction(r, f"ls try{r}", f"nothing in try{r}", source="ls") for r in range(1, 5)]
    anomaly = ctx.add_interaction(5, "read_file x", "permission denied: x", source="read_file:x")
    done = ctx.finish_subtask("find-config", "config is at config/settings.yaml", round=6)
    view = ctx.view()
    ids = {i.id for i in view.items}
    assert done.layer == Layer.L3 and done.role == "conclusion"
    assert "config is at config/settings.yaml" in done.text and "round 6" in done.text
    assert not ids.intersection(i.id for i in process)
    assert anomaly.id in ids and view.get(anomaly.id).layer == Layer.L3  # type: ignore[union-attr]
    assert set(done.covers) >= {i.id for i in process}


def test_conflicting_summaries_both_visible_later_current() -> None:
    ctx = _ctx()
    first = ctx.summarize("config file is at path A", round=3, source="read_file:a.yaml", key="config-path")
    second = ctx.summarize(
        "config file is actually at path B; A is an old copy",
        round=8,
        source="read_file:b.yaml",
        key="config-path",
    )
    view = ctx.view()
    old, new = view.get(first.id), view.get(second.id)
    assert old is not None and new is not None
    assert old.status == "superseded" and old.superseded_by == second.id
    assert new.status == "current" and new.supersedes == first.id
    assert first.text.startswith("[round 3 summary, from read_file:a.yaml]")
    text = view.render()
    assert f"superseded by {second.id}" in text and f"supersedes {first.id}" in text
    assert text.index("path A") < text.index("path B")


def test_summarize_supersedes_by_explicit_id() -> None:
    ctx = _ctx()
    first = ctx.summarize("port is 8080", round=2, source="read_file:a", key="port")
    second = ctx.summarize("port is 9090", round=4, source="read_file:b", key="other", supersedes=first.id)
    assert ctx.view().get(first.id).status == "superseded"  # type: ignore[union-attr]
    assert second.supersedes == first.id


def test_mark_stale_then_reselect() -> None:
    ctx = _ctx()
    read = ctx.add_interaction(1, "read_file config.yaml", "port: 8080", source="read_file:config.yaml")
    concl = ctx.summarize("port is 8080", round=2, source="read_file:config.yaml", key="port")
    other = ctx.add_interaction(3, "ls", "a b", source="ls")
    marked = ctx.mark_stale("config.yaml")
    assert {i.id for i in marked} == {read.id, concl.id}
    view = ctx.view()
    assert view.get(concl.id).freshness == "stale"  # type: ignore[union-attr]
    assert "| stale |" in view.render()
    ctx.reselect()
    ids = {i.id for i in ctx.view().items}
    assert concl.id not in ids and read.id not in ids and other.id in ids
    assert ctx.item(concl.id).freshness == "stale"  # still recorded


def test_stale_propagates_to_conclusions_built_from_it() -> None:
    ctx = _ctx()
    ctx.add_interaction(1, "read_file settings.yaml", "db: sqlite", source="read_file:settings.yaml")
    done = ctx.finish_subtask("inspect", "db backend is sqlite", round=2)
    assert done.id in {i.id for i in ctx.mark_stale("settings.yaml")}


def test_l0_l1_and_pinned_survive_reselect() -> None:
    ctx = _ctx()
    pinned = ctx.add(
        Layer.L3, "approved: delete build/", source="human", round=1, pinned=True, key="approval"
    )
    ctx.mark_stale("approval")
    ctx.mark_stale("system")
    ctx.reselect()
    ids = {i.id for i in ctx.view().items}
    assert pinned.id in ids and ctx.view().items[0].freshness == "stale"


def test_resume_note_starts_the_view() -> None:
    ctx = _ctx()
    ctx.add_interaction(1, "ls", "a", source="ls")
    note = ctx.add_resume_note("Resumed: was fixing config; done: inspect; stuck: pytest red", round=9)
    assert ctx.view().items[0].id == note.id
    again = ctx.add_resume_note("Resumed again", round=12)
    view = ctx.view()
    assert view.items[0].id == again.id
    assert view.get(note.id).status == "superseded"  # type: ignore[union-attr]


def test_state_round_trips_exactly() -> None:
    ctx = _ctx(budget=300)
    ctx.add_interaction(1, "GET /api", "HTTP 200 but body code 500", source="http_get:/api")
    for r in range(2, 20):
        ctx.add_interaction(r, f"read f{r}", f"contents {r} " * 5, source=f"read_file:f{r}")
        ctx.view()
    ctx.add_interaction(20, "dump", "z" * 20_000, source="run_command:dump")
    ctx.summarize("a", round=20, source="s", key="k")
    ctx.summarize("b", round=21, source="s", key="k")
    ctx.mark_stale("read_file:f19")
    state = ctx.state()
    restored = ContextManager.from_state(json.loads(json.dumps(state)))
    assert restored.state() == state
    assert restored.view() == ctx.view()
    assert restored.read_ref("ref_001") == "z" * 20_000
    # both keep working the same way
    a = ctx.add_interaction(22, "ls", "x", source="ls")
    b = restored.add_interaction(22, "ls", "x", source="ls")
    assert a == b and restored.state() == ctx.state()


def test_item_round_trips_through_dict() -> None:
    ctx = _ctx()
    item = ctx.add(Layer.L4, "explored", source="ls", round=2, key="k")
    assert ContextItem.from_dict(item.to_dict()) == item
    assert ContextView.from_dict(ctx.view().to_dict()) == ctx.view()


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        ContextManager(budget_tokens=0)
    with pytest.raises(ValueError):
        ContextManager.from_state({"kind": "other"})


def test_render_puts_every_header_on_its_own_line() -> None:
    ctx = _ctx()
    ctx.add_interaction(1, "ls", "a", source="ls")
    ctx.add_interaction(2, "ls", "b", source="ls")
    lines = ctx.view().render().splitlines()
    headers = [line for line in lines if line.startswith("[L")]
    assert len(headers) == 4
    assert ctx.view().render().endswith("\n")


def test_feedback_with_a_key_supersedes_and_releases_the_earlier_one() -> None:
    ctx = _ctx()
    first = ctx.add_feedback(3, "budget at 80%", source="gates", key="budget")
    loose = ctx.add_feedback(4, "pytest failed", source="validator")
    second = ctx.add_feedback(5, "budget at 90%", source="gates", key="budget")
    view = ctx.view()
    old = view.get(first.id)
    assert old is not None and old.status == "superseded" and not old.protected
    assert second.supersedes == first.id and second.protected
    assert view.get(loose.id) == loose  # no key: untouched


def test_interaction_key_lets_mark_stale_find_it() -> None:
    ctx = _ctx()
    item = ctx.add_interaction(1, "read", "port: 1", source="step 1:read_file", key="config.yaml")
    assert [i.id for i in ctx.mark_stale("config.yaml")] == [item.id]


def test_stale_reaches_a_compression_summary_of_conclusions() -> None:
    ctx = _ctx(budget=100_000, low_water=1.0)
    ctx.add_interaction(1, "read_file db.yaml", "db: sqlite", source="read_file:db.yaml")
    done = ctx.finish_subtask("inspect", "db backend is sqlite " + "x " * 40, round=2)
    for k in range(3):
        ctx.summarize(f"note {k} " + "y " * 40, round=3 + k, source="model")
    ctx.budget_tokens = ctx.view().total_tokens - 10  # L3 must be summarized
    summary = next(i for i in ctx.view().by_layer(Layer.L3) if i.source == "compress:L3")
    assert done.id in summary.covers
    assert summary.id in {i.id for i in ctx.mark_stale("db.yaml")}
