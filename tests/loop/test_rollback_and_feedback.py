"""After a rollback an outside write is still seen; a gate's refusal is fed back once, not twice."""

from __future__ import annotations

from pathlib import Path

from loophelpers import READ_A, make_run

from harness_lab import Run


def _external_notes(run: Run) -> list[str]:
    return [e.message for e in run.events if e.kind == "note" and e.topic == "external_change"]


def test_an_outside_write_right_after_a_rollback_is_detected(tmp_path: Path) -> None:
    run = Run.from_scenario("missing_section_then_fixed", workspace=tmp_path / "ws")
    run.step()
    snap = run.sandbox.snapshot(label="after step 1")
    run.step()
    run.rollback(snap.id)
    (tmp_path / "ws" / "outside.txt").write_text("written by someone else\n")
    run.step()
    # Was missed: rollback forgot the workspace's hash, so the next step took the outside write as its baseline.
    assert len(_external_notes(run)) == 1


def test_a_rollback_alone_is_not_an_outside_change(tmp_path: Path) -> None:
    run = Run.from_scenario("missing_section_then_fixed", workspace=tmp_path / "ws")
    run.step()
    snap = run.sandbox.snapshot(label="after step 1")
    run.run(max_steps=3)
    run.rollback(snap.id)
    run.step()
    assert _external_notes(run) == []


def test_a_convergence_refusal_is_fed_back_without_repeating_itself(tmp_path: Path) -> None:
    run = make_run(tmp_path, [READ_A])  # the same call again and again: the gate hints, then stops
    run.run()
    refusals = [item.text for item in run.context.view().items if item.text.startswith("refused: repeated")]
    # Was "refused: repeated the same call 3 times; change approach; repeated the same call 3 times; ...".
    assert refusals == ["refused: repeated the same call 3 times; change approach"]
