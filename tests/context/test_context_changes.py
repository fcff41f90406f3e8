"""Retirement and the change log: bounded state, the same views, an exact replay.

Generated runs mix every operation of the manager. A manager that retires eagerly must show the
model exactly the views of one that never retires, and replaying ``take_changes`` onto an earlier
state must give ``state(ref_texts=False)`` at every step.
"""

from __future__ import annotations

import json
import random

import pytest
from ctxhelpers import new_context, operate

from harness_lab.context import ContextManager, Layer, apply_changes
from harness_lab.context.record import RETIRE_MIN
from harness_lab.errors import StoreError


def _new(seed: int, retire_min: int) -> ContextManager:
    return new_context(random.Random(seed).randint(300, 1200), retire_min)


@pytest.mark.parametrize("seed", range(40))
def test_retiring_never_changes_a_view(seed: int) -> None:
    eager, keeper = _new(seed, 1), _new(seed, 10**9)
    rng_a, rng_b = random.Random(seed), random.Random(seed)
    for rnd in range(1, 400):
        operate(eager, rng_a, rnd)
        operate(keeper, rng_b, rnd)
        assert eager.view() == keeper.view(), f"round {rnd}"
        for item in eager.view().items:  # what the view refers to is still there (covered: as a stub)
            for ref in item.carries:
                assert eager.item(ref) == keeper.item(ref)
            for ref in item.covers:
                kept = keeper.item(ref)
                if ref in eager._rec.stubs:
                    assert eager._rec.stubs[ref] == (kept.key, kept.source)
                else:
                    assert eager.item(ref) == kept
    assert len(eager.state()["items"]) < len(keeper.state()["items"]) / 2


@pytest.mark.parametrize("seed", range(20))
def test_replaying_changes_gives_the_state(seed: int) -> None:
    ctx = _new(seed, RETIRE_MIN if seed % 2 else 1)
    rng = random.Random(seed)
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    ctx.discard_changes()
    log: list[dict[str, object]] = []
    for rnd in range(1, 300):
        operate(ctx, rng, rnd)
        log.append(json.loads(json.dumps(ctx.take_changes())))
        assert apply_changes(base, log) == ctx.state(ref_texts=False), f"round {rnd}"
        if rnd % 50 == 0:  # a new base, as a checkpoint compaction does
            base, log = ctx.state(ref_texts=False), []
            ctx.discard_changes()
    texts = {e["sha256"]: ctx.ref_text(e["ref_id"]) for e in ctx.state(ref_texts=False)["refs"]["refs"]}
    restored = ContextManager.from_state(apply_changes(base, log), ref_loader=texts.get)
    assert restored.state() == ctx.state()  # (before a view: an over-budget view compresses again)
    assert restored.view() == ctx.view()


def test_a_long_run_keeps_a_bounded_state_and_names_retired_items() -> None:
    ctx = ContextManager(budget_tokens=800)
    first = ctx.add_interaction(1, "ls", "a b", source="ls")
    early, late = [], []
    for rnd in range(2, 6002):
        ctx.add_interaction(rnd, "ls", f"a b {rnd}", source="ls")
        ctx.view()
        if 1000 <= rnd < 2000:
            early.append(len(ctx._rec.archive))
        elif rnd >= 5000:
            late.append(len(ctx._rec.archive))
    # What the view and its summaries refer to, plus at most one retirement period: not 6,000 items.
    assert max(late) < 2 * RETIRE_MIN + 100
    assert max(late) <= max(early) + 32  # flat: no growth with the run's length
    with pytest.raises(KeyError, match="retired"):
        ctx.item(first.id)


def test_stored_outputs_by_sha_are_fetched_through_the_loader() -> None:
    ctx = ContextManager(output_cap_bytes=1024)
    payload = "line\n" * 1000
    item = ctx.add_interaction(1, "dump", payload, source="run_command:dump")
    assert item.ref_id is not None
    state = ctx.state(ref_texts=False)
    assert payload not in json.dumps(state)
    (entry,) = state["refs"]["refs"]
    fetched: list[str] = []
    restored = ContextManager.from_state(state, ref_loader=lambda sha: fetched.append(sha) or payload)
    assert restored.read_ref(item.ref_id, 5, 15) == payload[5:15] and fetched == [entry["sha256"]]
    with pytest.raises(StoreError, match="not in memory"):
        ContextManager.from_state(state).read_ref(item.ref_id)
    ctx.release_ref_texts([entry["sha256"]])  # no loader: the text stays
    assert ctx.read_ref(item.ref_id) == payload
    ctx.attach_ref_loader(lambda sha: fetched.append(sha) or payload.upper())
    ctx.release_ref_texts([entry["sha256"]])
    assert ctx.read_ref(item.ref_id) == payload.upper()  # now read through the loader


def test_restamp_is_a_replace_that_refuses_unknown_fields() -> None:
    ctx = ContextManager()
    item = ctx.add(Layer.L3, "a fact", source="human", round=1, pinned=True, key="k")
    again = ctx._rec.restamp(item, layer=Layer.L4, freshness="stale")
    assert (again.layer, again.freshness, again.text, again.key, again.pinned) == (Layer.L4, "stale", "a fact", "k", True)
    assert again.render().startswith("[L4 | round 1 | from human | stale")  # the header is made for the new version
    with pytest.raises(TypeError, match="nosuch"):
        ctx._rec.restamp(item, nosuch=1)


@pytest.mark.parametrize("seed", range(30))
def test_a_skipped_retirement_pass_is_what_the_pass_would_do(seed: int) -> None:
    # retire() skips its pass when nothing could have become retirable since the last one; a twin
    # that always runs the whole pass must end every round in the same state.
    fast, full = _new(seed, 10**9), _new(seed, 10**9)
    rng_a, rng_b, when = random.Random(seed), random.Random(seed), random.Random(-seed)
    skipped = 0
    for rnd in range(1, 300):
        operate(fast, rng_a, rnd)
        operate(full, rng_b, rnd)
        if when.random() < 0.5:
            skipped += not fast._rec._retire_due
            full._rec._retire_due = True
            assert fast.retire() == full.retire(), f"round {rnd}"
            assert fast.state() == full.state(), f"round {rnd}"
    assert skipped > 10
