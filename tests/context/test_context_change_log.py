"""The change log's second form: only what changed, a demotion as a patch; the first form still replays.

A step's log names the new interaction whole and the one that left the window as ``{"id", "layer"}``;
empty lists and unchanged scalars are left out. Replayed the way a checkpoint stores it (items in
their compact form, a whole state every few steps after a retirement pass), the logs rebuild the live
context exactly; logs of version 1 (every key, every rewritten item whole) replay to the same states.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from ctxhelpers import new_context, operate
from runhelpers import think_run

from harness_lab.context import ContextManager, apply_changes
from harness_lab.context import _change_log as change_log_module
from harness_lab.context.changes import SCALARS, usual_log_json
from harness_lab.persistence._context_rows import _dumps
from harness_lab.persistence.checkpoint import FULL_EVERY
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.store import InMemoryStore, SQLiteStore


def test_a_step_logs_its_interaction_whole_and_the_demotion_as_a_patch() -> None:
    ctx = ContextManager()
    first = ctx.add_interaction(1, "ls", "a b", source="ls")
    for rnd in (2, 3):
        ctx.add_interaction(rnd, "ls", "a b", source="ls")
    ctx.take_changes()
    new = ctx.add_interaction(4, "ls", "a b", source="ls")
    log = ctx.take_changes()
    assert log == {"kind": "context_changes", "version": 2, "items": [new.to_dict()],
                   "patches": [{"id": first.id, "layer": "L4"}], "live_delta": {"add": [new.id]},
                   "window": [f"c{n}" for n in (2, 3, 4)], "next": 5}
    assert ctx.take_changes() == {"kind": "context_changes", "version": 2, "items": []}  # nothing happened


def test_the_first_log_after_a_state_carries_every_scalar() -> None:
    ctx = ContextManager()
    ctx.add_interaction(1, "ls", "a b", source="ls")
    ctx.discard_changes()
    ctx.budget_tokens = 999  # changed between the written state and the first log: not lost
    log = ctx.take_changes()
    assert {k: log[k] for k in SCALARS} == ctx.state_scalars() and log["budget_tokens"] == 999
    ctx.budget_tokens = 998
    assert {k for k in SCALARS if k in ctx.take_changes()} == {"budget_tokens"}
    restored = ContextManager.from_state(ctx.state())
    assert set(SCALARS) <= restored.take_changes().keys()


def _compact_state(ctx: ContextManager) -> dict[str, Any]:
    state = ctx.state(ref_texts=False, raw_items=True)
    return json.loads(json.dumps({**state, "items": [i.to_dict(compact=True) for i in state["items"]]}))


def _compact_log(ctx: ContextManager) -> dict[str, Any]:
    log = ctx.take_changes(raw_items=True)
    return json.loads(json.dumps({**log, "items": [i.to_dict(compact=True) for i in log["items"]]}))


@pytest.mark.parametrize("seed", range(12))
def test_logs_stored_as_a_checkpoint_stores_them_rebuild_the_live_context(seed: int) -> None:
    rng = random.Random(seed)
    # retirement passes between logs, many of them
    ctx = new_context(rng.randint(300, 1200), 1 if seed % 2 else 128)
    base, logs = _compact_state(ctx), []
    ctx.discard_changes()
    texts: dict[str, str] = {}
    patched = 0
    for rnd in range(1, 320):
        operate(ctx, rng, rnd)
        if rnd % FULL_EVERY == 0:  # what the checkpointer does for a whole state
            ctx.retire()
            base, logs = _compact_state(ctx), []
            ctx.discard_changes()
        else:
            logs.append(_compact_log(ctx))
            patched += len(logs[-1].get("patches", ()))
        texts.update({e["sha256"]: ctx.ref_text(e["ref_id"]) for e in ctx.state(ref_texts=False)["refs"]["refs"]})
        restored = ContextManager.from_state(apply_changes(base, logs), ref_loader=texts.get)
        assert restored.state() == ctx.state(), f"round {rnd}"
        # what the state names as stubs is what mark_stale uses, here and restored
        assert {i: (k, s) for i, k, s in ctx.state()["stubs"]} == ctx._rec.stubs == restored._rec.stubs
        assert restored.view() == ctx.view(), f"round {rnd}"
    assert patched > 50  # demotions, stale marks, supersessions, re-pins: as patches


def _as_version_1(log: dict[str, Any], ctx: ContextManager, live: list[str]) -> dict[str, Any]:
    """The log as version 1 wrote it: every key; a patched item whole; every scalar."""
    items = log["items"] + [ctx.item(p["id"]).to_dict() for p in log.get("patches", ())]
    delta = log.get("live_delta")
    return {"kind": "context_changes", "version": 1, "items": items, "retired": log.get("retired", []),
            "live": log.get("live"), "live_delta": None if delta is None else {"drop": [], **delta},
            "stubs": log.get("stubs"), "refs": log.get("refs", []), **ctx.state_scalars(),
            # (a later key than version 1; its reader takes it in any version)
            **({"stale_refs": log["stale_refs"]} if "stale_refs" in log else {})}


@pytest.mark.parametrize("seed", range(8))
def test_version_1_logs_still_replay(seed: int) -> None:
    rng = random.Random(seed)
    ctx = ContextManager(budget_tokens=600, output_cap_bytes=4096)
    ctx._rec.retire_min = 1
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    ctx.discard_changes()
    old: list[dict[str, Any]] = []
    for rnd in range(1, 200):
        operate(ctx, rng, rnd)
        log = ctx.take_changes()
        old.append(json.loads(json.dumps(_as_version_1(log, ctx, list(ctx._rec.live)))))
        assert apply_changes(base, old) == ctx.state(ref_texts=False), f"round {rnd}"
    assert any(len(change["items"]) > 1 for change in old)


def test_a_row_of_version_1_reads_as_it_did() -> None:
    """A row as version 1 stored it (one step: c4 in, c1 out to L4), on the state before it."""
    ctx = ContextManager()
    for rnd in (1, 2, 3):
        ctx.add_interaction(rnd, "ls", "a b", source="ls")
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    row = ('{"kind":"context_changes","version":1,"retired":[],"live":null,"live_delta":{"drop":[],"add":["c4"]},'
           '"stubs":null,"refs":[],"budget_tokens":4000,"output_cap_bytes":16384,"low_water":0.8,"subtask":null,'
           '"window":["c2","c3","c4"],"next":5,"segment":0,"retained":0,"items":['
           '{"kind":"context_item","id":"c4","layer":"L2","text":"> ls\\na b","source":"ls","round":4,"tokens":19,'
           '"seq":4,"role":"interaction"},{"kind":"context_item","id":"c1","layer":"L4","text":"> ls\\na b",'
           '"source":"ls","round":1,"tokens":19,"seq":1,"role":"interaction"}]}')
    ctx.add_interaction(4, "ls", "a b", source="ls")
    restored = ContextManager.from_state(apply_changes(base, [json.loads(row)]))
    assert restored.state() == ctx.state() and restored.view() == ctx.view()




@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_fork_from_a_change_log_row_stores_the_context_it_has(tmp_path: Path, kind: str) -> None:
    """A fork's first whole state reuses the stored texts of items its change logs did not touch; an
    item a patch touched (demoted to L4 since) is written as it is now."""
    store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    run = think_run(tmp_path / "ws", store, "R1")
    for _ in range(FULL_EVERY + 6):
        run.step()
    fork = run.fork(f"R1@{run.step_no}", new_run_id="F1", workspace=tmp_path / "fork")
    states: dict[int, Any] = {}
    for _ in range(FULL_EVERY + 3):
        fork.step()
        states[fork.step_no] = fork.context.state(ref_texts=False)
    for step, state in states.items():
        _, context = load_checkpoint(store, "F1", step)
        assert context is not None
        assert ContextManager.from_state(context).state(ref_texts=False) == state, f"step {step}"
    fork.close()
    run.close()


def _json_and_dict_logs_agree(fast: ContextManager, slow: ContextManager) -> bool:
    """One log from each: the JSON row text of ``fast`` against the dict of ``slow`` (same history).
    True when the log was the usual step's (spelled from pieces)."""
    spelled = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(change_log_module, "usual_log_json", lambda *a: spelled.append(1) or usual_log_json(*a))
        head, items, refs = fast.take_changes_json(_dumps)
    log = slow.take_changes(raw_items=True)
    want = log.pop("items")
    assert head == _dumps(log)
    assert [i.to_dict() for i in items] == [i.to_dict() for i in want]
    assert refs == log.get("refs", [])
    assert fast.demoted_versions() == slow.demoted_versions()
    return bool(spelled)


