"""Compression policy and its self-check, one behaviour per test."""

from __future__ import annotations

from harness_lab.context import ContextItem, ContextManager, ContextView, Layer, default_summarizer

ANOMALY = "HTTP 200 but body code 500"


def drop_anomalies(items: list[ContextItem]) -> str:
    """The fault "summary drops an anomaly"."""
    return "\n".join(i.text.splitlines()[0] for i in items if not i.anomaly)


def _base(budget: int, **kw: object) -> ContextManager:
    ctx = ContextManager(budget_tokens=budget, **kw)  # type: ignore[arg-type]
    ctx.add(Layer.L0, "system prompt\ntool: read_file(path)", source="system", round=0)
    ctx.add(Layer.L1, "task: fix it\nacceptance: tests pass", source="task", round=0)
    return ctx


def _fill(ctx: ContextManager, rounds: range, words: int = 20) -> list[ContextItem]:
    return [
        ctx.add_interaction(
            r, f"read f{r}", " ".join(f"w{r}_{k}" for k in range(words)), source=f"read_file:f{r}"
        )
        for r in rounds
    ]


def test_default_summarizer_keeps_anomalies_verbatim_and_first_lines() -> None:
    ctx = _base(10_000)
    plain = ctx.add(Layer.L4, "listed src/\nmain.py util.py", source="ls", round=1)
    odd = ctx.add_interaction(2, "GET /api", ANOMALY, source="http_get:/api")
    mixed = ctx.add(Layer.L4, "ran tests\n3 passed\nAssertionError: 1 != 2", source="pytest", round=3)
    text = default_summarizer([plain, odd, mixed])
    assert "listed src/" in text and "main.py" not in text
    assert odd.text in text
    assert "AssertionError: 1 != 2" in text and "3 passed" not in text


def test_summary_is_stamped_with_rounds_and_sources() -> None:
    ctx = _base(10_000)
    _fill(ctx, range(1, 8))
    report = ctx.compress()
    (summary_id,) = report.created
    summary = ctx.view().get(summary_id)
    assert summary is not None and summary.layer == Layer.L4 and summary.role == "summary"
    assert summary.text.startswith(
        "[rounds 1-4 summary, from read_file:f1, read_file:f2, read_file:f3 and 1 more]"
    )
    assert summary.round == 4 and summary.source == "compress:L4"


def test_l4_goes_first_then_l3_then_l2_never_l0_l1() -> None:
    ctx = _base(100_000, low_water=1.0)  # compress exactly to the budget
    l3 = [ctx.summarize(f"conclusion {k} " + "c " * 30, round=k, source="model") for k in range(3)]
    early = _fill(ctx, range(1, 9))
    view = ctx.view()
    l0l1 = view.items[:2]
    total = view.total_tokens
    ctx.budget_tokens = total - 10  # just over: only L4 needs to give
    view = ctx.view()
    assert view.total_tokens <= ctx.budget_tokens
    assert all(view.get(i.id) == i for i in l3)
    assert all(view.get(i.id) is not None for i in early[-3:])  # last 3 interactions untouched (L2)
    assert not any(view.get(i.id) for i in early[:5])  # early exploration summarized or dropped
    assert view.items[:2] == l0l1
    ctx.budget_tokens = sum(i.tokens for i in l0l1) + sum(i.tokens for i in view.by_layer(Layer.L2)) + 5
    view = ctx.view()
    assert view.total_tokens <= ctx.budget_tokens
    assert not view.by_layer(Layer.L3) and not view.by_layer(Layer.L4)
    assert all(view.get(i.id) is not None for i in early[-3:])  # L2 still whole
    assert view.items[:2] == l0l1


def test_l2_is_compressed_last_but_is_compressed() -> None:
    ctx = _base(100_000)
    last = _fill(ctx, range(1, 4), words=200)
    ctx.budget_tokens = 200
    view = ctx.view()
    assert view.total_tokens <= 200
    assert not any(view.get(i.id) for i in last)


def test_l0_l1_are_byte_identical_after_heavy_compression() -> None:
    ctx = _base(300)
    before = [i.render() for i in ctx.view().items]
    _fill(ctx, range(1, 60))
    ctx.compress()
    after = [i.render() for i in ctx.view().items if i.layer <= Layer.L1]
    assert after == before


def test_pinned_fact_survives_in_its_layer() -> None:
    ctx = _base(100_000)
    fact = ctx.add(Layer.L4, "approval: may delete build/", source="human", round=1, pinned=True)
    _fill(ctx, range(2, 40))
    ctx.budget_tokens = 250
    view = ctx.view()
    assert view.get(fact.id) == fact


