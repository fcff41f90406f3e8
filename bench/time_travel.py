"""Time travel cost: ``run.at(n)`` and a fork from step n at 1,000 and 10,000 steps.

    .venv/bin/python bench/time_travel.py [--steps 1000 10000] [--repeats 15] [--points 5]
    .venv/bin/python bench/time_travel.py --old ../wt-at-main [--steps 1000 10000] [--rounds 30]

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

``--old TREE`` instead compares two source trees (e.g. ``git worktree add /tmp/old main``) on forks alone:
one worker process per tree (started in the tree's folder, so its ``harness_lab`` is the one imported)
builds the same run, then the two fork from the same steps in alternating rounds; it prints each tree's
CPU median and quartiles over every fork, and the new/old ratio of the rounds' medians (median and range).

Target (issue 19): <= 5 ms each, any n, flat in the history's length. Figures are the median and the
best of ``--repeats`` per step (2 shared cores: the best is the cost without interference, the median
what a busy machine gives); the line per length gives the worst median over the steps. A fork's CPU
time (``time.process_time``: this process only, so another's load does not count) is given beside it,
best / median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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


# A tree's fork worker (see --old): this file's run, that tree's harness_lab; one line in, CPU µs per fork out.
_WORKER = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(1, sys.argv[1])  # this bench's folder, after the tree's own (sys.path[0], the cwd)
from time_travel import steps_to_measure, writing_run
from harness_lab.store import SQLiteStore
tmp = Path(tempfile.mkdtemp(prefix="harness-lab-tt-"))
run = writing_run(tmp / "ws", SQLiteStore(tmp / "runs.sqlite"))
run.run(max_steps=int(sys.argv[2]))
points, made = steps_to_measure(run.step_no, int(sys.argv[3])), iter(range(10**9))

def fork(n):
    i = next(made)
    return run.fork(at_step=n, budget="fresh", new_run_id=f"F{i}", workspace=tmp / f"fork-{i}")

for n in points:
    fork(n).close()  # warm
print(json.dumps(points), flush=True)
for _ in sys.stdin:
    cpu = []
    for n in points:
        t = time.process_time()
        made_fork = fork(n)
        cpu.append((time.process_time() - t) * 1e6)
        made_fork.close()
    print(json.dumps(cpu), flush=True)
"""


def compare(old: Path, steps: int, rounds: int, points: int) -> None:
    """Forks of the old and this tree, interleaved (see the module docstring)."""
    trees = {"old": old.resolve(), "new": Path(__file__).resolve().parent.parent}
    workers = {label: subprocess.Popen([sys.executable, "-c", _WORKER, str(Path(__file__).resolve().parent),
                                        str(steps), str(points)], cwd=tree, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True) for label, tree in trees.items()}
    at = {label: json.loads(w.stdout.readline()) for label, w in workers.items() if w.stdout is not None}
    cpu: dict[str, list[float]] = {label: [] for label in workers}
    ratios = []
    for r in range(rounds):
        medians = {}
        for label in (("old", "new") if r % 2 == 0 else ("new", "old")):
            worker = workers[label]
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("fork\n")
            worker.stdin.flush()
            got = json.loads(worker.stdout.readline())
            cpu[label] += got
            medians[label] = statistics.median(got)
        ratios.append(medians["new"] / medians["old"])
    for worker in workers.values():
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    print(f"fork(at_step=n, budget='fresh') CPU µs at {steps} steps, n in {at['new']}, {rounds} interleaved rounds:")
    for label, values in cpu.items():
        q = statistics.quantiles(values, n=4)
        print(f"  {label}: median {statistics.median(values):.0f} (quartiles {q[0]:.0f}-{q[2]:.0f}, best "
              f"{min(values):.0f}) over {len(values)} forks")
    print(f"  new/old, the rounds' medians: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--points", type=int, default=5)
    parser.add_argument("--old", type=Path, help="another source tree: compare its forks with this tree's, interleaved")
    parser.add_argument("--rounds", type=int, default=30, help="with --old: rounds of one fork per step")
    args = parser.parse_args(argv)
    if args.old is not None:
        for steps in args.steps:
            compare(args.old, steps, args.rounds, args.points)
        return 0
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
