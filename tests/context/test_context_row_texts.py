"""A checkpoint's context texts: the cache of item texts stays exact as it is kept whole across
demotions, and the rows it writes are the rows written without that shortcut, byte for byte.

The runs are generated: a store run's own steps, and between them every operation of the manager
(compression, retirements, stale marks, supersessions, large outputs as refs), some texts holding
secrets the contract's exclusion must keep out of the store."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ctxhelpers import operate
from runhelpers import think_run

from harness_lab.context import ContextManager, Layer
from harness_lab.persistence import _context_rows as cp
from harness_lab.persistence._context_rows import ContextRows
from harness_lab.persistence.checkpoint import FULL_EVERY, Checkpointer, _dumps
from harness_lab.persistence.resume import load_checkpoint
from harness_lab.records.redaction import Redactor
from harness_lab.store import SQLiteStore

_SECRETS = ("token=abc123xyz", "sk-abcdefghijklmnopqrstu", "password: hunter22x")




def _generated(tmp_path: Path, seed: int, steps: int, check: bool, tag: str = "") -> tuple[list[tuple[int, str | None]], int]:
    """The context texts of a generated run's rows; with ``check``, the cache is checked after every step."""
    rng = random.Random(seed)
    store = SQLiteStore(tmp_path / f"runs-{seed}{tag}.sqlite")
    run = think_run(tmp_path / f"ws-{seed}{tag}", store, "R1")
    ctx = run.context
    ctx._rec.retire_min = 1 if seed % 2 else 16
    whole = Redactor(run.contract.memory.exclude)
    checker = run.checkpoints
    assert isinstance(checker, Checkpointer)
    current = 0
    for rnd in range(1, steps):
        if rng.random() < 0.6:
            operate(ctx, rng, rnd)
        if rng.random() < 0.1:  # a secret in the text, or in the source (a stub's, once retired)
            ctx.add_interaction(rnd, "read env", f"found {rng.choice(_SECRETS)}", source=f"read_file:env{rnd % 3}")
        if rng.random() < 0.05:
            ctx.add_interaction(rnd, "read env", "ok", source=f"read_file:{rng.choice(_SECRETS)}")
        run.step()
        if check:
            for item_id, (version, text) in checker._rows._item_texts.items():
                assert text == whole(_dumps(version.to_dict(compact=True))), f"step {run.step_no}: {item_id}"
                current += ctx._rec.archive.get(item_id) is version
    rows = store.contexts("R1", 0, run.step_no)
    for step in range(1, run.step_no + 1, 7):  # a restore reads them back to the very state
        _, state = load_checkpoint(store, "R1", step)
        assert state is not None
    assert not any(s in (text or "") for _, text in rows for s in ("abc123xyz", "sk-abcdef", "hunter22x"))
    run.close()
    return rows, current


@pytest.mark.parametrize("seed", range(6))
def test_every_cached_item_text_is_the_redacted_text_of_its_version(tmp_path: Path, seed: int) -> None:
    derived = 0
    relayer_text = cp._relayer_text

    def counting(text: str, old: cp.ContextItem, new: cp.ContextItem) -> str | None:
        nonlocal derived
        out = relayer_text(text, old, new)
        derived += out is not None
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cp, "_relayer_text", counting)
        _, current = _generated(tmp_path, seed, 6 * FULL_EVERY, check=True)
    assert derived > 2 * FULL_EVERY and current > 0  # demotions, every step: derived, not dumped


@pytest.mark.parametrize("seed", range(6))
def test_whole_states_are_the_same_bytes_with_and_without_the_shortcuts(tmp_path: Path, seed: int) -> None:
    """Without derived texts, and with the stubs dumped and checked anew each time: the same rows."""
    rows, _ = _generated(tmp_path, seed, 8 * FULL_EVERY, check=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cp, "_relayer_text", lambda text, old, new: None)
        patch.setattr(ContextRows, "_stubs_text", lambda self, stubs: (_dumps(stubs), False))
        plain, _ = _generated(tmp_path, seed, 8 * FULL_EVERY, check=False, tag="-plain")
    assert rows == plain
    wholes = [text for _, text in rows if text is not None and '"kind":"context_state"' in text]
    assert len(wholes) >= 7
    stubs = [text[text.index(',"stubs":'):text.index(',"refs":')] for text in wholes]
    assert any("[REDACTED]" in s for s in stubs) or seed % 2 == 0  # (retiring at every chance: secret stubs)