@pytest.mark.parametrize("seed", range(4))
def test_a_log_as_json_is_the_dump_of_the_log(seed: int) -> None:
    """take_changes_json spells the usual log from pieces: the same bytes as the dump of take_changes,
    for every log of a generated history (restores and written states between them)."""
    rng_fast, rng_slow, steps = random.Random(seed), random.Random(seed), random.Random(seed + 100)
    fast, slow = new_context(900, 1 + seed % 2 * 15), new_context(900, 1 + seed % 2 * 15)
    usual = 0
    for rnd in range(1, 400):
        if rnd % 50 == 0:  # a restore: the first log after it carries every scalar
            fast = ContextManager.from_state(fast.state())
            slow = ContextManager.from_state(slow.state())
        elif rnd % 17 == 0:
            fast.discard_changes()
            slow.discard_changes()
        if steps.random() < 0.5:
            operate(fast, rng_fast, rnd)
            operate(slow, rng_slow, rnd)
        else:  # what a no-op step does
            fast.add_interaction(rnd, "think", "noted", source=f"step {rnd}:think")
            slow.add_interaction(rnd, "think", "noted", source=f"step {rnd}:think")
            fast.view()
            slow.view()
        usual += _json_and_dict_logs_agree(fast, slow)
    assert usual > 100


def test_ids_that_need_escaping_are_dumped() -> None:
    """A state may hold any id (a hand-made one, say): its logs are then dumped, not spelled."""
    ctx = new_context(900, 16)
    for rnd in range(1, 5):
        ctx.add_interaction(rnd, "ls", "a b", source="ls")
    state = ctx.state()
    state["window"] = [*state["window"][:-1], 'w"1\\é']
    fast, slow = ContextManager.from_state(state), ContextManager.from_state(state)
    for rnd in range(5, 8):
        fast.add_interaction(rnd, "ls", "a b", source="ls")
        slow.add_interaction(rnd, "ls", "a b", source="ls")
        assert not _json_and_dict_logs_agree(fast, slow)
    assert 'w"1\\é' not in fast.state()["window"]  # it left the window: every log is spelled again
    fast.add_interaction(9, "ls", "a b", source="ls")
    slow.add_interaction(9, "ls", "a b", source="ls")
    assert not _json_and_dict_logs_agree(fast, slow)  # (the flag is kept from the load: dumped still)
