"""The context's share of a step, counted: calls into :mod:`harness_lab.context` (and the checkpoint's
context rows, :mod:`harness_lab.persistence._context_rows`) per step of a no-op loop, without and with a
store. Counted, not timed: a profile hook sees each Python-level call (a comprehension or a generator
resuming is one) and each call of a C function from those modules.

The bounds sit just above what the context does now (no store: 13.8 Python calls, 27.3 C calls a step;
stored: 28.9 and 65.9, counting a whole state every FULL_EVERY steps and a compression pass every ~55): the
hot path before (ItemRecord.relayer + put for a demotion, maybe_retire called every step, the view's total
and the rows' context_from as properties, three dict pops per retired item, a change log's JSON built from
a list of parts, texts derived for demoted items no whole state holds) made 18.1 / 30.4 and 36.1 / 75.8.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from runhelpers import think_run

from harness_lab.store import SQLiteStore

_WARM, _STEPS = 320, 1760  # past the first compression passes; whole states and passes recur within


def _ours(filename: str) -> bool:
    return "/harness_lab/context/" in filename or filename.endswith("/harness_lab/persistence/_context_rows.py")


def _per_step(store: bool, tmp_path: Path) -> tuple[float, float]:
    run = think_run(tmp_path / "ws", SQLiteStore(tmp_path / "runs.sqlite") if store else None, "R1")
    for _ in range(_WARM):
        run.step()
    py = c = 0

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal py, c
        if event == "call":
            py += _ours(frame.f_code.co_filename)
        elif event == "c_call":
            c += _ours(frame.f_code.co_filename)

    sys.setprofile(hook)
    try:
        for _ in range(_STEPS):
            run.step()
    finally:
        sys.setprofile(None)
    run.close()
    return py / _STEPS, c / _STEPS


@pytest.mark.parametrize(("store", "py_max", "c_max"), [(False, 15, 28.5), (True, 30.5, 68)])
def test_the_context_calls_per_step(tmp_path: Path, store: bool, py_max: float, c_max: float) -> None:
    py, c = _per_step(store, tmp_path)
    assert py <= py_max and c <= c_max, (py, c)
