"""Peak RSS of a long no-op run: 1,000 vs 10,000 steps (each in a fresh process).

    .venv/bin/python bench/memory.py [--steps 1000 10000]

Flat means the in-memory trace is bounded (old events live in the store: ``SQLiteStore`` is attached,
so ``Run.records``/``Run.events`` keep a window) and the context record is bounded by the view (items
that left it for good are retired). Also printed: the context items still recorded and the size of
the context state a checkpoint would write whole.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def child(steps: int, with_store: bool) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from step_overhead import noop_run, sqlite_store_class

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as d:
        store = sqlite_store_class()(Path(d) / "store.sqlite") if with_store else None
        run = noop_run(Path(d) / "ws", store=store)
        for _ in range(steps):
            run.step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        state = json.dumps(run.context.state(ref_texts=False))
        print(json.dumps({"steps": steps, "baseline_kib": base, "peak_kib": peak, "records": len(run.records),
                          "events": len(run.events), "context_items": len(run.context.view().items),
                          "recorded_items": len(json.loads(state)["items"]), "state_kib": len(state) / 1024}))
        run.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--with-store", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.with_store)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from step_overhead import sqlite_store_class

    store = sqlite_store_class() is not None
    flag = ["--with-store"] if store else []
    rows = [json.loads(subprocess.run([sys.executable, __file__, "--child", str(n), *flag], capture_output=True,
                                      text=True, check=True).stdout) for n in args.steps]
    print("peak RSS of a no-op run (fresh process each; MiB); "
          + ("SQLite store attached" if store else "no store attached (harness_lab.store not landed)"))
    for r in rows:
        print(f"  {r['steps']:>6} steps: peak {r['peak_kib'] / 1024:7.1f}  (after imports {r['baseline_kib'] / 1024:6.1f}; "
              f"grew {(r['peak_kib'] - r['baseline_kib']) / 1024:6.1f})  records={r['records']} events={r['events']} "
              f"context items in view={r['context_items']} recorded={r['recorded_items']} "
              f"(state {r['state_kib']:.0f} KiB)")
    first, last = rows[0], rows[-1]
    grow = lambda r: r["peak_kib"] - r["baseline_kib"]  # noqa: E731
    per_step = (grow(last) - grow(first)) / (last["steps"] - first["steps"])
    print(f"ratio of growth {last['steps']} vs {first['steps']} steps: {grow(last) / max(grow(first), 1):.1f}x "
          f"(flat would be ~1x); marginal {per_step:.2f} KiB per step")


if __name__ == "__main__":
    main()
