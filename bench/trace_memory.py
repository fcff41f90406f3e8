"""What a long no-store run's trace costs: memory held and CPU per step, old entries packed vs kept whole.

    .venv/bin/python bench/trace_memory.py [--steps 10000] [--rounds 5]

A run without a store keeps ``run.records`` / ``run.events`` whole (nowhere else holds them);
``harness_lab.loop.record_log`` packs their old entries in batches (plain tuples in one ``marshal`` text,
the objects they share held once). Each contender runs ``--steps`` no-op steps (as ``bench/step_overhead.py``) after
50 warm-up steps, in a fresh process, and prints:

* what the steps added: resident memory, and (a separate process: it slows the run) what Python still
  holds by ``tracemalloc``;
* CPU µs per step over the whole run (packing included), and the part of it spent in the garbage
  collector (``gc.callbacks``): frozen records kept whole fill the oldest generation, which every full
  collection walks again.

``plain`` is the same run with packing off (the trace held as a list, as before). Rounds alternate the
order; medians (range). No figure is asserted: this is a measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from core_targets import TARGETS, _rss_kib, spread  # noqa: E402
from step_overhead import noop_run  # noqa: E402

import harness_lab.loop.run  # noqa: E402
from harness_lab.loop.record_log import trace_logs  # noqa: E402

CONTENDERS = ("packed", "plain")


def child(steps: int, contender: str, traced: bool) -> None:
    import tracemalloc

    if contender == "plain":
        harness_lab.loop.run.trace_logs = lambda *a, **k: trace_logs(pack=False)  # type: ignore[assignment,misc]
    in_gc = [0.0, 0.0]  # CPU seconds in collections; the start of the one under way

    def collecting(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            in_gc[1] = time.process_time()
        else:
            in_gc[0] += time.process_time() - in_gc[1]

    with tempfile.TemporaryDirectory() as d:
        run = noop_run(Path(d) / "ws")
        for counted in (False, True):  # 50 warm-up steps (first view, first packing), then the steps
            if counted:
                gc.collect()
                rss = _rss_kib()
                if traced:
                    tracemalloc.start()
                gc.callbacks.append(collecting)
                cpu = time.process_time()
            for _ in range(steps if counted else 50):
                run.step()
        cpu = time.process_time() - cpu
        gc.callbacks.remove(collecting)
        gc.collect()
        grew = tracemalloc.get_traced_memory()[0] / 1024 if traced else _rss_kib() - rss
        print(json.dumps({"kib": grew, "cpu_us": cpu / steps * 1e6, "gc_us": in_gc[0] / steps * 1e6,
                          "records": len(run.records), "events": len(run.events),
                          "packed": [run.records.packed, run.events.packed]}))
        run.close()


def measure(contender: str, steps: int, traced: bool = False) -> dict[str, Any]:
    flags = ["--child", contender, "--steps", str(steps), *(["--traced"] if traced else [])]
    return dict(json.loads(subprocess.run([sys.executable, __file__, *flags], capture_output=True, text=True,
                                          check=True).stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.steps, args.child, args.traced)
        return
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    for r in range(args.rounds):
        for name in CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]:
            rows[name].append(measure(name, args.steps))
    held = {name: measure(name, args.steps, traced=True) for name in CONTENDERS}
    print(f"trace memory: a {args.steps}-step no-op run without a store, after 50 warm-up steps, fresh process "
          f"each; {args.rounds} interleaved rounds, median (range)")
    print(f"  {'':<8} {'grew, resident MiB':>26} {'Python holds, MiB':>18} {'CPU µs/step':>26} {'of it in gc':>26}"
          "  packed records/events")
    for name in CONTENDERS:
        got = rows[name]
        print(f"  {name:<8} {spread([g['kib'] / 1024 for g in got]):>26} {held[name]['kib'] / 1024:>18.1f} "
              f"{spread([g['cpu_us'] for g in got]):>26} {spread([g['gc_us'] for g in got]):>26}  "
              f"{got[0]['packed'][0]}/{got[0]['records']} {got[0]['packed'][1]}/{got[0]['events']}")
    ratios = [p["cpu_us"] / q["cpu_us"] for p, q in zip(rows["packed"], rows["plain"], strict=True)]
    print(f"packed / plain CPU per step: {spread(ratios)}x (no slower: <= 1x); "
          f"memory target {TARGETS['memory']}: packed grew {statistics.median(g['kib'] for g in rows['packed']) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
