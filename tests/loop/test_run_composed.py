"""``Run`` is composed, not a mixin tower (issue 20): it builds on its bookkeeping (``RunBase``) only,
and owns its restorable state, human gate and finish check as collaborators its public methods delegate to."""

from __future__ import annotations

from pathlib import Path

from loophelpers import make_run

from harness_lab.loop._finish_check import FinishCheck
from harness_lab.loop._human_gate import HumanGate
from harness_lab.loop._restorable import RunImage
from harness_lab.loop.run import Run
from harness_lab.validation import EvidenceSupportReviewer


def test_run_inherits_only_its_bookkeeping() -> None:
    assert [c.__name__ for c in Run.__mro__] == ["Run", "RunBase", "object"]


def test_a_run_owns_one_of_each_collaborator_and_its_methods_reach_them(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"kind": "think", "thought": "x"}])
    assert isinstance(run.human_gate, HumanGate) and run.human_gate is run.human_gate
    assert isinstance(run.finish_check, FinishCheck) and run.finish_check is run.finish_check
    assert isinstance(run.image, RunImage)
    reviewer = EvidenceSupportReviewer()
    run.reviewer = reviewer
    assert run.finish_check.reviewer is reviewer and run.reviewer is reviewer
    assert run.capture() == run.image.capture()
    run.close()
