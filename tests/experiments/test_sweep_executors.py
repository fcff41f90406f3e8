"""Sweeps take any concurrent.futures.Executor; the study's outcomes do not depend on which."""

from __future__ import annotations

import io
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from harness_lab.experiments import ProgressLine, run_study, run_study_task, study_tasks, sweep

SCENARIOS = ("conforming_report", "missing_section_then_fixed", "overclaiming_conclusion", "cites_unknown_id")
GROUPS = ("base", "structural", "semantic")


def _square(x: int) -> int:
    return x * x


def _keys(outcomes: object) -> list[dict[str, object]]:
    return [o.key() for o in outcomes]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def reference() -> list[dict[str, object]]:
    tasks = study_tasks(GROUPS, SCENARIOS, 3)
    return _keys([run_study_task(t) for t in tasks])


def test_results_come_back_in_task_order_whatever_finishes_first() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sweep(_square, list(range(50)), executor=pool, progress=False) == [x * x for x in range(50)]
    assert sweep(_square, [], progress=False) == []


def test_default_process_pool_matches_in_process_results(reference: list[dict[str, object]]) -> None:
    result = run_study(GROUPS, SCENARIOS, 3, progress=False)
    assert _keys(result.outcomes) == reference
    assert len(reference) == len(GROUPS) * len(SCENARIOS) * 3


def test_thread_and_explicit_process_pools_match(reference: list[dict[str, object]]) -> None:
    tasks = study_tasks(GROUPS, SCENARIOS, 3)
    with ThreadPoolExecutor(max_workers=3) as threads, ProcessPoolExecutor(max_workers=2) as procs:
        assert _keys(sweep(run_study_task, tasks, executor=threads, progress=False)) == reference
        assert _keys(sweep(run_study_task, tasks, executor=procs, progress=False)) == reference


def test_dask_local_cluster_matches(reference: list[dict[str, object]]) -> None:
    distributed = pytest.importorskip("dask.distributed", reason="the dask extra is not installed")
    tasks = study_tasks(GROUPS, SCENARIOS, 3)
    # dashboard_address=None still binds the scheduler's HTTP endpoint to 8787: a second job's cluster there
    # made it move with a "Port 8787 is already in use" UserWarning (an error here). A free port instead.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, \
            distributed.Client(cluster) as client:
        outcomes = sweep(run_study_task, tasks, executor=client.get_executor(), progress=False)
    assert _keys(outcomes) == reference


def test_progress_line_reaches_the_total() -> None:
    stream = io.StringIO()
    with ThreadPoolExecutor(max_workers=2) as pool:
        sweep(_square, list(range(7)), executor=pool, progress=stream, label="demo")
    last = stream.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("demo [" + "#" * 30 + "] 7/7")
    bar = ProgressLine(4, stream=io.StringIO(), width=8)
    bar.advance(2)
    bar._draw(0.0)
    assert "[####----] 2/4" in bar.stream.getvalue()  # type: ignore[attr-defined]


def test_a_failing_task_propagates() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool, pytest.raises(ZeroDivisionError):
        sweep(lambda x: 1 // x, [1, 0, 2], executor=pool, progress=False)


def test_a_failure_on_a_given_executor_cancels_the_sweeps_queued_tasks() -> None:
    # Ctrl-C in `harness-lab study --workers N` used to wait for every queued run (minutes) before exiting.
    import threading

    ran: list[int] = []
    gate = threading.Event()

    def task(i: int) -> int:
        if i == 0:
            raise ValueError("broken task")
        gate.wait(5)
        ran.append(i)
        return i

    with ThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(ValueError, match="broken task"):
            sweep(task, list(range(50)), executor=pool, progress=False)
        gate.set()
    assert len(ran) <= 1, f"{len(ran)} queued tasks still ran after the sweep had failed"


def _sigint_handler(_: int) -> str:
    import signal

    return "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "raises"


def test_pool_workers_leave_ctrl_c_to_the_parent() -> None:
    # Ctrl-C reaches the whole process group: each worker printed its own KeyboardInterrupt traceback
    # under the parent's one-line "interrupted"; the parent alone decides (it cancels what is queued).
    from harness_lab.experiments.sweep import local_pool

    with local_pool(2) as pool:
        assert set(sweep(_sigint_handler, [1, 2, 3], executor=pool, progress=False)) == {"ignored"}
    assert set(sweep(_sigint_handler, [1, 2, 3], progress=False)) == {"ignored"}  # the default pool too
