"""The study's coding family: seed 004's four groups on the coding scenarios (``data/coding_scenarios``).

Each run copies the scenario's repository (``data/coding/<repository>``) into a fresh workspace and plays
its perturbed script (:mod:`.noise`: a malformed call inserted, an action proposed twice; coding scripts
read no evidence and write no report, so those two are the perturbations that apply). The groups'
variables act as for reports, with the coding contract's acceptance check in place of the report's:

* ``base``       - a finish is accepted unchecked;
* ``structural`` - a finish is checked by the contract's layers (for ``coding_task``: the functional
  layer, i.e. the tests and a held-out check run in the sandbox, the protected test file, the allowed
  files); a rejection is final (BLOCKED ``rejected``);
* ``repair``     - + the repair policy answers a rejection (reasons fed back, the script may go on);
* ``semantic``   - not applicable: the reviewer (:mod:`harness_lab.validation.semantic`) judges a
  report's cited claims against evidence notes, and a coding finish delivers a tree, no report and no
  citations. It is not run (running it would repeat ``repair`` under another name); the table says why.

Ground truth is the scenario's ``labels.acceptable_finishes`` (indexes of the scripted finish actions at
which the tree is an acceptable fix), never a validator. A perturbed script is mapped back to those
indexes: an inserted malformed call has no index, a repeated action keeps its own (the repeat leaves
the tree as the first one did), and a proposal past the script's end is its last action again.
``revisions`` counts the steps after the first rejection that changed the tree (a rollback included);
nothing here writes a report.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ..loop.approval import AutoReject
from ..loop.repair import RepairPolicy
from ..paths import data_dir
from ..persistence.stored import Run
from ..proposers.scripted import ScriptedProposer
from ..scenarios import Scenario, copy_repository, list_scenarios
from .metrics import RunOutcome
from .noise import NoisyScript, perturb_script
from .study import StudyTask, TaskFamily, _prepare_scenarios

__all__ = ["CODING", "SEMANTIC_NOT_APPLICABLE", "script_origins"]

SEMANTIC_NOT_APPLICABLE = (
    "not applicable: the semantic reviewer judges a report's cited claims against evidence notes; "
    "a coding finish delivers a tree (no report, no citations), so it has nothing to review"
)


def script_origins(noisy: NoisyScript, length: int) -> list[int | None]:
    """For each action of ``noisy``, the index of the original action it plays (None: an inserted call)."""
    kinds = {p.index: p.kind for p in noisy.perturbations}
    origins: list[int | None] = []
    for index in range(length):
        kind = kinds.get(index)
        if kind == "malformed_call":
            origins += [None, index]
        elif kind == "repeat_call":
            origins += [index, index]
        elif kind is None:
            origins.append(index)
        else:  # drop_read / mutate_section touch read_evidence / write_report, which coding scripts lack
            raise ValueError(f"perturbation {kind} at action {index}: not one a coding script can take")
    if len(origins) != len(noisy.actions):
        raise ValueError(f"perturbed script of {len(noisy.actions)} actions does not map onto {length} originals")
    return origins


def _coding_names() -> list[str]:
    return list_scenarios("coding")


def _run_coding_task(task: StudyTask) -> RunOutcome:
    group, scenario = task.group, task.scenario
    assert isinstance(scenario, Scenario) and scenario.repository is not None  # CODING prepares nothing else
    noisy = perturb_script(scenario.actions, scenario=scenario.id, seed=task.seed, rate=task.noise)
    origins = script_origins(noisy, len(scenario.actions))
    acceptable = set(scenario.labels.acceptable_finishes)
    last = len(scenario.actions) - 1
    # Past its end a script proposes its last action again (or a finish on the tree the last one left).
    attainable = any(o in acceptable for o in origins) or last in acceptable
    proposer = ScriptedProposer(noisy.actions, then=scenario.then)
    with tempfile.TemporaryDirectory(prefix="harness-lab-study-") as tmp:
        workspace = Path(tmp) / "workspace"
        start = time.perf_counter()
        run = Run(contract=task.contract, proposer=proposer, evidence=task.evidence, workspace=workspace,
                  validation=group.structural_check, approver=AutoReject("study: no human in the loop"),
                  run_id=f"{group.name}:{scenario.id}:{task.seed}",
                  repair=RepairPolicy() if group.revise_after_reject else None)
        try:
            copy_repository(data_dir() / "coding" / scenario.repository, run.workspace)
            rejections, revisions, false_reject = 0, 0, False
            accepted_origin: int | None = None
            while not run.state.terminal and run.waiting is None:
                at = proposer.position
                origin = origins[at] if at < len(origins) else last
                tree = run.sandbox.workspace_hash()
                record = run.step()
                if rejections and run.sandbox.workspace_hash() != tree:
                    revisions += 1  # the tree changed after a rejection: a revision (a rollback is one too)
                if record.verdict is not None and not record.verdict.accepted:
                    rejections += 1
                    false_reject |= origin in acceptable
                    if not group.revise_after_reject and not run.state.terminal:
                        run.halt("rejected", "the acceptance check refused the finish: "
                                 + "; ".join(record.verdict.reasons) + " (this group revises nothing after a rejection)")
                if run.receipt is not None and accepted_origin is None:
                    accepted_origin = -1 if origin is None else origin
            wall_ms = (time.perf_counter() - start) * 1000
            delivered = run.receipt is not None
            return RunOutcome(
                group=group.name, scenario=scenario.id, seed=task.seed, perturbations=noisy.perturbations,
                final_state=run.state.value, stop_reason=run.stop_reason.code if run.stop_reason else "",
                structural=run.receipt.structural if run.receipt else None, semantic="not_run",
                delivered=delivered, delivered_acceptable=delivered and accepted_origin in acceptable,
                attainable=attainable, false_reject=false_reject, rejections=rejections,
                decisions=run.usage.decisions, tool_calls=run.usage.tool_calls, tokens=run.usage.tokens,
                reviews=0, steps=run.step_no, repair="on" if group.revise_after_reject else "off",
                revisions=revisions, wall_ms=round(wall_ms, 3),
            )
        finally:
            run.close()


CODING = TaskFamily(
    name="coding", description="coding tasks: fix a small repository so its tests pass; done = the functional layer",
    scenarios=_coding_names, prepare=_prepare_scenarios, run=_run_coding_task,
    not_applicable={"semantic": SEMANTIC_NOT_APPLICABLE},
    ground_truth="the scripted finishes at which the tree is an acceptable fix",
    group_notes={"structural": "the acceptance check is the contract's layers (coding_task: the functional layer - "
                               "the tests and a held-out check run in the sandbox, protected and allowed files)"},
)
"""The coding family: the scenarios shipped in ``data/coding_scenarios`` (each with its repository)."""
