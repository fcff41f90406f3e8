"""The no-store step does little per step (issue 20): a bounded number of Python calls, a call parsed
again shares what was made of it, and the shortcuts give what the long forms give."""

from __future__ import annotations

import cProfile
import gc
import pstats
from pathlib import Path

from runhelpers import think_run

from harness_lab import Run
from harness_lab.context import ContextManager
from harness_lab.context.tokens import approx_token_count
from harness_lab.records.actions import ACTION_MODELS, GatedAction
from harness_lab.records.effect_classes import READ_ACTIONS, effect_class
from harness_lab.records.proposal import parse_proposal
from harness_lab.store import SQLiteStore

# Python calls (functions and builtins, as cProfile counts them) per no-store step of the bench's loop:
# 165 before issue 20's second pass at the hot path, ~139 after it, 125.4 once a call said again is not
# parsed again and a loop's convergence verdicts are kept. A step that does more again fails here.
CALLS_PER_STEP = 130


def test_a_no_store_step_makes_a_bounded_number_of_calls(tmp_path: Path) -> None:
    with think_run(tmp_path / "ws", None, "calls") as run:
        for _ in range(200):  # past the first compressions: the steady state
            run.step()
        steps, profile = 500, cProfile.Profile()
        profile.enable()
        for _ in range(steps):
            run.step()
        profile.disable()
    per_step = pstats.Stats(profile).total_calls / steps
    assert per_step <= CALLS_PER_STEP, f"{per_step:.1f} Python calls per step"


def test_a_call_parsed_again_shares_its_action_and_texts() -> None:
    raw = {"kind": "read_file", "path": "notes.md"}
    first, again = parse_proposal(raw), parse_proposal(dict(raw))
    assert again.action is first.action  # made once per distinct call
    assert again.raw == raw and again.raw is not first.raw  # each proposal has its own copy of what was said
    assert (again.canonical, again.describe()) == ('{"kind": "read_file", "path": "notes.md"}',
                                                  "read_file(path='notes.md')")
    other = parse_proposal({"kind": "read_file", "path": "other.md"})
    assert other.action is not first.action
    assert (other.canonical, other.describe()) == ('{"kind": "read_file", "path": "other.md"}',
                                                  "read_file(path='other.md')")


def test_read_actions_are_the_types_effect_class_calls_read() -> None:
    types = [*ACTION_MODELS.values(), GatedAction]
    assert READ_ACTIONS == {model for model in types if effect_class(model.model_construct()) == "read"}


def test_a_new_interaction_counts_its_rendered_text() -> None:
    ctx = ContextManager()
    for text in ("noted", "x" * 300, "line\n[L2 looks like a header", "naïve café"):
        for source in ("step 1:think", "step 2:wrïte|odd]"):
            item = ctx.add_interaction(1, "think(thought='a')", text, source=source)
            assert item.tokens == approx_token_count(item.render()), (text, source)


def _collections(run: Run, steps: int) -> list[int]:
    """The generations the garbage collector collected while ``run`` took ``steps`` steps (after 200 to
    warm up), at CPython's default thresholds whatever the process set."""
    seen: list[int] = []

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    for _ in range(200):
        run.step()
    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(700, 10, 10)
    gc.callbacks.append(counted)
    try:
        for _ in range(steps):
            run.step()
    finally:
        gc.callbacks.remove(counted)
        gc.set_threshold(*threshold)
    return seen


def test_a_no_store_step_lets_its_objects_die_young(tmp_path: Path) -> None:
    """Packed in batches smaller than the collector's youngest generation, a step's records are let go
    before they outlive a collection: about one collection in 2,000 steps (at 64 a batch: ~20)."""
    with think_run(tmp_path / "ws", None, "gc") as run:
        seen = _collections(run, 2000)
    assert len(seen) <= 5, f"{len(seen)} collections in 2,000 steps (generations {seen})"


def test_a_stored_step_lets_its_objects_die_young(tmp_path: Path) -> None:
    """With a store, the records and events past the window are dropped 16 at a time: none outlives a
    collection (trimmed at twice the window: one collection every ~100 steps)."""
    with think_run(tmp_path / "ws", SQLiteStore(tmp_path / "runs.sqlite"), "gc") as run:
        seen = _collections(run, 1000)
    assert len(seen) <= 3, f"{len(seen)} collections in 1,000 steps (generations {seen})"


def test_a_long_call_is_not_kept() -> None:
    """Only short calls are kept for the next parse: a long text (a report, a file) is not held on to."""
    raw = {"kind": "write_file", "path": "big.md", "content": "x" * 5000}
    first, again = parse_proposal(raw), parse_proposal(dict(raw))
    assert again.action == first.action and again.action is not first.action
    assert again.canonical == first.canonical and again.describe() == first.describe()
