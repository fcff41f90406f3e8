"""What ``compare(a, b)`` and breakpoints cost.

    .venv/bin/python bench/compare_cost.py [--steps 1000] [--repeats 3]

* ``compare, agree``  - two runs of bench/time_travel.py's writing loop (a no-op ``think`` twice, then a
                        file written), ``--steps`` steps each, identical: every step is read back
                        (``run.at(n)`` on both) and compared, the worst case; CPU per step compared;
* ``compare, fork``   - the first run against a fork of it 10 steps before its end that ran 10 steps of
                        its own: the steps before the fork point are shared rows, found by bisection
                        (O(log n) steps read), not compared;
* ``run() per step``  - a storeless think loop: ``step()`` in a loop, ``run(max_steps=)`` and
                        ``run(until=[step, verdict, budget, a callable])``: what checking breakpoints adds.

CPU time (``time.process_time``), the best of ``--repeats``: 2 shared cores make wall clock noisy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from time_travel import writing_run

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import FunctionProposer
from harness_lab.store import SQLiteStore
from harness_lab.timeline import Breakpoint, compare


def _best(repeats: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return min(times)


def _thinker(workspace: Path) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=10**9, max_tool_calls=10**9, max_tokens=None, wall_clock_seconds=None)
    thoughts = ({"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"})
    turn = iter(range(10**9))
    return Run(contract=contract, proposer=FunctionProposer(lambda view: thoughts[next(turn) % 2]),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store, other = SQLiteStore(root / "a.sqlite"), SQLiteStore(root / "b.sqlite")  # both runs are "bench"
        a, b = writing_run(root / "a", store), writing_run(root / "b", other)
        a.run(max_steps=n)
        b.run(max_steps=n)
        result = compare(a, b)
        cpu = _best(args.repeats, lambda: compare(a, b))
        print(f"compare, agree: {result.compared} steps compared in {cpu * 1e3:.0f} ms CPU "
              f"({cpu / result.compared * 1e3:.2f} ms a step); {result.summary()}")
        fork = a.fork(at_step=n - 10, budget="fresh")
        fork.run(max_steps=10)
        result = compare(a, fork)
        cpu = _best(args.repeats, lambda: compare(a, fork))
        print(f"compare, fork at step {n - 10} of {n}: {cpu * 1e3:.1f} ms CPU; {result.summary()}")
        for run in (fork, a, b):
            run.close()
        store.close()
        other.close()

        stops: list[Any] = [Breakpoint.step(10**8), Breakpoint.verdict(), Breakpoint.budget(1.0), lambda record: False]
        drives: dict[str, Callable[[Run], object]] = {
            "step() loop": lambda run: [run.step() for _ in range(n)],
            "run(max_steps=)": lambda run: run.run(max_steps=n),
            "run(until=[step, verdict, budget, callable])": lambda run: run.run(max_steps=n, until=stops),
        }
        for label, drive in drives.items():
            made = iter(range(10**6))

            def one(drive: Callable[[Run], object] = drive, made: Any = made) -> None:
                with _thinker(root / f"t{next(made)}") as run:
                    drive(run)

            cpu = _best(args.repeats, one)
            print(f"run() per step, {label}: {cpu / n * 1e6:.0f} us CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
