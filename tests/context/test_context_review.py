"""A researcher's review of the layered context: what the README and the docstrings promise, on edge inputs."""

from __future__ import annotations

import re

import pytest

from harness_lab.context import ContextManager, is_anomalous


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