def test_a_whole_state_dumps_only_what_its_own_step_made(tmp_path: Path) -> None:
    """The interactions demoted in the change logs since the last whole state are in the cache, and
    stubs unchanged since the last whole state are neither dumped nor checked again."""
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = think_run(tmp_path / "ws", store, "R1")
    dumped: list[int] = []
    reused: list[bool] = []
    take, stubs_text = ContextRows.take, ContextRows._stubs_text

    def spy(self: ContextRows, ctx: ContextManager, step: int, *, full_every: int,
            full_bytes: int) -> tuple[cp.ContextRow | None, list[tuple[str, str]], int | None]:
        out = take(self, ctx, step, full_every=full_every, full_bytes=full_bytes)
        if out[0] is not None and out[0].whole and step > FULL_EVERY:
            dumped.append(len(out[0].missing))
        return out

    def stubs_spy(self: ContextRows, stubs: list[list[object]]) -> tuple[str, bool]:
        last = self._stubs
        text, known = stubs_text(self, stubs)
        assert text == _dumps(stubs) and known
        reused.append(self._stubs is last and last is not None)
        return text, known

    relayered = cp._relayered
    at_whole: list[bool] = []  # derived while writing a whole state: only the step's own demotion

    def relayered_spy(hit: tuple[cp.ContextItem, str], new: cp.ContextItem) -> str | None:
        out = relayered(hit, new)
        at_whole.append(out is not None)
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ContextRows, "take", spy)
        patch.setattr(ContextRows, "_stubs_text", stubs_spy)
        patch.setattr(cp, "_relayered", relayered_spy)
        run.context._rec.retire_min = 8
        for _ in range(12 * FULL_EVERY + 1):
            run.step()
    assert len(dumped) == 11 and all(n == 1 for n in dumped)  # the step's new interaction
    assert any(reused) and not all(reused)
    assert 0 < sum(at_whole) <= 12  # (the other demotions: derived in their change logs)
    run.close()


def test_a_demotion_is_a_layer_patch_only_when_nothing_else_changed_since_the_last_log() -> None:
    ctx = ContextManager()
    for rnd in (1, 2, 3):
        ctx.add_interaction(rnd, "cat", "a b", source=f"read_file:f{rnd}", key=f"f{rnd}")
    ctx.take_changes()
    ctx.add_interaction(4, "cat", "a b", source="read_file:f4")  # c1 leaves the window: L4
    first = ctx.item("c1")
    assert ctx.take_changes()["patches"] == [{"id": "c1", "layer": "L4"}]
    assert [(a.layer, b) for a, b in ctx.demoted_versions()] == [(Layer.L2, first)]
    ctx.mark_stale("f2")  # c2 stale, then out of the window in the same log
    ctx.add_interaction(5, "cat", "a b", source="read_file:f5")
    assert ctx.take_changes()["patches"] == [{"id": "c2", "layer": "L4", "freshness": "stale"}]
    assert ctx.demoted_versions() == []


def test_a_whole_state_derives_texts_only_for_the_demoted_items_it_holds(tmp_path: Path) -> None:
    """An interaction demoted since the last whole state and then summarized away (a compression pass
    every ~55 steps) is not in the next whole state: its text is not derived (counted per whole state)."""
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = think_run(tmp_path / "ws", store, "R1")
    derived: list[str] = []
    extra = held = 0
    take, relayer_text = ContextRows.take, cp._relayer_text

    def spy(self: ContextRows, ctx: ContextManager, step: int, *, full_every: int,
            full_bytes: int) -> tuple[cp.ContextRow | None, list[tuple[str, str]], int | None]:
        nonlocal extra, held
        derived.clear()
        out = take(self, ctx, step, full_every=full_every, full_bytes=full_bytes)
        if out[0] is not None and out[0].whole:
            ids = {i.id for i in out[0].items}
            extra += sum(i not in ids for i in derived)
            held += sum(i in ids for i in derived)
        return out

    def counting(text: str, old: cp.ContextItem, new: cp.ContextItem) -> str | None:
        derived.append(new.id)
        return relayer_text(text, old, new)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ContextRows, "take", spy)
        patch.setattr(cp, "_relayer_text", counting)
        for _ in range(12 * FULL_EVERY + 1):
            run.step()
    assert extra == 0 and held > 2 * FULL_EVERY
    run.close()
