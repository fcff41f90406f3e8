"""Anomalies beyond keywords (issue 18): numeric mismatches, non-zero exit codes, failed assertions,
expected-vs-actual lines and traceback frames are kept; their successful twins are not flagged."""

from __future__ import annotations

import pytest

from harness_lab.context import ContextManager, Layer, anomaly_lines, is_anomalous, numeric_mismatch

POSITIVES = [
    ("numeric", "0 rows; 120 expected"),
    ("numeric", "loaded 3 files, 5 were expected"),
    ("numeric", "Expected 120 rows, found 0"),
    ("numeric", "row count should be 120 but is 0"),
    ("numeric", "found 3 files instead of 5"),
    ("numeric", "count 0 != 120"),
    ("numeric", "checksum size 1.5 rather than 2.5"),
    ("exit", "exit code 2"),
    ("exit", "process exited with 137"),
    ("exit", "make: exit status 1"),
    ("exit", "rc=1"),
    ("exit", "returncode: 3"),
    ("exit", "{'status': 'error', 'exit_status': 1}"),
    ("exit", "worker killed by signal 9"),
    ("assertion", "E       assert 0 == 120"),
    ("assertion", "not ok 3 - totals add up"),
    ("expected-actual", "Expected: 120"),
    ("expected-actual", "  actual = 0"),
    ("expected-actual", "- want: 3"),
    ("expected-actual", "got: 4"),
    ("traceback", '  File "app.py", line 3, in main'),
]
NEGATIVES = [
    "120 rows; 120 expected",
    "Expected 120 rows, found 120",
    "exit code 0",
    "process exited with 0",
    "rc=0",
    "returncode: 0",
    "{'status': 'ok', 'exit_status': 0}",
    "3 passed in 0.12s",
    "the expected format is YAML",
    "ok 3 - totals add up",
    "listening on port 8080",
    "row 501: value=3507",
    "see file app.py, section 3",
    "version 1.2 required",
]


@pytest.mark.parametrize(("kind", "text"), POSITIVES)
def test_anomaly_kind_is_flagged_and_its_line_kept(kind: str, text: str) -> None:
    assert is_anomalous(text), kind
    assert anomaly_lines(f"step ok\n{text}\nmore output") == [text]


@pytest.mark.parametrize("text", NEGATIVES)
def test_successful_twin_is_not_flagged(text: str) -> None:
    assert not is_anomalous(text)
    assert anomaly_lines(text) == []


@pytest.mark.parametrize(("text", "span"), [
    ("loaded: 0 rows; 120 expected.", "0 rows; 120 expected"),
    ("assert: expected 120, got 0 (table users)", "expected 120, got 0"),
    ("3 files instead of 5", "3 files instead of 5"),
])
def test_numeric_mismatch_names_the_span(text: str, span: str) -> None:
    assert numeric_mismatch(text) == span


def test_numeric_mismatch_survives_compression_verbatim() -> None:
    """The issue's case: "0 rows; 120 expected" was compressed away as an ordinary line."""
    ctx = ContextManager(budget_tokens=200)
    ctx.add(Layer.L1, "load the users table", source="task", round=0, pinned=True)
    ctx.add_interaction(1, "run_command load", "loaded table users\n0 rows; 120 expected\ndone", source="step 1")
    for n in range(2, 12):
        ctx.add_interaction(n, f"think {n}", f"plain note {n} " + "words " * 20, source=f"step {n}")
    report = ctx.compress()
    rendered = ctx.view().render()
    assert "0 rows; 120 expected" in rendered
    assert report.ok and not report.residual
