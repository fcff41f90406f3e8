"""``Run`` is composed, not a mixin tower (issue 20): it owns its restorable state, human gate, finish
check, crash guard and trace as collaborators its public methods delegate to. The loop imports nothing of
the persistence side (tests/test_import_graph.py): it asks its ``source`` (:mod:`harness_lab.loop.log`),
which ``harness_lab.Run`` is given (:mod:`harness_lab.persistence.stored`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from loophelpers import contract, evidence, make_run

import harness_lab.loop.run
from harness_lab import InMemoryStore, Run
from harness_lab.errors import ConfigError
from harness_lab.loop._finish_check import FinishCheck
from harness_lab.loop._human_gate import HumanGate
from harness_lab.loop.crash import CrashGuard
from harness_lab.loop.image import RunImage
from harness_lab.loop.trace import Trace
from harness_lab.persistence.stored import StoreSource
from harness_lab.proposers import ScriptedProposer
from harness_lab.validation import EvidenceSupportReviewer


def test_the_loops_run_inherits_nothing() -> None:
    """No tower: the bookkeeping, crash handling, trace, counters and image are collaborators it owns."""
    assert harness_lab.loop.run.Run.__mro__ == (harness_lab.loop.run.Run, object)


def test_harness_lab_run_is_the_loops_run_given_the_store_source() -> None:
    assert issubclass(Run, harness_lab.loop.run.Run) and isinstance(Run.source, StoreSource)
    assert harness_lab.loop.run.Run.source is None
    assert set(vars(Run)) - {"__module__", "__doc__", "__annotations__", "source", "__static_attributes__",
                             "__firstlineno__"} == set()  # it binds the source, adds no method


def test_the_loops_own_run_refuses_a_store_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^harness_lab\.loop\.run\.Run has no persistence .*use harness_lab\.Run$"):
        harness_lab.loop.run.Run(contract=contract(), evidence=evidence(), workspace=tmp_path / "ws",
                                 proposer=ScriptedProposer([{"kind": "think", "thought": "x"}]),
                                 store=InMemoryStore())
    assert not (tmp_path / "ws").exists()  # refused before anything was made


def test_a_run_owns_one_of_each_collaborator_and_its_methods_reach_them(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"kind": "think", "thought": "x"}])
    assert isinstance(run.human_gate, HumanGate) and run.human_gate is run.human_gate
    assert isinstance(run.finish_check, FinishCheck) and run.finish_check is run.finish_check
    assert isinstance(run.image, RunImage) and isinstance(run.crash, CrashGuard) and isinstance(run.trace, Trace)
    assert run.events is run.trace.events
    reviewer = EvidenceSupportReviewer()
    run.reviewer = reviewer
    assert run.finish_check.reviewer is reviewer and run.reviewer is reviewer
    assert run.capture() == run.image.capture()
    run.close()
