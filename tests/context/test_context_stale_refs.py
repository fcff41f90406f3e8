"""A stored output whose source changed outside the run is read back marked stale.

``read_ref`` of such an output starts with one line saying it is stale (which ref, since when, why),
then the stored characters unchanged; a fresh output reads back exactly as stored. The mark lasts:
through reselect and retirement of the item that showed it, a state round trip and the change log.
``ref_text`` gives the stored text alone (what a checkpoint's blob holds).
"""

from __future__ import annotations

import hashlib
import json
import random

from ctxhelpers import new_context, operate

from harness_lab.context import ContextManager, Layer, apply_changes

BIG = "\n".join(f"port: {8000 + k}" for k in range(400))


def _stored(ctx: ContextManager, rnd: int = 1, source: str = "read_file:config.yaml") -> str:
    item = ctx.add_interaction(rnd, "read_file config.yaml", BIG, source=source, key="file:config.yaml")
    assert item.layer is Layer.L5 and item.ref_id is not None
    return item.ref_id


def _split(answer: str) -> tuple[str, str]:
    first, _, rest = answer.partition("\n")
    return first, rest


def test_a_ref_whose_source_went_stale_says_so_and_keeps_its_text() -> None:
    ctx = ContextManager(output_cap_bytes=1000)
    ref_id = _stored(ctx, rnd=3)
    fresh = _stored(ctx, rnd=4, source="read_file:other.yaml")
    ctx.add_interaction(7, "think", "ok", source="think")
    ctx.mark_stale("config.yaml")
    first, rest = _split(ctx.read_ref(ref_id))
    assert first.startswith("[stale") and ref_id in first and "round 3" in first and "round 7" in first
    assert "config.yaml" in first and rest == BIG
    first, rest = _split(ctx.read_ref(ref_id, 5, 40))
    assert first.startswith("[stale") and rest == BIG[5:40]
    assert ctx.read_ref(fresh) == BIG and ctx.read_ref(fresh, 5, 40) == BIG[5:40]  # unchanged when fresh
    assert ctx.ref_text(ref_id) == BIG == ctx.ref_text(fresh)
    assert hashlib.sha256(ctx.ref_text(ref_id).encode()).hexdigest() == ctx.ref_info(ref_id).sha256


def test_a_ref_marked_stale_by_its_key_says_so() -> None:
    ctx = ContextManager(output_cap_bytes=1000)
    ref_id = _stored(ctx)
    ctx.mark_stale("file:config.yaml")
    assert ctx.read_ref(ref_id).startswith("[stale")


def test_the_mark_outlives_the_item_and_a_restore() -> None:
    ctx = ContextManager(output_cap_bytes=1000)
    ctx._rec.retire_min = 1
    ref_id = _stored(ctx)
    base = json.loads(json.dumps(ctx.state(ref_texts=False)))
    ctx.discard_changes()
    ctx.mark_stale("read_file:config.yaml")
    ctx.reselect()  # the L5 item leaves the view ...
    for rnd in range(2, 10):
        ctx.add_interaction(rnd, "think", "ok", source="think")
    ctx.retire()
    assert all(i.ref_id != ref_id for i in ctx._rec.archive.values())  # ... and is retired
    stale = ctx.read_ref(ref_id)
    assert stale.startswith("[stale") and _split(stale)[1] == BIG
    again = ContextManager.from_state(json.loads(json.dumps(ctx.state())))
    assert again.read_ref(ref_id) == stale
    log = json.loads(json.dumps(ctx.take_changes()))
    replayed = ContextManager.from_state(apply_changes(base, [log]), ref_loader={ctx.ref_info(ref_id).sha256: BIG}.get)
    assert replayed.read_ref(ref_id) == stale and replayed.ref_text(ref_id) == BIG


def test_generated_runs_read_back_every_ref_exactly_or_marked_stale() -> None:
    rng = random.Random(5)
    ctx = new_context(800, 1)
    stale_seen = 0
    for rnd in range(1, 400):
        operate(ctx, rng, rnd)
    for n in range(1, len(ctx.state(ref_texts=False)["refs"]["refs"]) + 1):
        ref_id = f"ref_{n:03d}"
        answer, text = ctx.read_ref(ref_id), ctx.ref_text(ref_id)
        if answer != text:
            first, rest = _split(answer)
            assert first.startswith(f"[stale: {ref_id}") and rest == text
            stale_seen += 1
    assert stale_seen > 0
