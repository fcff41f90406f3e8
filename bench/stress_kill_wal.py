"""Real SIGKILLs while the store's log copier runs; every store must stay intact and resumable.

    .venv/bin/python bench/stress_kill_wal.py [--runs 60] [--seed 5]

Each trial starts a child process stepping a no-op store run whose write-ahead log is copied back
at commit 16 of every 32 by the store's own thread (and restarted by the writer every 32: see
``harness_lab/store/_wal.py``; the defaults are 1,920 of 2,048), kills it with SIGKILL after a random
delay, then checks ``PRAGMA integrity_check``, that the step rows run 0..N without a gap, and that
``Run.resume`` continues the run for 40 more steps. Printed: trials ok, trials not. Not part of
``make test``.
"""

from __future__ import annotations

import argparse
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = r'''
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from harness_lab.store import SQLiteStore, _wal
_wal.BACKGROUND_AT, _wal.FINISH_EVERY = 16, 32
from step_overhead import noop_run
run = noop_run(Path(sys.argv[2]), store=SQLiteStore(sys.argv[1]))
print("ready", flush=True)
while True:
    run.step()
'''


def trial(tmp: Path, delay: float) -> str | None:
    """None if the killed store is intact and resumes; else what was wrong."""
    from step_overhead import noop_run

    from harness_lab import Run
    from harness_lab.store import SQLiteStore

    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp / "s.sqlite"), str(tmp / "ws"), str(HERE)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    child.wait()
    db = sqlite3.connect(tmp / "s.sqlite")
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    steps = [row[0] for row in db.execute("SELECT step FROM steps ORDER BY id")]
    db.close()
    if integrity != "ok" or steps != list(range(len(steps))):
        return f"integrity {integrity}, {len(steps)} rows, contiguous: {steps == list(range(len(steps)))}"
    store = SQLiteStore(tmp / "s.sqlite", create=False)
    try:
        run = Run.resume(store, "bench", proposer=noop_run(tmp / "scratch").proposer)
        for _ in range(40):
            run.step()
        last = store.last_step("bench")
        if run.state.value != "RUNNING" or last is None or last.step != len(steps) - 1 + 40:
            return f"resumed to {run.state.value} at step {last.step if last else None} (from {len(steps) - 1})"
    finally:
        store.close()
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    rng = random.Random(args.seed)
    bad = 0
    for n in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="harness-lab-killwal-") as d:
            problem = trial(Path(d), rng.uniform(0.05, 0.6))
        if problem is not None:
            bad += 1
            print(f"trial {n}: {problem}")
        print(f"\r{n + 1}/{args.runs} trials, {bad} not ok", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"{args.runs - bad} intact and resumed, {bad} not (seed {args.seed})")


if __name__ == "__main__":
    main()
