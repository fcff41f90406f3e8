"""A researcher's review of the layered context: what the README and the docstrings promise, on edge inputs."""

from __future__ import annotations

import json
import re

import pytest

from harness_lab.context import ContextManager, ContextView, Layer, apply_changes, is_anomalous


def _offsets(reference: str) -> list[tuple[int, str]]:
    return [(int(pos), line) for pos, line in re.findall(r"^  @(\d+): (.*)$", reference, re.M)]


@pytest.mark.parametrize(
    "output",
    [
        # an anomaly line that a clean line before it only contains
        "errors_total 0\n" + "row ok\n" * 20 + "error\n",
        "a timeout_ms=30 setting\n" + "ok\n" * 30 + "timeout\r\nlast line: timeout\n",
        "build_failed_count 0\u2028" + "fine " * 40 + "\u2028failed",
    ],
)
def test_a_large_output_points_at_each_anomaly_line_where_it_starts(output: str) -> None:
    # The in-view stand-in of a large output says "@pos: line" so a model can read_ref near the anomaly;
    # pos was the first place the line's text occurred, even inside a longer clean line.
    ctx = ContextManager(output_cap_bytes=64)
    item = ctx.add_interaction(1, "cat metrics", output, source="read_file:metrics")
    assert item.ref_id is not None
    shown = _offsets(item.text)
    assert shown, item.text
    for pos, line in shown:
        assert is_anomalous(line)
        # the whole line starts there
        assert ctx.read_ref(item.ref_id, pos).splitlines()[0] == line
        assert pos == 0 or output[pos - 1] in "\n\r\u2028"


class _Encoding:
    """A tokenizer object (tiktoken's Encoding, say): it counts through a method, it is not a counter."""

    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))


@pytest.mark.parametrize("field", ["counter", "summarizer"])
def test_a_counter_or_summarizer_that_cannot_be_called_is_refused_when_given(field: str) -> None:
    # It was taken, and failed later with "'_Encoding' object is not callable": the counter at the first
    # add, the summarizer only at the first compression, many steps into a run.
    with pytest.raises(ValueError, match=f"^{field} must be callable.*_Encoding"):
        ContextManager(**{field: _Encoding()})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0.8", None, True])
def test_low_water_must_be_a_number_in_the_unit_interval(value: object) -> None:
    # "0.8" and None raised a bare TypeError from a comparison ("'<' not supported ..."); True was taken.
    with pytest.raises(ValueError, match=r"^low_water must be a number in \(0, 1\], got "):
        ContextManager(low_water=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("layer", [2, "L2", None])
def test_add_takes_a_layer_and_names_the_field_otherwise(layer: object) -> None:
    # "L2" or 2 for Layer.L2 failed with "'str' object has no attribute 'compressible'".
    ctx = ContextManager()
    with pytest.raises(ValueError, match=r"^layer must be a Layer \(Layer.L0 to Layer.L5\), got "):
        ctx.add(layer, "a note", source="me", round=1)  # type: ignore[arg-type]
    assert ctx.view().items == ()


_CONFIG = "\n".join(f"port: {8000 + k}" for k in range(400))


def _stored_then_retired(ctx: ContextManager) -> str:
    """A large read of file:config.yaml whose reference left the view and was retired from the record."""
    item = ctx.add_interaction(1, "read_file config.yaml", _CONFIG, source="step 1:read_file", key="file:config.yaml")
    assert item.ref_id is not None
    ctx.compress(0)  # the reference leaves the view (its output stays stored) ...
    for rnd in range(2, 200):
        ctx.add_interaction(rnd, "think", "ok", source="step:think")
    assert item.id not in ctx._rec.archive and item.id not in ctx._rec.stubs  # ... and is retired
    return item.ref_id


def test_an_output_marked_stale_by_its_key_after_its_item_was_retired_says_so() -> None:
    # By source this worked (the store matches its own sources); by key (what ExternalLoop marks: file:<path>)
    # only while the item that showed the output was still recorded, so read_ref gave the old text unmarked.
    ctx = ContextManager(output_cap_bytes=1000)
    ref_id = _stored_then_retired(ctx)
    restored = ContextManager.from_state(json.loads(json.dumps(ctx.state())))
    for each in (ctx, restored):
        each.mark_stale("file:config.yaml")
        first, _, rest = each.read_ref(ref_id).partition("\n")
        assert first.startswith(f"[stale: {ref_id}") and "file:config.yaml" in first and rest == _CONFIG


def test_the_key_of_a_stored_output_travels_in_the_change_log() -> None:
    ctx = ContextManager(output_cap_bytes=1000)
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    ref_id = _stored_then_retired(ctx)
    log = json.loads(json.dumps(ctx.take_changes()))
    replayed = ContextManager.from_state(apply_changes(base, [log]), ref_loader=lambda sha: _CONFIG)
    replayed.mark_stale("file:config.yaml")
    assert replayed.read_ref(ref_id).startswith(f"[stale: {ref_id}")


class _CountingPattern:
    """ANOMALY_PATTERN, counting the characters its searches are given."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.chars = pattern, 0

    def search(self, text: str) -> re.Match[str] | None:
        self.chars += len(text)
        return self.pattern.search(text)


def test_the_anomaly_lines_of_a_huge_output_are_found_without_scanning_it_twice_with_the_regex(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 12 MiB access log with one error line spent ~7 s in anomaly_lines (the regex over the whole text, then
    # over every line again; ~0.2 µs a character): each read of a large file cost seconds of bookkeeping.
    from harness_lab.context import anomaly

    log = "\n".join(f"{i},2026-12-01T10:00:{i % 60:02d},200,GET /api/items/{i}" for i in range(2000))
    output = f"{log}\nERROR: disk full\n{log}"
    counting = _CountingPattern(anomaly.ANOMALY_PATTERN)
    monkeypatch.setattr(anomaly, "ANOMALY_PATTERN", counting)
    assert anomaly.anomaly_lines(output) == ["ERROR: disk full"]
    assert counting.chars < 100  # only the line that holds a signal word went through the regex


def test_self_check_does_not_report_a_failure_reason_a_later_one_with_its_key_released() -> None:
    # A feedback superseded by one with the same key is released (unpinned) so compression may fold it, as
    # add_feedback says; self_check still called it a lost failure reason, so "empty = fine" never held for
    # a run past its first repeated budget warning.
    ctx = ContextManager(budget_tokens=4000)
    ctx.add(Layer.L1, "task", source="t", round=0)
    ctx.add_feedback(1, "budget: 80% of tokens spent", source="gates", key="gates:budget")
    open_failure = ctx.add_feedback(1, "finish rejected: section 3 missing", source="validator")
    ctx.add_interaction(1, "think()", "noted", source="step 1:think")
    before = ctx.view()
    ctx.add_feedback(2, "budget: 90% of tokens spent", source="gates", key="gates:budget")
    ctx.compress(0)
    assert "80%" not in ctx.view().render()
    assert ctx.self_check(before, ctx.view()) == []
    # a failure reason that is still open is reported when a change drops it
    without = ContextView([i for i in ctx.view().items if i.id != open_failure.id], 0, 4000)
    assert [loss.split(" lost")[0] for loss in ctx.self_check(before, without)] == [
        f"failure reason {open_failure.id} (L2, round 1, from validator)"]
