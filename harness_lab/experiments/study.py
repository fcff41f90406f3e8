"""Seed 004's four-group study: the same tasks, the same budget, four harness designs.

The seed's design, translated: "if this runtime is to be verified later, four groups can be set up:
the basic loop; plus structural acceptance; after a failed acceptance, revision is allowed; then plus
semantic review. Fix the task set, model version, tool set and initial environment, run repeatedly under
the same budget ceiling, and record the resources each group actually used" ("基础循环；加结构验收；
验收失败后允许修正；再加语义评审"). Each group adds one variable to the previous one, and
:class:`GroupSpec` names the three variables, so the isolation is data a test checks:

* ``base``       - the loop alone: ``finish`` is accepted unchecked (``Run(validation=False)``);
* ``structural`` - + ``structural_check``: a finish is checked against the report contract. A rejection
  is final: the run stops BLOCKED (``rejected``) at the refused finish, so no report is revised after
  a rejection (before issue 18 this group fed the reasons back and let the script revise, which is the
  next group's variable: both completed 34/200);
* ``repair``     - + ``revise_after_reject``: a rejection is answered by the repair policy
  (:mod:`harness_lab.loop.repair`: the reasons are fed back and the agent may revise and finish again, up to
  the contract's ``verification.max_repairs``; then roll back; then escalate);
* ``semantic``   - + ``semantic_review``: a semantic review of the accepted bytes (a later review stage:
  a failed review holds the report back; its verdict is kept apart from the structural one, in
  ``Receipt.semantic``).

Every group gets the same contract budget. A seed perturbs the scripted actions (:mod:`.noise`);
ground truth is the scenario's labels, never a validator. ``run_study_task`` is a pure function of
its task, so the study gives the same outcomes on any executor.

**Task families.** What the study runs is a :class:`TaskFamily`, passed in (``run_study(family=...)``):
its scenario names, named selections of them, how to load them and how to run one task under a group.
:data:`REPORTS` is the report-writing family; adding a family (e.g. coding tasks) is one
``TaskFamily`` value, plus one entry in the CLI's ``--family`` table. There is no global registry.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, model_validator

from ..contract import ControlContract, load_contract
from ..evidence import EvidenceCatalogue
from ..loop.approval import AutoReject
from ..loop.repair import RepairPolicy
from ..loop.run import Run
from ..paths import data_dir
from ..proposers.scripted import ScriptedProposer
from ..records.actions import WriteFile, WriteReport
from ..scenarios import Scenario, load_scenario, require_scenarios
from ..validation.semantic import EvidenceSupportReviewer, SemanticReviewer
from .metrics import GroupSummary, RunOutcome, summarize
from .noise import perturb_script
from .seed_table import SEED_SCENARIOS
from .sweep import sweep

__all__ = [
    "GROUPS",
    "REPORTS",
    "GroupSpec",
    "StudyResult",
    "StudyTask",
    "TaskFamily",
    "run_study",
    "run_study_task",
    "study_tasks",
]


class GroupSpec(BaseModel):
    """One group of the study: the variables it turns on (each group adds one to the previous one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    structural_check: bool  # finish is checked against the report contract (seed 004's structural acceptance)
    revise_after_reject: bool  # a rejection is fed back and the agent may revise (the repair policy); else final
    semantic_review: bool  # the accepted bytes are reviewed for support by the evidence before delivery
    description: str

    @model_validator(mode="after")
    def _revision_needs_a_check(self) -> GroupSpec:
        if self.revise_after_reject and not self.structural_check:
            raise ValueError(f"group {self.name}: revise_after_reject needs structural_check (nothing rejects)")
        return self

    def variables(self) -> dict[str, bool]:
        """The variables the seed's groups differ in, by name."""
        return {"structural_check": self.structural_check, "revise_after_reject": self.revise_after_reject,
                "semantic_review": self.semantic_review}


GROUPS: dict[str, GroupSpec] = {
    g.name: g for g in (
        GroupSpec(name="base", structural_check=False, revise_after_reject=False, semantic_review=False,
                  description="the basic loop: finish accepted unchecked"),
        GroupSpec(name="structural", structural_check=True, revise_after_reject=False, semantic_review=False,
                  description="+ structural acceptance of the report; a rejection is final (no revision)"),
        GroupSpec(name="repair", structural_check=True, revise_after_reject=True, semantic_review=False,
                  description="+ revision after a failed check (repair policy: reasons fed back, retry, "
                              "roll back, escalate)"),
        GroupSpec(name="semantic", structural_check=True, revise_after_reject=True, semantic_review=True,
                  description="+ semantic review of the accepted bytes (claim vs evidence)"),
    )
}


@dataclass(frozen=True)
class TaskFamily:
    """A kind of task the study runs. Picklable (module-level functions only): tasks carry it to workers.

    ``scenarios()`` lists every scenario of the family; ``subsets`` names selections of them (``"seed"``);
    ``prepare(names, contract, budget)`` loads each named scenario with the contract and evidence its runs
    get (``contract`` overrides each scenario's own, ``budget`` replaces those limits, as in
    :func:`run_study`); ``run(task)`` runs one task under ``task.group``, scored against the labels.
    ``not_applicable`` maps a group whose variable has nothing to act on in this family to the reason:
    its runs are not made (they would repeat the previous group under another name); tables say why.
    """

    name: str
    description: str
    scenarios: Callable[[], Sequence[str]]
    prepare: Callable[[Sequence[str], ControlContract | None, Mapping[str, int | float | None] | None],
                      list[tuple[Any, ControlContract, EvidenceCatalogue]]]
    run: Callable[[StudyTask], RunOutcome]
    subsets: Mapping[str, Sequence[str]] = field(default_factory=dict)
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    ground_truth: str = "acceptable report bytes"  # what the labels fix, for the table's footnote
    group_notes: Mapping[str, str] = field(default_factory=dict)  # what a group's check is in this family


@dataclass(frozen=True)
class StudyTask:
    """Everything one run needs, picklable, so a worker anywhere computes the same outcome."""

    group: GroupSpec
    scenario: Any  # the family's scenario (for REPORTS a :class:`~harness_lab.scenarios.Scenario`)
    seed: int
    noise: float
    contract: ControlContract
    evidence: EvidenceCatalogue
    reviewer: SemanticReviewer
    family: TaskFamily


def run_study_task(task: StudyTask) -> RunOutcome:
    """One run of one scenario under one seed in one group, scored against the labels (by its family)."""
    return task.family.run(task)


def _run_report_task(task: StudyTask) -> RunOutcome:
    group, scenario = task.group, task.scenario
    assert isinstance(scenario, Scenario)  # REPORTS prepares nothing else
    noisy = perturb_script(scenario.actions, scenario=scenario.id, seed=task.seed, rate=task.noise)
    acceptable = scenario.acceptable_texts()
    attainable = any(a.get("kind") == "write_report" and str(a.get("text", "")).encode() in acceptable
                     for a in noisy.actions)
    with tempfile.TemporaryDirectory(prefix="harness-lab-study-") as tmp:
        workspace = Path(tmp) / "workspace"
        start = time.perf_counter()
        run = Run(contract=task.contract, proposer=ScriptedProposer(noisy.actions, then=scenario.then),
                  evidence=task.evidence, workspace=workspace, validation=group.structural_check,
                  approver=AutoReject("study: no human in the loop"),
                  run_id=f"{group.name}:{scenario.id}:{task.seed}",
                  repair=RepairPolicy() if group.revise_after_reject else None)
        try:
            rejections, revisions, false_reject = 0, 0, False
            report = workspace / task.contract.verification.report.path
            while not run.state.terminal and run.waiting is None:
                # A finish step writes nothing before its check, so these are the bytes it judges; after
                # it a repair may already have rolled the report back to the healthy snapshot.
                before = report.read_bytes() if report.is_file() else None
                record = run.step()
                if rejections and record.tool_result is not None and record.tool_result.status == "ok" \
                        and _writes_report(record.proposal, task.contract):
                    revisions += 1
                if record.verdict is not None and not record.verdict.accepted:
                    rejections += 1
                    false_reject |= scenario.is_acceptable(before)
                    if not group.revise_after_reject and not run.state.terminal:
                        # Seed 004's group 2: acceptance without "revision allowed after a failed check".
                        run.halt("rejected", "the structural check refused the finish: "
                                 + "; ".join(record.verdict.reasons) + " (this group revises nothing after a rejection)")
            semantic: Literal["passed", "failed", "not_run"] = "not_run"
            reasons: tuple[str, ...] = ()
            reviews = 0
            if group.semantic_review and run.receipt is not None and run.accepted_bytes is not None:
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
                reviews=reviews, steps=run.step_no, repair="on" if group.revise_after_reject else "off",
                revisions=revisions, wall_ms=round(wall_ms, 3),
            )
        finally:
            run.close()  # removes the snapshot dir the run made; the workspace goes with tmp


