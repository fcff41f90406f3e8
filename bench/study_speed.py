"""Time of the seed's ten-scenario experiment and of the 4-group x 20-seed study, and per-run cost.

    .venv/bin/python bench/study_speed.py [--seeds 20] [--workers N]

The ten-scenario experiment is 20 runs (each scenario with validation off and on), in process.
The study is 4 groups x the seed's ten scenarios x N seeds on a local process pool, then serially
in this process, so the two figures sit side by side (pool speed-up = serial / pool).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

from harness_lab.experiments import (
    GROUPS,
    SEED_SCENARIOS,
    run_experiment,
    run_study,
    run_study_task,
    study_tasks,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    start = time.perf_counter()
    results = run_experiment()
    experiment_s = time.perf_counter() - start

    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        start = time.perf_counter()
        study = run_study(tuple(GROUPS), "seed", args.seeds, executor=pool, progress=False)
        pool_s = time.perf_counter() - start
    tasks = study_tasks(tuple(GROUPS), SEED_SCENARIOS, args.seeds)
    start = time.perf_counter()
    serial = [run_study_task(t) for t in tasks]
    serial_s = time.perf_counter() - start
    assert [o.key() for o in serial] == [o.key() for o in study.outcomes], "executors disagree"

    runs = len(study.outcomes)
    print(f"ten-scenario experiment: {len(results)} runs in {experiment_s:.2f} s "
          f"({experiment_s / len(results) * 1000:.1f} ms/run)")
    print(f"study {len(GROUPS)} groups x {len(study.scenarios)} scenarios x {args.seeds} seeds = {runs} runs:")
    print(f"  process pool ({args.workers} workers) {pool_s:7.2f} s   ({pool_s / runs * 1000:.1f} ms/run)")
    print(f"  serial, in process      {serial_s:7.2f} s   ({serial_s / runs * 1000:.1f} ms/run)")
    print(f"  pool speed-up           {serial_s / pool_s:7.2f}x   (same outcomes: checked)")
    steps = sum(o.steps for o in serial)
    print(f"  {steps} steps in all; {serial_s / steps * 1e6:.0f} µs per step including run set-up and clean-up")


if __name__ == "__main__":
    main()
