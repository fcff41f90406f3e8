"""Fork / resume cost from a checkpoint at 1,000 and 10,000 steps, and listing history.

    .venv/bin/python bench/fork_resume.py [--steps 1000 10000]

A no-op run (see ``step_overhead.py``) checkpoints every step into ``SQLiteStore``. Then, for the last
checkpoint and for checkpoints in the middle of a change-log span (the worst case: the most rows to
replay), it measures:

* ``load``     - ``load_checkpoint``: the checkpoint row, the whole context state it builds on and the
                 change logs after it, replayed (what the store part of a resume or fork costs);
* ``restore``  - ``Run.continue_from`` into a run that exists already: the restorable state set,
                 the context rebuilt (what a fork does after ``load``);
* ``fork``     - ``run.fork("R@N")`` end to end, including making the new run (workspace copy,
                 sandbox, its first checkpoint); ``resume`` - ``Run.resume`` end to end likewise;
* ``history``  - ``store.history(run_id)``: every checkpoint listed, per checkpoint.

Target (issue 7): load + restore <= 2 ms whatever the history length; listing <= 10 µs per checkpoint.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import noop_run  # noqa: E402

from harness_lab.checkpoint import FULL_EVERY  # noqa: E402
from harness_lab.resume import _continue, load_checkpoint  # noqa: E402
from harness_lab.run import Run  # noqa: E402
from harness_lab.store import SQLiteStore  # noqa: E402


def _median_ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def measure(steps: int, tmp: Path, repeats: int = 15) -> dict[str, float]:
    store = SQLiteStore(tmp / f"runs-{steps}.sqlite")
    run = noop_run(tmp / f"ws-{steps}", store=store)
    for _ in range(steps):
        run.step()
    worst = (steps // FULL_EVERY - 1) * FULL_EVERY + FULL_EVERY - 1  # the longest replay below the end
    target = noop_run(tmp / f"target-{steps}")
    out: dict[str, float] = {}
    for label, step in (("last", steps), ("mid", worst)):
        out[f"load_{label}"] = _median_ms(lambda s=step: load_checkpoint(store, "bench", s), repeats)
        checkpoint, context = load_checkpoint(store, "bench", step)
        out[f"restore_{label}"] = _median_ms(lambda c=checkpoint, x=context: _continue(target, c, x, "bench", store),
                                             repeats)
    made: list[Run] = []  # closed after timing: closing a sandbox is not part of forking
    n = iter(range(10**6))
    out["fork"] = _median_ms(lambda: made.append(run.fork(f"bench@{steps}", new_run_id=f"f{next(n)}",
                                                          workspace=tmp / f"fork-{steps}-{next(n)}")), repeats)
    run.close()
    out["resume"] = _median_ms(lambda: made.append(Run.resume(store, "bench", proposer=run.proposer,
                                                              effects=run.executor.effects)), 5)
    for other in made:
        other.close()
    t = time.perf_counter()
    history = store.history("bench")
    out["history_us"] = (time.perf_counter() - t) / len(history) * 1e6
    out["checkpoints"] = float(len(history))
    target.close()
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-lab-bench-") as d:
        rows = {n: measure(n, Path(d)) for n in args.steps}
    print(f"fork / resume from a SQLite checkpoint (median; ms). Whole context state every {FULL_EVERY} steps;")
    print("'mid' is the checkpoint with the most change logs to replay, 'last' the newest one.")
    for n, r in rows.items():
        print(f"  at {n:>6} steps: load last {r['load_last']:.3f} / mid {r['load_mid']:.3f}; restore last "
              f"{r['restore_last']:.3f} / mid {r['restore_mid']:.3f}; load+restore (worst) "
              f"{max(r['load_last'] + r['restore_last'], r['load_mid'] + r['restore_mid']):.3f} ms")
        print(f"  {'':>16} end to end: fork {r['fork']:.2f} ms, resume {r['resume']:.2f} ms; history: "
              f"{int(r['checkpoints'])} checkpoints at {r['history_us']:.2f} µs each")
    first, last = rows[args.steps[0]], rows[args.steps[-1]]
    worst = lambda r: max(r["load_last"] + r["restore_last"], r["load_mid"] + r["restore_mid"])  # noqa: E731
    print(f"ratio {args.steps[-1]} vs {args.steps[0]} steps: load+restore {worst(last) / worst(first):.2f}x, "
          f"fork {last['fork'] / first['fork']:.2f}x (flat ~1x; target <= 2 ms); history "
          f"{last['history_us']:.2f} µs/checkpoint (target <= 10)")


if __name__ == "__main__":
    main()
