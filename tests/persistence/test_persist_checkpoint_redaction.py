"""A row's texts found clean before (digits aside) skip the redaction check; a checkpoint whose pieces
changed (here: a secret in the gates' recent fingerprints, a step after the record that held it) never does."""

from __future__ import annotations

from pathlib import Path

from persisthelpers import CountingOutbox, push_run

from harness_lab.store import SQLiteStore

SECRET = "sk-" + "abcdefghijklmnopqrstuv"


def test_a_secret_left_in_the_gates_state_is_redacted_in_the_next_rows(tmp_path: Path) -> None:
    thoughts = ["plan the next step", "check the budget"] * 4
    thoughts[5] = f"use {SECRET} now"
    actions = [{"kind": "think", "thought": t} for t in thoughts]
    store = SQLiteStore(tmp_path / "s.sqlite")
    with push_run(tmp_path / "ws", store, CountingOutbox(), actions=actions) as run:
        for _ in thoughts:
            run.step()
        checkpoints = [s.checkpoint for s in store.steps("R1")]
        assert run.checkpoints is not None and run.checkpoints._redact._whole  # the memo was used
    store.close()
    assert len(checkpoints) == len(thoughts)
    assert all(SECRET not in c for c in checkpoints)
    assert sum("[REDACTED]" in c for c in checkpoints) == 2  # the secret's step and the next (the last two calls)