def _writes_report(proposal: Any, contract: ControlContract) -> bool:
    action = getattr(proposal, "action", None)
    if isinstance(action, WriteReport):
        return True
    path = contract.verification.report.path
    return isinstance(action, WriteFile) and action.path.removeprefix("./") == path.removeprefix("./")


class StudyResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["study_result"] = "study_result"
    family: str = "reports"
    groups: tuple[str, ...]
    scenarios: tuple[str, ...]
    seeds: int
    noise: float
    budget: dict[str, Any]
    reviewer: str
    outcomes: tuple[RunOutcome, ...]
    not_applicable: dict[str, str] = {}  # group -> why it was not run in this family (it has no summary)
    ground_truth: str = "acceptable report bytes"
    group_notes: dict[str, str] = {}
    summaries: tuple[GroupSummary, ...]


def _prepare_scenarios(names: Sequence[str], contract: ControlContract | None,
                     budget: Mapping[str, int | float | None] | None,
                     ) -> list[tuple[Any, ControlContract, EvidenceCatalogue]]:
    root = data_dir()
    loaded = [load_scenario(name) for name in names]
    contracts = {s.contract: load_contract(root / "contracts" / f"{s.contract}.yaml") for s in loaded}
    if budget:
        contracts = {name: c.with_budget(**budget) for name, c in contracts.items()}
        contract = contract.with_budget(**budget) if contract is not None else None
    evidence = EvidenceCatalogue.from_dir(root / "evidence")
    return [(s, contract if contract is not None else contracts[s.contract], evidence) for s in loaded]


