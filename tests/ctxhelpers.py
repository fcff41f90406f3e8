"""Shared by the context tests: generated runs that mix every operation of the manager."""

from __future__ import annotations

import random

from harness_lab.context import ContextManager, Layer

PLAIN = ("listed 12 files", "port: 8080", "read 40 lines", "ok", "3 matches")
ANOMALY = "AssertionError: expected 3, got 4"


def new_context(budget_tokens: int, retire_min: int) -> ContextManager:
    """A manager with its system and task items; ``retire_min=1`` retires at every chance."""
    ctx = ContextManager(budget_tokens=budget_tokens, output_cap_bytes=4096)
    ctx._rec.retire_min = retire_min
    ctx.add(Layer.L0, "system: tools", source="system", round=0)
    ctx.add(Layer.L1, "task: fix config", source="task", round=0)
    return ctx


def operate(ctx: ContextManager, rng: random.Random, rnd: int) -> None:
    """One random operation of round ``rnd`` (interactions, large outputs, anomalies, pinned notes,
    feedback, summaries, subtasks, stale marks, compression, resume notes, budget changes), then a view."""
    roll = rng.random()
    if roll < 0.5:
        big = rng.random() < 0.03
        text = "\n".join(f"{rng.choice(PLAIN)} #{k}" for k in range(3000)) if big else rng.choice(PLAIN)
        if not big and rng.random() < 0.15:
            text += "\n" + ANOMALY
        ctx.add_interaction(rnd, f"read f{rnd % 7}", text, source=f"read_file:f{rnd % 7}", key=f"file:f{rnd % 7}")
    elif roll < 0.56:
        ctx.add(Layer.L4, rng.choice(PLAIN), source=f"explore:{rnd}", round=rnd, pinned=rng.random() < 0.3)
    elif roll < 0.62:
        ctx.add_feedback(rnd, f"validator: failed in round {rnd}", source="validator", key=rng.choice((None, "v")))
    elif roll < 0.70:
        ctx.summarize(rng.choice(PLAIN), round=rnd, source="model", key=f"k{rng.randint(0, 2)}",
                      supersedes=rng.choice((None, "k1")))
    elif roll < 0.76:
        ctx.begin_subtask(f"s{rnd % 3}", "goal", round=rnd)
    elif roll < 0.82:
        ctx.finish_subtask(f"s{rnd % 3}", "done", round=rnd)
    elif roll < 0.88:
        ctx.mark_stale(f"f{rng.randint(0, 6)}")
        ctx.reselect()
    elif roll < 0.92:
        ctx.compress()
    elif roll < 0.94:
        ctx.add_resume_note(f"resumed at {rnd}", round=rnd)
    elif roll < 0.96:
        ctx.budget_tokens = rng.randint(300, 1200)
    ctx.view()
