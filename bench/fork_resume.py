"""Fork / resume cost from a captured run state at 1,000 and 10,000 steps.

    .venv/bin/python bench/fork_resume.py [--steps 1000 10000]

Measures what a checkpoint restore does in memory: ``Run.capture()`` -> JSON -> ``Run.restore()`` into
a fresh run (a fork). A durable store (``harness_lab.store``, being built) adds one SQLite read per
resume; until it lands this measures the in-memory part only, and history listing is not measured.
Target (issue 7): <= 2 ms whatever the history length.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import noop_run  # noqa: E402


def measure(steps: int, tmp: Path, repeats: int = 20) -> dict[str, float]:
    run = noop_run(tmp / f"ws-{steps}")
    for _ in range(steps):
        run.step()
    times: dict[str, list[float]] = {"capture": [], "serialize": [], "restore": [], "first_step": []}
    for i in range(repeats):
        t0 = time.perf_counter()
        captured = run.capture()
        t1 = time.perf_counter()
        blob = json.dumps(captured)
        t2 = time.perf_counter()
        fork = noop_run(tmp / f"fork-{steps}-{i}")
        t3 = time.perf_counter()
        fork.restore(json.loads(blob), source=f"bench fork at step {steps}")
        t4 = time.perf_counter()
        fork.step()
        t5 = time.perf_counter()
        times["capture"].append(t1 - t0)
        times["serialize"].append(t2 - t1)
        times["restore"].append(t4 - t3)
        times["first_step"].append(t5 - t4)
        fork.close()
    run.close()
    out = {k: sorted(v)[len(v) // 2] * 1000 for k, v in times.items()}
    out["bytes"] = float(len(blob))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-lab-bench-") as d:
        rows = {n: measure(n, Path(d)) for n in args.steps}
    print("fork from a captured state (median of 20; ms)")
    for n, r in rows.items():
        total = r["capture"] + r["serialize"] + r["restore"]
        print(f"  at {n:>6} steps: capture {r['capture']:.3f}  json {r['serialize']:.3f}  restore {r['restore']:.3f}"
              f"  = {total:.3f} ms (state {r['bytes'] / 1024:.1f} KiB); first step after {r['first_step']:.3f} ms")
    first, last = rows[args.steps[0]], rows[args.steps[-1]]
    tot = lambda r: r["capture"] + r["serialize"] + r["restore"]  # noqa: E731
    print(f"ratio {args.steps[-1]} vs {args.steps[0]} steps: {tot(last) / tot(first):.2f}x (flat ~1x; target <= 2 ms)")
    print("history listing: not measured (harness_lab.store has not landed)")


if __name__ == "__main__":
    main()
