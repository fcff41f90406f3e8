"""Cost of the functional layer per finish: the shipped coding contract's checks run in the sandbox.

    .venv/bin/python bench/functional_cost.py [--repeats 30]

Two figures: the layer alone (its two check commands, the protected file's hash, the allowed-files walk and
the tree hash) on the honest fix's workspace, and a whole honest-fix run with validation on vs off. CPU time
is the harness's own plus its children's (the check commands, bwrap or unshare when present); wall time
depends on the host's load, so the load average is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable

from harness_lab import Run
from harness_lab.validation import run_functional_layer


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _measure(repeats: int, work: Callable[[], None]) -> tuple[float, float]:
    """Median wall ms and median CPU ms of ``work()`` over ``repeats`` calls."""
    walls, cpus = [], []
    for _ in range(repeats):
        cpu, wall = _cpu_s(), time.perf_counter()
        work()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((_cpu_s() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def _whole_run(validation: bool) -> None:
    with Run.from_scenario("coding_honest_fix", validation=validation) as run:
        run.run()
        assert run.receipt is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    with Run.from_scenario("coding_honest_fix") as run:
        run.run()
        assert run.receipt is not None and run.receipt.functional == "passed"
        checks = ", ".join(c.name for c in run.contract.verification.functional)
        print(f"isolation: {run.sandbox.capabilities['isolation']}; checks: {checks}; "
              f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

        def layer() -> None:
            assert run_functional_layer(run.sandbox, run.contract.verification).accepted

        wall, cpu = _measure(args.repeats, layer)
        print(f"functional layer per finish: {wall:.1f} ms wall, {cpu:.1f} ms CPU (median of {args.repeats})")
    runs = max(3, args.repeats // 3)
    on = _measure(runs, lambda: _whole_run(True))
    off = _measure(runs, lambda: _whole_run(False))
    print(f"honest-fix run, validation on: {on[0]:.1f} ms wall, {on[1]:.1f} ms CPU; "
          f"off: {off[0]:.1f} ms wall, {off[1]:.1f} ms CPU (median of {runs})")


if __name__ == "__main__":
    main()
