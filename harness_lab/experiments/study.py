"""Seed 004's four-group study: the same tasks, the same budget, four harness designs.

Groups (cumulative, as in the seed: each adds one layer to the previous one):

* ``base``       - the loop alone: ``finish`` is accepted unchecked (``Run(validation=False)``);
* ``structural`` - + structural acceptance of the report (``Run(validation=True)``);
* ``repair``     - + a repair policy after a failed check (``Run(repair=RepairPolicy())``, see
  :mod:`harness_lab.repair`: retry with the reasons fed back, then roll back, then escalate);
* ``semantic``   - + a semantic review of the accepted bytes (a later review stage: a failed review
  holds the report back; its verdict is kept apart from the structural one, in ``Receipt.semantic``).

Every group gets the same contract budget. A seed perturbs the scripted actions (:mod:`.noise`);
ground truth is the scenario's labels, never a validator. ``run_study_task`` is a pure function of
its task, so the study gives the same outcomes on any executor.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict

from ..approval import AutoReject
from ..contract import ControlContract, load_contract
from ..evidence import EvidenceCatalogue
from ..paths import data_dir
from ..proposers.scripted import ScriptedProposer
from ..repair import RepairPolicy
from ..run import Run
from ..scenarios import Scenario, list_scenarios, load_scenario
from ..validation.semantic import EvidenceSupportReviewer, SemanticReviewer
from .metrics import GroupSummary, RunOutcome, summarize
from .noise import perturb_script
from .seed_table import SEED_SCENARIOS
from .sweep import sweep

__all__ = [
    "GROUPS",
    "GroupSpec",
    "StudyResult",
    "StudyTask",
    "run_study",
    "run_study_task",
    "study_tasks",
]


class GroupSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    structural: bool
    repair: bool
    semantic: bool
    description: str


GROUPS: dict[str, GroupSpec] = {
    g.name: g for g in (
        GroupSpec(name="base", structural=False, repair=False, semantic=False,
                  description="loop only: finish accepted unchecked"),
        GroupSpec(name="structural", structural=True, repair=False, semantic=False,
                  description="+ structural acceptance of the report"),
        GroupSpec(name="repair", structural=True, repair=True, semantic=False,
                  description="+ repair policy after a failed check"),
        GroupSpec(name="semantic", structural=True, repair=True, semantic=True,
                  description="+ semantic review of the accepted bytes (claim vs evidence)"),
    )
}


@dataclass(frozen=True)
class StudyTask:
    """Everything one run needs, picklable, so a worker anywhere computes the same outcome."""

    group: GroupSpec
    scenario: Scenario
    seed: int
    noise: float
    contract: ControlContract
    evidence: EvidenceCatalogue
    reviewer: SemanticReviewer


def run_study_task(task: StudyTask) -> RunOutcome:
    """One run of one scenario under one seed in one group, scored against the labels."""
    group, scenario = task.group, task.scenario
    noisy = perturb_script(scenario.actions, scenario=scenario.id, seed=task.seed, rate=task.noise)
    acceptable = scenario.acceptable_texts()
    attainable = any(a.get("kind") == "write_report" and str(a.get("text", "")).encode() in acceptable
                     for a in noisy.actions)
    with tempfile.TemporaryDirectory(prefix="harness-lab-study-") as tmp:
        workspace = Path(tmp) / "workspace"
        start = time.perf_counter()
        run = Run(contract=task.contract, proposer=ScriptedProposer(noisy.actions, then=scenario.then),
                  evidence=task.evidence, workspace=workspace, validation=group.structural,
                  approver=AutoReject("study: no human in the loop"),
                  run_id=f"{group.name}:{scenario.id}:{task.seed}",
                  repair=RepairPolicy() if group.repair else None)
        try:
            rejections, false_reject = 0, False
            report = workspace / task.contract.verification.report.path
            while not run.state.terminal and run.waiting is None:
                # A finish step writes nothing before its check, so these are the bytes it judges; after
                # it a repair may already have rolled the report back to the healthy snapshot.
                before = report.read_bytes() if report.is_file() else None
                record = run.step()
                if record.verdict is not None and not record.verdict.accepted:
                    rejections += 1
                    false_reject |= scenario.is_acceptable(before)
            semantic: Literal["passed", "failed", "not_run"] = "not_run"
            reasons: tuple[str, ...] = ()
            reviews = 0
            if group.semantic and run.receipt is not None and run.accepted_bytes is not None:
                verdict = task.reviewer.review(run.accepted_bytes, task.evidence)
                reviews, semantic, reasons = 1, "passed" if verdict.passed else "failed", tuple(verdict.reasons)
                run.receipt = run.receipt.model_copy(update={"semantic": semantic})
                if not verdict.passed:
                    rejections += 1
                    false_reject |= scenario.is_acceptable(run.accepted_bytes)
            wall_ms = (time.perf_counter() - start) * 1000
            delivered = run.receipt is not None and semantic != "failed"
            return RunOutcome(
                group=group.name, scenario=scenario.id, seed=task.seed, perturbations=noisy.perturbations,
                final_state=run.state.value, stop_reason=run.stop_reason.code if run.stop_reason else "",
                structural=run.receipt.structural if run.receipt else None, semantic=semantic,
                semantic_reasons=reasons, delivered=delivered,
                delivered_acceptable=delivered and scenario.is_acceptable(run.accepted_bytes),
                attainable=attainable, false_reject=false_reject, rejections=rejections,
                decisions=run.usage.decisions, tool_calls=run.usage.tool_calls, tokens=run.usage.tokens,
                reviews=reviews, steps=run.step_no, repair="on" if group.repair else "off", wall_ms=round(wall_ms, 3),
            )
        finally:
            run.close()  # removes the snapshot dir the run made; the workspace goes with tmp


class StudyResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["study_result"] = "study_result"
    groups: tuple[str, ...]
    scenarios: tuple[str, ...]
    seeds: int
    noise: float
    budget: dict[str, Any]
    reviewer: str
    outcomes: tuple[RunOutcome, ...]
    summaries: tuple[GroupSummary, ...]


def study_tasks(
    groups: Sequence[str], scenarios: Sequence[str], seeds: int, *, noise: float = 0.2,
    contract: ControlContract | None = None, reviewer: SemanticReviewer | None = None,
    budget: Mapping[str, int | float | None] | None = None,
) -> list[StudyTask]:
    """The study's runs in a fixed order: group, then scenario, then seed. ``budget`` replaces those
    limits in each run's contract (see :func:`run_study`)."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    for what, given in (("group", groups), ("scenario", scenarios)):
        if not given:
            raise ValueError(f"no {what}s to run")
        twice = sorted({n for n in given if list(given).count(n) > 1})
        if twice:  # summaries are per name: a repeat would count its runs twice
            raise ValueError(f"{what}(s) {', '.join(twice)} given twice")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not 0.0 <= noise <= 1.0:  # else each worker would raise it, after the pool had started
        raise ValueError(f"noise must lie in [0, 1], got {noise}")
    root = data_dir()
    loaded = [load_scenario(name) for name in scenarios]
    contracts = {s.contract: load_contract(root / "contracts" / f"{s.contract}.yaml") for s in loaded}
    if budget:
        contracts = {name: c.with_budget(**budget) for name, c in contracts.items()}
        contract = contract.with_budget(**budget) if contract is not None else None
    evidence = EvidenceCatalogue.from_dir(root / "evidence")
    judge = reviewer if reviewer is not None else EvidenceSupportReviewer()
    return [
        StudyTask(group=GROUPS[g], scenario=s, seed=seed, noise=noise,
                  contract=contract if contract is not None else contracts[s.contract],
                  evidence=evidence, reviewer=judge)
        for g in groups for s in loaded for seed in range(seeds)
    ]


