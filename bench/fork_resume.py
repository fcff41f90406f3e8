"""Fork / resume cost from a checkpoint at 1,000 and 10,000 steps, and listing history.

    .venv/bin/python bench/fork_resume.py [--steps 1000 10000] [--repeats 25] [--files 0] [--full-every N]

A no-op run (see ``step_overhead.py``) checkpoints every step into ``SQLiteStore``. Then, for the last
checkpoint and for checkpoints in the middle of a change-log span (the worst case: the most rows to
replay), it measures:

* ``load``     - ``load_checkpoint``: the checkpoint row, the whole context state it builds on and the
                 change logs after it, replayed (what the store part of a resume or fork costs);
* ``restore``  - ``Run.continue_from`` into a run that exists already: the restorable state set,
                 the context rebuilt (what a fork does after ``load``);
* ``fork``     - ``run.fork("R@N")`` end to end, including making the new run (workspace copy,
                 sandbox, its first checkpoint row); ``resume`` - ``Run.resume`` end to end likewise;
* ``close``    - closing a fork (sandbox and its temporary directories); not part of ``fork``;
* ``history``  - ``store.history(run_id)``: every checkpoint listed, per checkpoint.

``--files N`` puts N small files (in 20 directories) into the workspace first: a fork copies them
and its first checkpoint hashes every copy (the targets are for the no-op run's empty workspace).
``--full-every N`` writes a whole context state every N steps instead of ``FULL_EVERY`` (the
checkpointer reads the module's value at each commit): the price of a longer replay, without an edit.

Side by side, a plain-stdlib reference for the same state: ``shutil.copytree`` of the workspace,
the checkpoint's rows read with ``sqlite3`` and parsed with ``json.loads``, and (for a fork) one row
holding the whole state written and committed to another WAL database. It builds no run, checks
nothing and redacts nothing: a floor, not a competitor. Ratios are ours / reference.

Targets (issue 7): fork and resume end to end <= 2 ms whatever the history length; listing
<= 10 µs per checkpoint. Figures are the median and the best of ``--repeats`` (2 shared cores:
the best is the cost without interference, the median what a busy machine gives).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import noop_run  # noqa: E402

import harness_lab.persistence.checkpoint  # noqa: E402
from harness_lab import Run  # noqa: E402
from harness_lab.persistence.resume import _continue, load_checkpoint  # noqa: E402
from harness_lab.store import SQLiteStore  # noqa: E402

TARGET_MS = 2.0


def _times_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, float, float, float]:
    """(median, best, CPU best, CPU median) in ms; CPU time is this process's (time.process_time), which
    another process's load does not inflate."""
    times, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(times) * 1000, min(times) * 1000, min(cpu) * 1000, statistics.median(cpu) * 1000


