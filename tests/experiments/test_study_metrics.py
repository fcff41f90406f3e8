"""The study's metrics mean what their definitions (written into results.json) say."""

from __future__ import annotations

from harness_lab.contract import ControlContract
from harness_lab.experiments import run_study_task, study_tasks
from harness_lab.experiments.metrics import METRIC_DEFINITIONS


def _no_retries(contract: ControlContract) -> ControlContract:
    data = contract.model_dump(mode="json")
    data["verification"]["max_repairs"] = 0  # the repair policy rolls back at the first failed check
    return ControlContract.model_validate(data)


def test_a_false_reject_counts_even_when_the_repair_rolls_the_report_back(contract: ControlContract) -> None:
    # conforming_report seed 7 drops the read of acceptance-snapshot, which the acceptable report cites:
    # the structural checks refuse acceptable bytes. With no retries the repair policy rolls back in the
    # same step, so the report on disk afterwards is no longer what was judged (before: not counted).
    assert "refused at least once" in METRIC_DEFINITIONS["false_rejects"]
    tasks = [t for t in study_tasks(["structural", "repair"], ["conforming_report"], 8, contract=_no_retries(contract))
             if t.seed == 7]
    structural, repair = (run_study_task(t) for t in tasks)
    assert structural.false_reject and structural.rejections >= 1
    assert repair.stop_reason == "escalated" and repair.rejections >= 1
    assert repair.false_reject