def run_study(
    groups: Sequence[str] = tuple(GROUPS),
    scenarios: Sequence[str] | Literal["all", "seed"] = "all",
    seeds: int = 20,
    *,
    noise: float = 0.2,
    contract: ControlContract | None = None,
    reviewer: SemanticReviewer | None = None,
    executor: Executor | None = None,
    progress: bool | TextIO = True,
    budget: Mapping[str, int | float | None] | None = None,
) -> StudyResult:
    """Run every (group, scenario, seed) on ``executor`` and summarise per group.

    ``scenarios="all"`` is every shipped scenario, ``"seed"`` the seed's ten; ``contract`` overrides
    each scenario's contract (e.g. a tighter budget via ``ControlContract.with_budget``), the same
    for every group; ``budget`` (e.g. ``{"max_decisions": 4}``) replaces those limits in each scenario's
    own contract (or in ``contract``), so scenarios with contracts of their own keep their other limits.
    """
    if isinstance(groups, str):  # one group's name, not a sequence of its letters
        groups = (groups,)
    names = tuple(list_scenarios() if scenarios == "all" else SEED_SCENARIOS if scenarios == "seed"
                  else (scenarios,) if isinstance(scenarios, str) else scenarios)
    tasks = study_tasks(groups, names, seeds, noise=noise, contract=contract, reviewer=reviewer, budget=budget)
    outcomes = sweep(run_study_task, tasks, executor=executor, progress=progress, label="study")
    budgets = {t.contract.budget.model_dump_json() for t in tasks}
    return StudyResult(
        groups=tuple(groups), scenarios=names, seeds=seeds, noise=noise,
        budget=tasks[0].contract.budget.model_dump(mode="json") if len(budgets) == 1 else {"per_scenario": True},
        reviewer=tasks[0].reviewer.name,
        outcomes=tuple(outcomes), summaries=tuple(summarize(g, outcomes) for g in groups),
    )