class Reference:
    """The stdlib floor: copy the files, read and parse the rows, write one row (see the docstring)."""

    def __init__(self, store_path: Path, out_path: Path) -> None:
        self.src = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, isolation_level=None)
        self.out = sqlite3.connect(out_path, isolation_level=None)
        self.out.execute("PRAGMA journal_mode=WAL")
        self.out.execute("PRAGMA synchronous=NORMAL")
        self.out.execute("CREATE TABLE steps (run TEXT, step INTEGER, checkpoint TEXT, context TEXT, "
                         "PRIMARY KEY (run, step))")
        self.n = 0

    def read(self, run_id: str, step: int) -> tuple[str, str, list[Any]]:
        # Schema 5 keys a step row by run_no << 32 | step (older files by (run_id, step)): use the key.
        run_no, = self.src.execute("SELECT run_no FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        key = run_no << 32
        base, = self.src.execute("SELECT base FROM steps WHERE id = ?", (key | step,)).fetchone()
        rows = self.src.execute("SELECT checkpoint, context FROM steps WHERE id BETWEEN ? AND ? ORDER BY id",
                                (key | base, key | step)).fetchall()
        whole = json.loads(rows[0][0])  # schema 8: the later rows' checkpoints are deltas on it
        for text, _ in rows[1:]:
            delta = json.loads(text)
            for gone in delta.pop("-", []):
                whole.pop(gone, None)
            whole.update(delta)
        return json.dumps(whole), rows[0][1], [json.loads(c) for _, c in rows]

    def fork(self, workspace: Path, dest: Path, run_id: str, step: int) -> None:
        shutil.copytree(workspace, dest, symlinks=True)
        checkpoint, whole, _ = self.read(run_id, step)
        self.n += 1
        self.out.execute("BEGIN IMMEDIATE")
        self.out.execute("INSERT INTO steps VALUES (?, ?, ?, ?)", (f"ref{self.n}", step, checkpoint, whole))
        self.out.execute("COMMIT")

    def close(self) -> None:
        self.src.close()
        self.out.close()


def measure(steps: int, tmp: Path, repeats: int, files: int = 0) -> dict[str, Any]:
    store = SQLiteStore(tmp / f"runs-{steps}.sqlite")
    for i in range(files):
        folder = tmp / f"ws-{steps}" / f"d{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    run = noop_run(tmp / f"ws-{steps}", store=store)
    for _ in range(steps):
        run.step()
    every = harness_lab.persistence.checkpoint.FULL_EVERY
    worst = (steps // every - 1) * every + every - 1  # the longest replay below the end
    target = noop_run(tmp / f"target-{steps}")
    out: dict[str, Any] = {}
    for label, step in (("last", steps), ("mid", worst)):
        out[f"load_{label}"] = _times_ms(lambda s=step: load_checkpoint(store, "bench", s), repeats)
        checkpoint, context = load_checkpoint(store, "bench", step)
        out[f"restore_{label}"] = _times_ms(lambda c=checkpoint, x=context: _continue(target, c, x, "bench", store),
                                            repeats)
    n = iter(range(10**6))
    forks: list[Run] = []  # closed after timing: closing is timed on its own
    for label, step in (("last", steps), ("mid", worst)):
        # a fork from a past checkpoint needs that checkpoint's files: the no-op run never changes them
        out[f"fork_{label}"] = _times_ms(lambda s=step: forks.append(run.fork(
            f"bench@{s}", new_run_id=f"f{next(n)}", workspace=tmp / f"fork-{steps}-{next(n)}")), repeats)
    closing = iter(forks)
    out["close"] = _times_ms(lambda: next(closing).close(), repeats)
    for other in closing:
        other.close()
    ref = Reference(tmp / f"runs-{steps}.sqlite", tmp / f"ref-{steps}.sqlite")
    out["ref_fork"] = _times_ms(lambda: ref.fork(run.workspace, tmp / f"ref-{steps}-{next(n)}", "bench", steps), repeats)
    out["ref_read"] = _times_ms(lambda: ref.read("bench", steps), repeats)
    ref.close()
    run.close()
    resumed: list[Run] = []
    out["resume"] = _times_ms(lambda: resumed.append(Run.resume(store, "bench", proposer=run.proposer,
                                                                 effects=run.executor.effects)), repeats)
    for other in resumed:
        other.close()
    history = store.history("bench")
    out["history_us"] = _times_ms(lambda: store.history("bench"), 5)[1] / len(history) * 1e3
    out["checkpoints"] = len(history)
    target.close()
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--files", type=int, default=0, help="small files in the workspace (default: none)")
    parser.add_argument("--full-every", type=int, default=harness_lab.persistence.checkpoint.FULL_EVERY,
                        help="steps between whole context states (default: FULL_EVERY)")
    args = parser.parse_args()
    harness_lab.persistence.checkpoint.FULL_EVERY = args.full_every
    with tempfile.TemporaryDirectory(prefix="harness-lab-bench-") as d:
        rows = {n: measure(n, Path(d), args.repeats, args.files) for n in args.steps}

    def ms(pair: tuple[float, ...]) -> str:
        return f"{pair[0]:6.2f} / {pair[1]:5.2f}"

    def verdict(pair: tuple[float, ...]) -> str:
        return "meets" if pair[1] <= TARGET_MS else "MISSES"

    print(f"fork / resume from a SQLite checkpoint, ms as median / best of {args.repeats}. Whole context state "
          f"every {args.full_every} steps;")
    print("'mid' is the checkpoint with the most change logs to replay, 'last' the newest one. Target: "
          f"<= {TARGET_MS:g} ms end to end. Workspace: {args.files} files.")
    for n, r in rows.items():
        print(f"\nat {n:>6} steps ({r['checkpoints']} checkpoints)")
        print(f"  load       last {ms(r['load_last'])}   mid {ms(r['load_mid'])}")
        print(f"  restore    last {ms(r['restore_last'])}   mid {ms(r['restore_mid'])}")
        for label in ("last", "mid"):
            fork = r[f"fork_{label}"]
            print(f"  fork {label:<5} {ms(fork)}  {verdict(fork):<6}  reference (copytree + rows read, parsed, "
                  f"one row written) {ms(r['ref_fork'])}: {fork[1] / r['ref_fork'][1]:.1f}x; "
                  f"CPU {fork[2]:.2f} / {fork[3]:.2f} (best / median)")
        resume = r["resume"]
        print(f"  resume     {ms(resume)}  {verdict(resume):<6}  reference (rows read and parsed) "
              f"{ms(r['ref_read'])}: {resume[1] / r['ref_read'][1]:.1f}x")
        print(f"  close      {ms(r['close'])}  (a fork's sandbox and temporary directories; not part of fork)")
        print(f"  history    {r['history_us']:.2f} µs per checkpoint, best of 5 (target <= 10)")
    first, last = rows[args.steps[0]], rows[args.steps[-1]]
    print(f"\nratio {args.steps[-1]} vs {args.steps[0]} steps (best): fork {last['fork_mid'][1] / first['fork_mid'][1]:.2f}x, "
          f"resume {last['resume'][1] / first['resume'][1]:.2f}x (flat ~1x)")


if __name__ == "__main__":
    main()
