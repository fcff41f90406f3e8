"""Time travel cost: ``run.at(n)`` and a fork from step n at 1,000 and 10,000 steps.

    .venv/bin/python bench/time_travel.py [--steps 1000 10000] [--repeats 15] [--points 5]

A scripted loop (two no-op ``think`` calls, then a ``write_file`` of one of five files, over and over:
the workspace changes every third step) checkpoints every step into ``SQLiteStore``, the files beside
the rows (schema 7). Then, for ``--points`` steps spread over the run (the first, the last and between;
each rounded to the step before a whole context state, the most change logs to replay), it measures:

* ``at(n)``   - ``run.at(n)`` end to end: row n, the context of row n-1 rebuilt and its view made, the
                files of steps n-1 and n folded from the manifest rows, the diff between them;
* ``fork(n)`` - ``run.fork(at_step=n, budget="fresh")`` end to end: a new run with its own workspace,
                the files of step n written from the store, its first checkpoint row; closing it is
                not counted.

Side by side, measured in the same minute: ``fork("bench@<last>")``, the fork from the last checkpoint
that existed before (it copies the live workspace): what any fork costs on this machine now, so a busy
machine's figures can be read against it.

Target (issue 19): <= 5 ms each, any n, flat in the history's length. Figures are the median and the
best of ``--repeats`` per step (2 shared cores: the best is the cost without interference, the median
what a busy machine gives); the line per length gives the worst median over the steps. A fork's CPU
time (``time.process_time``: this process only, so another's load does not count) is given beside it,
best / median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.proposers import FunctionProposer
from harness_lab.store import SQLiteStore
from harness_lab.timeline.files import FULL_EVERY

TARGET_MS = 5.0


def writing_run(workspace: Path, store: SQLiteStore) -> Run:
    """A run that never ends on its own and writes one of five files every third step."""
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=10**9, max_tool_calls=10**9, max_tokens=None, wall_clock_seconds=None)
    contract = contract.model_copy(update={"human_gate": contract.human_gate.model_copy(update={"required_for": ()})})
    counter = count()

    def propose(view: Any) -> object:
        i = next(counter)
        if i % 3 == 2:
            return {"kind": "write_file", "path": f"notes/n{i % 5}.md", "content": f"# note {i}\n\nline {i}\n"}
        return {"kind": "think", "thought": "plan the next step" if i % 3 else "check the budget"}

    return Run(contract=contract, proposer=FunctionProposer(propose),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
               approver=AutoApprove(), run_id="bench", store=store)


def _times_ms(fn: Callable[[], Any], repeats: int, after: Callable[[Any], None] | None = None,
              cpu: list[float] | None = None) -> tuple[float, float]:
    """(median, best) in ms; ``after`` gets each result, outside the timing; ``cpu`` gets the CPU ms of each."""
    times = []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append((time.process_time() - c) * 1000)
        if after is not None:
            after(out)
    return statistics.median(times) * 1000, min(times) * 1000


def steps_to_measure(last: int, points: int) -> list[int]:
    """``points`` steps from 1 to ``last``, each moved to the step before a whole context state (the
    longest replay), the last one included."""
    spread = [max(1, round(last * k / max(1, points - 1))) for k in range(points)]
    worst = [min(last, max(1, (s // FULL_EVERY) * FULL_EVERY + FULL_EVERY - 1)) for s in spread]
    return sorted(set(worst[:-1] + [last]))


def measure(steps: int, repeats: int, points: int, tmp: Path,
            cpu: dict[str, list[float]]) -> list[tuple[int, float, float, float, float]]:
    """The rows per step (see main); ``cpu`` gets the CPU ms of every fork, under "step" and "checkpoint"."""
    store = SQLiteStore(tmp / f"runs-{steps}.sqlite")
    run = writing_run(tmp / f"ws-{steps}", store)
    run.run(max_steps=steps)
    rows = []
    forks = count()
    for n in steps_to_measure(run.step_no, points):
        run.at(n)  # warm: the first read of a page pays the disk
        at_median, at_best = _times_ms(lambda n=n: run.at(n), repeats)
        fork_median, fork_best = _times_ms(
            lambda n=n: run.fork(at_step=n, budget="fresh", new_run_id=f"F{next(forks)}",
                                 workspace=tmp / f"fork-{steps}-{next(forks)}"),
            repeats, after=lambda fork: fork.close(), cpu=cpu["step"])
        rows.append((n, at_median, at_best, fork_median, fork_best))
    last = run.step_no
    # The floor on this disk: what any fork must do with its files, nothing else (a new workspace and a
    # snapshot folder made, each file of the last step written): file creation is what a disk charges for.
    files = {p.relative_to(run.workspace): p.read_bytes() for p in run.workspace.rglob("*") if p.is_file()}
    floors = count()

    def write_floor() -> None:
        i = next(floors)
        root = tmp / f"floor-{steps}-{i}"
        root.mkdir()
        (tmp / f"floor-snapshots-{steps}-{i}").mkdir()
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)

    rows.append((-2, 0.0, 0.0, *_times_ms(write_floor, repeats)))
    rows.append((-1, 0.0, 0.0, *_times_ms(
        lambda: run.fork(f"bench@{last}", new_run_id=f"F{next(forks)}", workspace=tmp / f"fork-{steps}-{next(forks)}"),
        repeats, after=lambda fork: fork.close(), cpu=cpu["checkpoint"])))
    run.close()
    store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--points", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        cpu: dict[int, dict[str, list[float]]] = {steps: {"step": [], "checkpoint": []} for steps in args.steps}
        results = {steps: measure(steps, args.repeats, args.points, Path(scratch), cpu[steps]) for steps in args.steps}
    print(f"time travel, median / best of {args.repeats} (ms; target <= {TARGET_MS:g} ms each, any n)")
    print(f"  {'steps':>7} {'n':>7}   {'at(n)':>15}   {'fork(at_step=n)':>15}")
    for steps, rows in results.items():
        for n, at_m, at_b, fork_m, fork_b in rows:
            if n == -2:
                print(f"  {steps:>7} {'floor':>7}   {'files written, nothing else':>15}   {fork_m:>7.2f} / {fork_b:<5.2f}")
            elif n < 0:
                print(f"  {steps:>7} {'last':>7}   {'reference: fork(checkpoint)':>15}   {fork_m:>7.2f} / {fork_b:<5.2f}")
            else:
                print(f"  {steps:>7} {n:>7}   {at_m:>7.2f} / {at_b:<5.2f}   {fork_m:>7.2f} / {fork_b:<5.2f}")
    print("worst median by history length:")
    for steps, rows in results.items():
        own = [r for r in rows if r[0] >= 0]
        at_worst, fork_worst = max(r[1] for r in own), max(r[3] for r in own)
        floor = next(r[3] for r in rows if r[0] == -2)
        flag = "ok" if max(at_worst, fork_worst) <= TARGET_MS else "over target"
        print(f"  {steps:>7} steps: at(n) {at_worst:.2f} ms, fork {fork_worst:.2f} ms ({flag}); "
              f"reference fork(checkpoint) {rows[-1][3]:.2f} ms; the files alone {floor:.2f} ms "
              f"(fork / floor {fork_worst / floor:.2f}x)")
    print("fork CPU time (process_time, ms), best / median over every fork measured:")
    for steps, kinds in cpu.items():
        print(f"  {steps:>7} steps: " + "; ".join(f"fork from a {kind} {min(v):.2f} / {statistics.median(v):.2f}"
                                                for kind, v in kinds.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