def test_feedback_survives_compression() -> None:
    ctx = _base(100_000)
    fb = ctx.add_feedback(1, "check pytest failed: test_port expected 8080 got 80", source="validator:pytest")
    _fill(ctx, range(2, 40))
    ctx.budget_tokens = 250
    assert fb.text in ctx.view().render()


def test_anomaly_survives_into_summary_or_repinned() -> None:
    ctx = _base(100_000)
    ctx.add_interaction(1, "GET /api", ANOMALY, source="http_get:/api")
    _fill(ctx, range(2, 40))
    for budget in (2000, 800, 400, 250, 200):
        ctx.budget_tokens = budget
        assert ANOMALY in ctx.view().render()
    assert ctx.last_report is not None and ctx.last_report.residual == ()


def test_summary_that_drops_an_anomaly_fires_the_self_check_and_is_repaired() -> None:
    ctx = _base(10_000, summarizer=drop_anomalies)
    odd = ctx.add_interaction(1, "GET /api", ANOMALY, source="http_get:/api")
    _fill(ctx, range(2, 9))
    report = ctx.compress()
    assert report.fired
    assert len(report.lost_anomalies) == 1 and odd.id in report.lost_anomalies[0]
    assert ANOMALY in report.lost_anomalies[0]
    assert odd.id in report.repinned and report.residual == ()
    kept = ctx.view().get(odd.id)
    assert kept is not None and kept.text == odd.text and kept.pinned
    # repinned: later passes never hand it to the faulty summarizer again
    _fill(ctx, range(9, 20))
    assert not ctx.compress().fired


def test_default_summarizer_does_not_fire_the_self_check() -> None:
    ctx = _base(10_000)
    ctx.add_interaction(1, "GET /api", ANOMALY, source="http_get:/api")
    _fill(ctx, range(2, 9))
    report = ctx.compress()
    assert report.created and not report.fired and report.repinned == ()


def test_self_check_names_each_lost_kind() -> None:
    ctx = _base(10_000)
    odd = ctx.add_interaction(1, "GET /api", ANOMALY, source="http_get:/api")
    fact = ctx.add(Layer.L3, "constraint: keep API", source="human", round=1, pinned=True)
    fb = ctx.add_feedback(2, "validator: schema mismatch", source="validator:schema")
    before = ctx.view()
    assert ctx.self_check(before, before) == []
    gone = ContextView(tuple(i for i in before.items if i.layer <= Layer.L1), 0, before.budget_tokens)
    losses = ctx.self_check(before, gone)
    assert len(losses) == 3
    assert any(s.startswith("anomaly " + odd.id) for s in losses)
    assert any(s.startswith("pinned fact " + fact.id) for s in losses)
    assert any(s.startswith("failure reason " + fb.id) for s in losses)
    no_l0 = ContextView(before.items[1:], 0, before.budget_tokens)
    assert any("pinned fact c1" in s for s in ctx.self_check(before, no_l0))


def test_self_check_accepts_text_moved_into_another_item() -> None:
    ctx = _base(10_000)
    odd = ctx.add_interaction(1, "GET /api", ANOMALY, source="http_get:/api")
    before = ctx.view()
    holder = ctx.add(Layer.L4, "summary:\n" + odd.text, source="x", round=2)
    after = ContextView(tuple(i for i in ctx.view().items if i.id != odd.id), 0, 100)
    assert holder.id in {i.id for i in after.items}
    assert ctx.self_check(before, after) == []


def test_protected_content_over_budget_is_kept_and_flagged() -> None:
    ctx = _base(60)
    odd = [ctx.add_interaction(r, "GET", f"{ANOMALY} #{r}", source="http") for r in range(1, 8)]
    view = ctx.view()
    assert view.over_budget
    assert all(i.text in view.render() for i in odd)
    assert ctx.last_report is not None and ctx.last_report.over_budget


def test_compression_hysteresis_targets_low_water() -> None:
    ctx = _base(1000, low_water=0.5)
    _fill(ctx, range(1, 60))
    view = ctx.view()
    assert view.total_tokens <= 500


def test_stale_and_superseded_items_are_pruned_first() -> None:
    ctx = _base(100_000)
    old = ctx.summarize("old view " + "x " * 40, round=1, source="m", key="k")
    new = ctx.summarize("new view " + "y " * 40, round=2, source="m", key="k")
    keep = ctx.summarize("other " + "z " * 40, round=3, source="m", key="j")
    ctx.budget_tokens = ctx.view().total_tokens - 5
    view = ctx.view()
    assert view.get(old.id) is None
    assert view.get(new.id) is not None and view.get(keep.id) is not None
