"""Retention over generated long runs: nothing protected is ever lost, the budget always holds.

300 seeded random runs (80 steps each) mix interactions (some anomalous, some 20-60 KB),
notes, pinned facts, validation feedback, conflicting summaries, subtasks, stale marking with
reselect, explicit compressions and state round-trips; the invariants are checked after every step.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import pytest

from harness_lab.context import ContextItem, ContextManager, ContextView, Layer, approx_token_count

ANOMALIES = (
    "HTTP 200 but body code 500",
    "AssertionError: expected 3, got 4",
    "permission denied: /etc/shadow",
    "timeout after 30 s waiting for the server",
    "checksum mismatch on build/app.whl",
    "接口返回 200 但 body 里 code 字段是 500",
    "counterexample: n=0 makes the loop exit early",
)
PLAIN = ("listed 12 files", "port: 8080", "read 40 lines", "ok", "found config/settings.yaml", "3 matches")


def drop_anomaly_lines(items: list[ContextItem]) -> str:
    """The fault "summary drops an anomaly": summarizes, but leaves every anomaly out."""
    return "\n".join(f"- r{i.round}: {i.text.splitlines()[0][:40]}" for i in items if not i.anomaly)


@dataclass
class Tracker:
    """What the run must still show: every protected text, the L0/L1 items, the stored payloads."""

    ctx: ContextManager
    fixed: tuple[ContextItem, ...]
    protected: dict[str, str] = field(default_factory=dict)
    payloads: dict[str, str] = field(default_factory=dict)
    reports: int = 0
    fired: int = 0

    def note(self, item: ContextItem) -> None:
        if item.protected:
            self.protected[item.id] = item.text

    def forget_reselected(self) -> None:
        # reselect() takes stale unpinned items out on purpose; that is not a compression loss.
        for item_id in list(self.protected):
            item = self.ctx.item(item_id)
            if item.freshness == "stale" and not item.pinned and item.layer.compressible:
                del self.protected[item_id]

    def check(self, view: ContextView) -> None:
        assert view.total_tokens <= view.budget_tokens, "view over budget"
        assert view.total_tokens == sum(i.tokens for i in view.items)
        assert tuple(i for i in view.items if i.layer <= Layer.L1) == self.fixed, "L0/L1 changed"
        rendered = view.render()
        for item_id, text in self.protected.items():
            assert text in rendered, f"protected item {item_id} lost: {text[:60]!r}"
        report = self.ctx.last_report
        if report is not None:
            assert report.residual == ()
            self.fired += bool(report.fired)


def _protected_room(ctx: ContextManager) -> bool:
    used = sum(i.tokens for i in ctx.view().items if i.protected)
    return used < ctx.budget_tokens * 0.35


def _line(rng: random.Random, anomalous: bool) -> str:
    body = " ".join(rng.choice(PLAIN) for _ in range(rng.randint(1, 12)))
    return f"{body}\n{rng.choice(ANOMALIES)}" if anomalous else body


def simulate(seed: int, *, faulty: bool = False, steps: int = 80) -> Tracker:
    rng = random.Random(seed)
    ctx = ContextManager(
        budget_tokens=rng.randint(300, 1500),
        output_cap_bytes=rng.choice((1024, 4096, 16_384)),
        summarizer=drop_anomaly_lines if faulty else None,
    )
    l0 = ctx.add(
        Layer.L0, "system: you are an agent\ntools: read_file, run_command", source="system", round=0
    )
    l1 = ctx.add(Layer.L1, "task: fix config\nacceptance: pytest green", source="task", round=0)
    t = Tracker(ctx, (l0, l1))
    subtask = 0
    for rnd in range(1, steps + 1):
        roll = rng.random()
        room = _protected_room(ctx)
        if roll < 0.55:
            anomalous = room and rng.random() < 0.2
            if rng.random() < 0.06:
                offset = rng.randrange(len(PLAIN))
                payload = "".join(
                    f"{PLAIN[(k + offset) % len(PLAIN)]} #{k}\n" for k in range(rng.randint(1500, 4000))
                )
                item = ctx.add_interaction(
                    rnd, "dump", payload, source=f"run_command:dump{rnd}", anomaly=False
                )
                assert item.ref_id is not None
                t.payloads[item.ref_id] = payload
            else:
                result = _line(rng, anomalous)
                item = ctx.add_interaction(rnd, f"read f{rnd % 7}", result, source=f"read_file:f{rnd % 7}")
                assert item.anomaly == anomalous
            t.note(item)
        elif roll < 0.62:
            t.note(ctx.add(Layer.L4, _line(rng, False), source=f"explore:{rnd}", round=rnd))
        elif roll < 0.66 and room:
            t.note(
                ctx.add(
                    Layer.L3, f"constraint {rnd}: keep API stable", source="human", round=rnd, pinned=True
                )
            )
        elif roll < 0.70 and room:
            t.note(
                ctx.add_feedback(rnd, f"validator: pytest failed in round {rnd}", source="validator:pytest")
            )
        elif roll < 0.78:
            t.note(ctx.summarize(_line(rng, False), round=rnd, source="model", key=f"k{rng.randint(0, 2)}"))
        elif roll < 0.84:
            t.note(ctx.begin_subtask(f"s{subtask}", f"goal of s{subtask}", round=rnd))
        elif roll < 0.90:
            t.note(ctx.finish_subtask(f"s{subtask}", f"s{subtask} done: {rng.choice(PLAIN)}", round=rnd))
            subtask += 1
        elif roll < 0.93:
            ctx.mark_stale(f"f{rng.randint(0, 6)}")
            ctx.reselect()
            t.forget_reselected()
        elif roll < 0.96:
            before = ctx.view()
            report = ctx.compress()
            assert ctx.self_check(before, ctx.view()) == []
            assert report.residual == ()
            if not faulty:
                assert not report.fired, report
            t.fired += bool(report.fired)
        else:
            state = json.loads(json.dumps(ctx.state()))
            ctx = ContextManager.from_state(state, summarizer=ctx.summarizer)
            assert ctx.state() == state
            t.ctx = ctx
        t.check(ctx.view())
    for ref_id, payload in t.payloads.items():
        assert ctx.read_ref(ref_id) == payload
    rendered = ctx.view().render()
    assert approx_token_count(rendered) <= ctx.view().total_tokens
    return t


@pytest.mark.parametrize("block", range(6))
def test_generated_runs_keep_every_protected_item_within_budget(block: int) -> None:
    compressions = 0
    for seed in range(block * 50, block * 50 + 50):
        t = simulate(seed)
        compressions += t.ctx.last_report is not None
    assert compressions >= 30  # most runs really did compress


def test_faulty_summarizer_is_caught_and_nothing_is_lost() -> None:
    fired = 0
    for seed in range(1000, 1060):
        fired += simulate(seed, faulty=True).fired
    assert fired > 0


def test_a_context_whose_changes_are_never_taken_stays_bounded() -> None:
    """A run without a store never takes a change log: what the record notes for one (the demotions'
    version pairs, the ids appended to the view) stays bounded by the record, not the run's length."""
    ctx = ContextManager(budget_tokens=600)
    for rnd in range(1, 3001):
        ctx.add_interaction(rnd, "think", "noted", source=f"step {rnd}:think")
        ctx.view()
    rec = ctx._rec
    assert rec.retained < 400
    assert len(rec._relayered) <= len(rec.archive)
    assert len(rec._live_added) <= 2 * (rec.retire_min + len(rec.live))
