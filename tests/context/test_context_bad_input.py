"""Misuse of the context manager's knobs is a clear error, not a silently wrong budget."""

from __future__ import annotations

import pytest

from harness_lab.context import ContextManager, Layer


@pytest.mark.parametrize("value", [-5, 2.5, None, "3", True])
def test_a_counter_that_returns_no_token_count_is_refused(value: object) -> None:
    # A negative count made the total negative: everything "fit" and the run's token budget was credited.
    ctx = ContextManager(budget_tokens=10, counter=lambda text: value)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"token counter .* returned .* non-negative int"):
        ctx.add(Layer.L1, "task", source="t", round=0)


def test_a_counter_failing_only_on_some_text_is_caught_there() -> None:
    ctx = ContextManager(budget_tokens=10, counter=lambda text: -1 if "boom" in text else len(text))
    ctx.add(Layer.L1, "task", source="t", round=0)
    with pytest.raises(ValueError, match="returned -1"):
        ctx.add_interaction(1, "a", "boom", source="s")
    assert ctx.total_tokens >= 0


def test_a_good_custom_counter_is_used_as_given() -> None:
    ctx = ContextManager(budget_tokens=100, counter=len)
    item = ctx.add(Layer.L1, "task", source="t", round=0)
    assert item.tokens == len(item.render())
    assert ctx.counter("abc") == 3


def _filled() -> ContextManager:
    ctx = ContextManager(budget_tokens=10_000)
    ctx.add(Layer.L1, "task", source="t", round=0)
    for i in range(8):
        ctx.add_interaction(i, f"read_file f{i}", "ok, 40 lines " * 5, source=f"read_file:f{i}")
    return ctx


def test_compress_to_zero_compresses_as_far_as_it_can_not_to_the_default_target() -> None:
    ctx = _filled()
    report = ctx.compress(0)  # 0 was read as "not given": the default target, which this context meets
    assert report.target_tokens == 0
    assert report.tokens_after < report.tokens_before


def test_a_negative_compression_target_is_refused() -> None:
    with pytest.raises(ValueError, match="target_tokens"):
        _filled().compress(-5)


@pytest.mark.parametrize("field", ["budget_tokens", "output_cap_bytes"])
@pytest.mark.parametrize("value", [True, 1.5, "100"])
def test_budgets_and_caps_must_be_whole_numbers(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ContextManager(**{field: value})  # type: ignore[arg-type]


def test_the_budget_setter_takes_whole_numbers_only() -> None:
    ctx = ContextManager()
    with pytest.raises(ValueError, match="budget_tokens"):
        ctx.budget_tokens = 2.5  # type: ignore[assignment]
