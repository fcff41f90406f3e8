"""A restore folds a span's change logs in one pass; it must give what replaying them one at a time gives.

The reference below is the replay as it was first written: each stored row parsed with ``json.loads``
and applied to a state of its own (every intermediate state built), and the stored text of an item
dropped once any log names it. Every checkpoint of generated runs is read both ways: a plain run, a
run whose context is changed from outside between steps (interactions with large outputs, notes,
summaries that supersede, subtasks, stale marks, compression, retirement at every chance, budget
changes: drops from the view, patches, retirements, refs and every scalar), a fork of it and a fork
of that fork (rows that stand for another run's checkpoint).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from ctxhelpers import operate
from runhelpers import think_run

from harness_lab import Run
from harness_lab.context import ContextManager, apply_changes
from harness_lab.persistence._stored_context import item_texts, stored_context
from harness_lab.persistence.checkpoint import FULL_EVERY
from harness_lab.persistence.checkpoint_record import Checkpoint
from harness_lab.store import InMemoryStore, SQLiteStore, Store


def _one_log(state: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """One log applied to a state of its own (the replay before logs were folded)."""
    assert change["kind"] == "context_changes" and change["version"] in (1, 2)
    items = {str(d["id"]): d for d in state["items"]}
    for entry in change["items"]:
        items[str(entry["id"])] = entry
    for patch in change.get("patches", ()):
        items[str(patch["id"])] = {**items[str(patch["id"])], **patch}
    for item_id in change.get("retired", ()):
        items.pop(item_id, None)
    live = list(state["live"])
    if change.get("live") is not None:
        live = list(change["live"])
    elif (delta := change.get("live_delta")) is not None:
        drop = set(delta.get("drop", ()))
        live = [i for i in live if i not in drop] + list(delta["add"])
    out = {**state, "items": list(items.values()), "live": live,
           "refs": {"kind": "ref_store", "refs": [*state["refs"]["refs"], *change.get("refs", ())]}}
    if change.get("stubs") is not None:
        out["stubs"] = change["stubs"]
    for key in ("budget_tokens", "output_cap_bytes", "low_water", "subtask", "window", "next", "segment", "retained", "stale_refs"):
        if key in change:
            out[key] = change[key]
    return out


def _reference(store: Store, run_id: str, step: int) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The state of checkpoint ``run_id@step`` and its items' stored texts, the slow way."""
    row = store.step(run_id, step)
    checkpoint = Checkpoint.from_row(row)
    base = checkpoint.context_base
    assert base is not None
    rows = dict(store.contexts(run_id, base, step))
    if rows[base] is None:  # the base row stands for another checkpoint
        source_run, _, source_step = (checkpoint.context_from or "").rpartition("@")
        state, texts = _reference(store, source_run, int(source_step))
        assert state is not None
    else:
        state = json.loads(rows[base])
        texts = {**item_texts(rows[base], state), **_named(store, state)}
    for at in range(base + 1, step + 1):
        change = json.loads(rows[at])
        _named(store, change)
        state = _one_log(state, change)
        for entry in (*change["items"], *change.get("patches", ())):
            texts.pop(str(entry["id"]), None)
        for item_id in change.get("retired", ()):
            texts.pop(str(item_id), None)
    return state, texts




def _named(store: Store, data: dict[str, Any]) -> dict[str, str]:
    """Items a row names by sha256 (schema 9) read from the store's blobs, in place; their texts by id."""
    texts = {}
    for n, entry in enumerate(data["items"]):
        if "$sha256" in entry:
            texts[entry["id"]] = text = store.blob(entry["$sha256"])
            data["items"][n] = json.loads(text)
    return texts


def _steps(run: Run, rng: random.Random | None, n: int) -> None:
    for _ in range(n):
        if rng is not None:
            run.context._rec.retire_min = 1  # retire at every chance (a restore builds a new manager)
            operate(run.context, rng, run.step_no)
            if rng.random() < 0.1:  # a retirement pass right away, not at the next whole state
                run.context.retire()
        run.step()


def _check_every_row(store: Store, run_id: str) -> tuple[int, int]:
    """Every checkpoint of the run read both ways; (rows read, change logs replayed past a base)."""
    rows = logs = 0
    for entry in store.steps(run_id, start=0):
        checkpoint = Checkpoint.from_row(entry)
        expected, expected_texts = _reference(store, run_id, entry.step)
        for texts in (True, False):
            state, found = stored_context(store, run_id, entry.step, checkpoint.context_base, entry.context,
                                          texts=texts, source=checkpoint.context_from)
            assert state == expected, f"{run_id}@{entry.step}"
            assert json.dumps(state) == json.dumps(expected), f"{run_id}@{entry.step}: the same order"
            assert found == (expected_texts if texts else {}), f"{run_id}@{entry.step}"
        rows += 1
        logs += entry.step - (checkpoint.context_base or entry.step)
    return rows, logs


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
@pytest.mark.parametrize("outside", [False, True])
def test_every_checkpoint_restores_as_the_step_by_step_replay_does(tmp_path: Path, kind: str, outside: bool) -> None:
    store: Store = SQLiteStore(tmp_path / "runs.sqlite") if kind == "sqlite" else InMemoryStore()
    rng = random.Random(7) if outside else None
    run = think_run(tmp_path / "ws", store, "R1")
    _steps(run, rng, 2 * FULL_EVERY + 11)
    mid = FULL_EVERY + FULL_EVERY - 1  # the most logs past its base
    fork = run.fork(f"R1@{mid}", new_run_id="F1", workspace=tmp_path / "f1")
    _steps(fork, rng, FULL_EVERY + 7)
    again = fork.fork(f"F1@{mid + 5}", new_run_id="F2", workspace=tmp_path / "f2")  # a fork of a fork
    _steps(again, rng, 9)
    seen = [_check_every_row(store, run_id) for run_id in ("R1", "F1", "F2")]
    assert sum(rows for rows, _ in seen) == (2 * FULL_EVERY + 12) + (FULL_EVERY + 8) + 10
    assert all(logs > 0 for _, logs in seen)
    assert store.step("F2", mid + 5).context is None  # it stands for F1@mid+5, which replays on R1@mid
    if outside:  # what the generated changes put in the logs
        logged = [json.loads(c) for r in ("R1", "F1", "F2") for s in store.steps(r, start=0)
                  for _, c in store.contexts(r, s.step, s.step) if c is not None]
        changes = [c for c in logged if c["kind"] == "context_changes"]
        assert any(c.get("retired") for c in changes) and any(c.get("patches") for c in changes)
        assert any(c.get("refs") for c in changes) and any(c.get("stubs") is not None for c in changes)
        assert any((c.get("live_delta") or {}).get("drop") or c.get("live") is not None for c in changes)
        assert any("budget_tokens" in c for c in changes[1:]) and any("subtask" in c for c in changes[1:])
    for other in (again, fork, run):
        other.close()


def test_a_folded_replay_leaves_its_inputs_as_they_were() -> None:
    ctx = ContextManager(budget_tokens=500)
    ctx._rec.retire_min = 1
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    logs, rng = [], random.Random(3)
    for rnd in range(1, 60):
        operate(ctx, rng, rnd)
        ctx.add_interaction(rnd, "ls", "a b", source="ls")
        logs.append(json.loads(json.dumps(ctx.take_changes())))
    copies = json.dumps([base, logs])
    folded = apply_changes(base, logs)
    assert json.dumps([base, logs]) == copies
    step_by_step = base
    for log in logs:
        step_by_step = _one_log(step_by_step, log)
    assert folded == step_by_step == ctx.state(ref_texts=False)
