"""The store's write path per stored step: CPU µs of ``commit_step``, of the whole step, and the SQL statements
it runs, for one or two source trees side by side (old code against new), interleaved in rounds.

    .venv/bin/python bench/commit_path.py [--old ../wt-at-main] [--steps 1000] [--rounds 9]

Each tree runs in a worker process of its own, started in the tree's folder (``python -c``: the folder comes
first on ``sys.path``, so its ``harness_lab`` is the one imported, before the venv's editable install), which holds three
contenders alive across rounds: the no-op stored step of ``bench/core_targets.py`` (``Run.step()`` with a
``SQLiteStore``, NORMAL), the same loop whose steps are external effects (a write-ahead intent, then the
step's row settles it), and the commit-only loop (one autocommitted INSERT of a step row: the yardstick).
Rounds rotate the order of every (tree, contender) pair so a busy machine disturbs all alike. For the two
stored loops the worker also sums the CPU time spent inside ``SQLiteStore.commit_step`` (a
``time.process_time`` pair around each call: ~0.2 µs of it is the clock itself), and inside ``record_intent``
(the write-ahead intent of an effect step), the CPU of the process's other threads (the store's log
copier, ``store/_wal.py``: part of ``step``, as in ``core_targets.py``), and counts the statements
the store's connection runs per step (``set_trace_callback``: ``BEGIN``/``COMMIT`` included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_WORKER = r'''
import collections, json, sqlite3, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "bench"))
from step_overhead import noop_run
try:  # where a tree keeps it: persistence/ since schema 9, records/ before
    from harness_lab.persistence.row_text import dump_step_row
except ImportError:
    from harness_lab.records.events import dump_step_row
from harness_lab.store import SQLiteStore

tmp = Path(tempfile.mkdtemp(prefix="harness-lab-commit-"))


def stored(name, external):
    store = SQLiteStore(tmp / f"{name}.sqlite", synchronous="NORMAL")
    spent = [0.0, 0.0]  # inside commit_step, inside record_intent

    def timed(inner, slot):
        def call(*args, **kwargs):
            t = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[slot] += time.process_time() - t
        return call

    store.commit_step = timed(store.commit_step, 0)
    store.record_intent = timed(store.record_intent, 1)
    run = noop_run(tmp / f"ws-{name}", store=store, external=external)
    for _ in range(50):
        run.step()
    statements = collections.Counter()

    def count(sql):
        statements[sql.split(" (")[0].split(" WHERE")[0][:60]] += 1

    store._db.set_trace_callback(count)
    for _ in range(20):
        run.step()
    store._db.set_trace_callback(None)
    shape = {k: v / 20 for k, v in statements.items()}

    def window(n):
        spent[0] = spent[1] = 0.0
        t, mine = time.process_time(), time.thread_time()
        for _ in range(n):
            run.step()
        total, mine = time.process_time() - t, time.thread_time() - mine
        return {"step": total / n * 1e6, "commit_step": spent[0] / n * 1e6, "record_intent": spent[1] / n * 1e6,
                "threads": (total - mine) / n * 1e6, "statements": shape}
    return window


def commit_only():
    row = dump_step_row(noop_run(tmp / "ws-row").step())
    conn = sqlite3.connect(tmp / "commit.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, record TEXT)")
    counter = iter(range(10**12))

    def window(n):
        t = time.process_time()
        for _ in range(n):
            conn.execute("INSERT INTO steps (id, record) VALUES (?, ?)", (next(counter), row))
        return {"step": (time.process_time() - t) / n * 1e6}
    return window


runners = {"stored": stored("noop", False), "stored-effect": stored("effect", True), "commit-only": commit_only()}
print(json.dumps(sorted(runners)), flush=True)
for line in sys.stdin:
    name, n = line.split()
    print(json.dumps(runners[name](int(n))), flush=True)
'''


class Worker:
    def __init__(self, tree: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(tree)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=tree)
        self.names: list[str] = json.loads(self._line())

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench: the worker exited ({self.proc.wait()})")
        return line

    def run(self, name: str, steps: int) -> dict[str, object]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{name} {steps}\n")
        self.proc.stdin.flush()
        answer: dict[str, object] = json.loads(self._line())
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="a second source tree (e.g. a worktree at main), measured beside this one")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    trees = {"new": Path(__file__).resolve().parent.parent}
    if args.old is not None:
        trees = {"old": args.old.resolve(), **trees}
    workers = {label: Worker(tree) for label, tree in trees.items()}
    pairs = [(label, name) for label, w in workers.items() for name in w.names]
    results: dict[tuple[str, str], list[dict[str, object]]] = {pair: [] for pair in pairs}
    for r in range(args.rounds):
        for label, name in pairs[r % len(pairs):] + pairs[:r % len(pairs)]:
            results[(label, name)].append(workers[label].run(name, args.steps))
    for w in workers.values():
        w.close()

    def med(pair: tuple[str, str], key: str) -> list[float]:
        return [float(str(x[key])) for x in results[pair] if key in x]

    print(f"store write path: {args.rounds} interleaved rounds of {args.steps} steps, synchronous=NORMAL; "
          "µs CPU per step, median (range over rounds)")
    for label, name in pairs:
        line = f"  {label:<4} {name:<14}"
        for key in ("step", "commit_step", "record_intent"):
            values = med((label, name), key)
            if values and (key != "record_intent" or max(values) > 0):
                line += f"  {key} {statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})"
        if threads := med((label, name), "threads"):  # the log copier copies once in 1,920 commits: a mean
            line += f"  other threads (mean) {statistics.fmean(threads):4.1f}"
        shape = results[(label, name)][-1].get("statements")
        if isinstance(shape, dict):
            line += "  statements/step: " + ", ".join(f"{v:g} {k}" for k, v in shape.items())
        print(line)
    print("ratios, median of the rounds' ratios:")
    for label in workers:
        for name in ("stored", "stored-effect"):
            per = [a / b for a, b in zip(med((label, name), "step"), med((label, "commit-only"), "step"), strict=True)]
            print(f"  {label:<4} {name:<14} / commit-only  {statistics.median(per):5.2f}x ({min(per):.2f}-{max(per):.2f})")
    if "old" in workers:
        for name in ("stored", "stored-effect"):
            for key in ("step", "commit_step", *(("record_intent",) if name == "stored-effect" else ())):
                per = [a / b for a, b in zip(med(("new", name), key), med(("old", name), key), strict=True)]
                print(f"  new/old {name:<14} {key:<12} {statistics.median(per):5.2f}x ({min(per):.2f}-{max(per):.2f})")


if __name__ == "__main__":
    main()
