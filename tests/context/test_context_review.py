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