REPORTS = TaskFamily(
    name="reports", description="the seed's research-report task: read evidence, write a report, finish",
    scenarios=require_scenarios, prepare=_prepare_scenarios, run=_run_report_task,
    subsets={"seed": SEED_SCENARIOS},
)
"""The report-writing family: the scenarios shipped in ``data/scenarios`` (``"seed"``: the seed's ten)."""


def study_tasks(
    groups: Sequence[str], scenarios: Sequence[str], seeds: int, *, noise: float = 0.2,
    contract: ControlContract | None = None, reviewer: SemanticReviewer | None = None,
    budget: Mapping[str, int | float | None] | None = None, family: TaskFamily = REPORTS,
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
    known = family.scenarios()
    if stray := [n for n in scenarios if n not in known]:
        raise ValueError(f"unknown scenario(s) {', '.join(stray)} in family {family.name}; "
                         f"choose from {', '.join(known)}")
    if not (applicable := [g for g in groups if g not in family.not_applicable]):
        raise ValueError(f"no group applies to family {family.name}: "
                         + "; ".join(f"{g}: {family.not_applicable[g]}" for g in groups))
    prepared = family.prepare(scenarios, contract, budget)
    judge = reviewer if reviewer is not None else EvidenceSupportReviewer()
    return [
        StudyTask(group=GROUPS[g], scenario=s, seed=seed, noise=noise, contract=c, evidence=evidence,
                  reviewer=judge, family=family)
        for g in applicable for s, c, evidence in prepared for seed in range(seeds)
    ]


def run_study(
    groups: Sequence[str] = tuple(GROUPS),
    scenarios: Sequence[str] | str = "all",
    seeds: int = 20,
    *,
    noise: float = 0.2,
    contract: ControlContract | None = None,
    reviewer: SemanticReviewer | None = None,
    executor: Executor | None = None,
    progress: bool | TextIO = True,
    budget: Mapping[str, int | float | None] | None = None,
    family: TaskFamily = REPORTS,
) -> StudyResult:
    """Run every (group, scenario, seed) of ``family`` on ``executor`` and summarise per group.

    ``scenarios="all"`` is every scenario of the family, a name in ``family.subsets`` that selection
    (``"seed"``: the seed's ten reports), any other string one scenario; ``contract`` overrides
    each scenario's contract (e.g. a tighter budget via ``ControlContract.with_budget``), the same
    for every group; ``budget`` (e.g. ``{"max_decisions": 4}``) replaces those limits in each scenario's
    own contract (or in ``contract``), so scenarios with contracts of their own keep their other limits.
    """
    if isinstance(groups, str):  # one group's name, not a sequence of its letters
        groups = (groups,)
    if isinstance(scenarios, str):
        names = tuple(family.scenarios() if scenarios == "all" else family.subsets.get(scenarios, (scenarios,)))
    else:
        names = tuple(scenarios)
    tasks = study_tasks(groups, names, seeds, noise=noise, contract=contract, reviewer=reviewer, budget=budget,
                        family=family)
    outcomes = sweep(run_study_task, tasks, executor=executor, progress=progress, label="study")
    budgets = {t.contract.budget.model_dump_json() for t in tasks}
    return StudyResult(
        family=family.name, groups=tuple(groups), scenarios=names, seeds=seeds, noise=noise,
        budget=tasks[0].contract.budget.model_dump(mode="json") if len(budgets) == 1 else {"per_scenario": True},
        reviewer=tasks[0].reviewer.name, outcomes=tuple(outcomes),
        summaries=tuple(summarize(g, outcomes) for g in groups if g not in family.not_applicable),
        not_applicable={g: family.not_applicable[g] for g in groups if g in family.not_applicable},
        ground_truth=family.ground_truth, group_notes={g: family.group_notes[g] for g in groups if g in family.group_notes},
    )
