"""Issue 20's targets for the run core, side by side in one process, interleaved, as ratios.

    .venv/bin/python bench/core_targets.py [--steps 1000] [--rounds 11] [--memory-steps 10000] [--no-peers]

Every contender does the same per step as ``bench/step_overhead.py`` (propose an action, decide, run a
no-op tool, record the step). Each round runs every contender once for ``--steps`` steps (a quarter of
them at ``synchronous=FULL``: an fsync per commit), in an order that rotates from round to round, so a
busy machine disturbs all of them alike; a ratio is taken *within* a round and the median of the rounds'
ratios is printed with their range, of wall-clock time and of the CPU time of the contender's process
(steadier on a shared machine; at FULL the fsync wait, not CPU, is the cost). Contenders:

* ``harness-lab``               - ``Run.step()``, no store (the no-store step);
* ``pydantic-graph 1.x``        - a one-node ``pydantic_graph.Graph`` looping N times (``run_sync``, its
  default in-memory persistence), the peer the no-store step is measured against;
* ``harness-lab+store(NORMAL|FULL)`` - ``Run(store=SQLiteStore(..., synchronous=...))``: the real
  per-step checkpoint (the stored step);
* ``commit-only(NORMAL|FULL)``  - a bare SQLite loop at the store's pragmas (WAL, ``wal_autocheckpoint=0``,
  the same ``synchronous``) committing one row per step (a real step row's text) and nothing else:
  the floor a stored step is measured against;
* ``langgraph`` / ``langgraph+sqlite(NORMAL|FULL)`` - a one-node ``StateGraph`` as in step_overhead.py,
  with ``SqliteSaver`` and ``durability="sync"`` at the same ``synchronous``.

Also: the memory a 10,000-step run without a store gains once warmed up (in a fresh process: resident
memory, and what Python still holds by ``tracemalloc``). The peers are installed by this script into their own venvs under
``~/.cache/harness-lab-bench`` (never into the project) and run in one long-lived worker process each,
which takes "contender steps" lines and answers µs per step; ``--no-peers`` skips them.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import LANGGRAPH_LOOP, bench_venv, noop_run, sqlite_store_class  # noqa: E402

from harness_lab.persistence.row_text import dump_step_row  # noqa: E402

PYDANTIC_GRAPH = ["pydantic-graph>=1,<2"]
LANGGRAPH = ["langgraph", "langgraph-checkpoint-sqlite"]

# The targets issue 20 names, printed beside the figures.
TARGETS = {
    "no-store": "<= 1x (and <= 15 µs on an idle core)",
    "stored": "<= 3x",
    "langgraph": ">= 10x",
    "memory": "<= 5 MiB",
}


# One worker per peer venv: reads "<contender> <steps>" lines, answers µs per step (wall, CPU) lines. Its
# source is this head, the peer's part (which fills ``runners``) and _TAIL.
_HEAD = r'''
import json, os, sqlite3, sys, tempfile, time, warnings
from dataclasses import dataclass, field
# pydantic-graph 1.x says its BaseNode Graph goes away in 2.x: that Graph is the 1.x peer measured here
warnings.filterwarnings("ignore", message="Importing `Graph` from `pydantic_graph` is deprecated")

runners = {}
tmp = tempfile.mkdtemp(prefix="harness-lab-peer-")

def timed(run, n, steps_done):
    t, c = time.perf_counter(), time.process_time()
    out = run(n)
    t, c = time.perf_counter() - t, time.process_time() - c
    assert steps_done(out) == n, out  # it ran every step
    return t, c
'''

_PYDANTIC_GRAPH = r'''
from pydantic_graph import BaseNode, End, Graph, GraphRunContext

@dataclass
class PState:
    n: int
    step: int = 0
    last: dict = field(default_factory=dict)

@dataclass
class Step(BaseNode[PState, None, int]):
    async def run(self, ctx: GraphRunContext[PState]) -> "Step | End[int]":
        step = ctx.state.step                                                  # as step_overhead's LangGraph node:
        action = {"kind": "send_message" if step % 2 else "push"}              # propose
        decision = "execute"                                                   # decide
        result = {"tool": action["kind"], "ok": True}                          # no-op tool
        ctx.state.last = {"action": action, "decision": decision, "result": result}
        ctx.state.step = step + 1
        return End(ctx.state.step) if ctx.state.step >= ctx.state.n else Step()

pgraph = Graph(nodes=[Step])
runners["pydantic-graph"] = lambda n: timed(lambda k: pgraph.run_sync(Step(), state=PState(n=k)), n,
                                            lambda result: result.output)
runners["pydantic-graph"](20)
import importlib.metadata as md
VERSION = "pydantic-graph " + md.version("pydantic-graph")
'''

_LANGGRAPH = LANGGRAPH_LOOP + r'''
def langgraph_runner(synchronous):
    if synchronous is None:
        compiled, durability = graph(None), {}
    else:
        conn = sqlite3.connect(os.path.join(tmp, f"lg-{synchronous}.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()  # sets WAL; the PRAGMA must come after it
        conn.execute(f"PRAGMA synchronous={synchronous}")
        compiled, durability = graph(saver), {"durability": "sync"}
    count = iter(range(10**9))
    def invoke(n):
        cfg = {"recursion_limit": 10**9, "configurable": {"thread_id": f"t{next(count)}"}}
        return compiled.invoke({"step": 0, "n": n, "last": {}}, cfg, **durability)
    run = lambda n: timed(invoke, n, lambda out: out["step"])
    run(20)
    return run

runners["langgraph"] = langgraph_runner(None)
runners["langgraph+sqlite(NORMAL)"] = langgraph_runner("NORMAL")
runners["langgraph+sqlite(FULL)"] = langgraph_runner("FULL")
import importlib.metadata as md
VERSION = "langgraph " + md.version("langgraph")
'''

_TAIL = r'''
print(json.dumps({"contenders": sorted(runners), "version": VERSION}), flush=True)
for line in sys.stdin:
    name, n = line.split()
    wall, cpu = runners[name](int(n))
    print(json.dumps({"wall": wall / int(n) * 1e6, "cpu": cpu / int(n) * 1e6}), flush=True)
'''


# Times ``steps`` steps of one contender: µs per step, (wall clock, CPU time of its process).
Timer = Callable[[int], tuple[float, float]]


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _per_step(start: tuple[float, float], steps: int) -> tuple[float, float]:
    wall, cpu = _clocks()
    return (wall - start[0]) / steps * 1e6, (cpu - start[1]) / steps * 1e6


class Peer:
    """A worker process in a peer's venv; ``timer(name)`` measures one of its contenders."""

    def __init__(self, python: Path, part: str) -> None:
        self.proc = subprocess.Popen([str(python), "-c", _HEAD + part + _TAIL], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        hello = json.loads(self._line())
        self.contenders: list[str] = hello["contenders"]
        self.version: str = hello["version"]

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench: the peer worker {self.proc.args[0]} exited ({self.proc.wait()})")
        return line

    def timer(self, name: str) -> Timer:
        def run(steps: int) -> tuple[float, float]:
            assert self.proc.stdin is not None
            self.proc.stdin.write(f"{name} {steps}\n")
            self.proc.stdin.flush()
            answer = json.loads(self._line())
            return answer["wall"], answer["cpu"]
        return run

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def ours(tmp: Path, synchronous: str | None) -> Timer:
    """``Run.step()`` timed per window; ``synchronous`` None: no store. The run lives across rounds."""
    store = None if synchronous is None else sqlite_store_class()(tmp / f"store-{synchronous}.sqlite",
                                                                   synchronous=synchronous)
    run = noop_run(tmp / f"ws-{synchronous}", store=store)
    for _ in range(50):  # warm-up: first view, first compression
        run.step()

    def window(steps: int) -> tuple[float, float]:
        start = _clocks()
        for _ in range(steps):
            run.step()
        return _per_step(start, steps)
    return window


def step_row_text(tmp: Path) -> str:
    """The row a no-op step's record is stored as (what the commit-only loop writes each step)."""
    run = noop_run(tmp / "ws-row")
    text = dump_step_row(run.step())
    run.close()
    return text


def commit_only(tmp: Path, synchronous: str, row: str) -> Timer:
    """One autocommitted INSERT per step (a lone statement is one transaction, as the store commits a
    step with nothing else to write), at the store's pragmas; the step's work left out entirely."""
    conn = sqlite3.connect(tmp / f"commit-{synchronous}.sqlite", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the store copies the log back off the step's path
    conn.execute("CREATE TABLE steps (id INTEGER PRIMARY KEY, record TEXT)")
    counter = iter(range(10**12))
    insert = "INSERT INTO steps (id, record) VALUES (?, ?)"

    def window(steps: int) -> tuple[float, float]:
        start = _clocks()
        for _ in range(steps):
            conn.execute(insert, (next(counter), row))
        return _per_step(start, steps)
    return window


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def memory_child(steps: int, traced: bool) -> None:
    """In a fresh process: what ``steps`` no-store steps add once warmed up, as resident memory or
    (``traced``) as memory Python still holds by ``tracemalloc``, started after the warm-up so it counts
    only what the steps kept (its own bookkeeping inflates the resident figure: one or the other)."""
    import gc
    import tracemalloc

    with tempfile.TemporaryDirectory() as d:
        run = noop_run(Path(d) / "ws")
        for _ in range(50):
            run.step()
        gc.collect()
        rss = _rss_kib()
        if traced:
            tracemalloc.start()
        for _ in range(steps):
            run.step()
        gc.collect()
        grew = tracemalloc.get_traced_memory()[0] / 1024 if traced else _rss_kib() - rss
        print(json.dumps({"kib": grew, "records": len(run.records), "events": len(run.events)}))
        run.close()


def memory_growth(steps: int, traced: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--memory-child", str(steps), *(["--traced"] if traced else [])],
                         capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):9.1f}  ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--memory-steps", type=int, default=10000)
    parser.add_argument("--no-peers", action="store_true", help="skip pydantic-graph and LangGraph")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child, args.traced)
        return
    full_steps = max(args.steps // 4, 1)
    peers: list[Peer] = []
    if not args.no_peers:
        peers = [Peer(bench_venv("pydantic-graph-1-venv", PYDANTIC_GRAPH), _PYDANTIC_GRAPH),
                 Peer(bench_venv("langgraph-venv", LANGGRAPH), _LANGGRAPH)]
    with tempfile.TemporaryDirectory(prefix="harness-lab-core-") as d:
        tmp = Path(d)
        row = step_row_text(tmp)
        # name -> (timer, steps per window)
        contenders: dict[str, tuple[Timer, int]] = {
            "harness-lab": (ours(tmp, None), args.steps),
            "harness-lab+store(NORMAL)": (ours(tmp, "NORMAL"), args.steps),
            "commit-only(NORMAL)": (commit_only(tmp, "NORMAL", row), args.steps),
            "harness-lab+store(FULL)": (ours(tmp, "FULL"), full_steps),
            "commit-only(FULL)": (commit_only(tmp, "FULL", row), full_steps),
        }
        for peer in peers:
            for name in peer.contenders:
                label = "pydantic-graph 1.x" if name == "pydantic-graph" else name
                contenders[label] = (peer.timer(name), full_steps if "FULL" in name else args.steps)
        names = list(contenders)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # rotate: no contender always first
            for name in order:
                timer, steps = contenders[name]
                w, c = timer(steps)
                wall[name].append(w)
                cpu[name].append(c)
        for peer in peers:
            peer.close()
    memory, held = memory_growth(args.memory_steps, False), memory_growth(args.memory_steps, True)

    print(f"run core targets (issue 20): {args.rounds} interleaved rounds of {args.steps} steps "
          f"({full_steps} at FULL), no-op tool; µs/step, median (range over rounds); lower is better")
    print(f"  {'':<28} {'wall clock':>24}   {'CPU time (its process)':>24}")
    for name in names:
        print(f"  {name:<28} {spread(wall[name])}   {spread(cpu[name])}")
    versions = "".join(f"; {p.version}" for p in peers)
    print(f"  (commit-only writes one {len(row)}-byte step row per step{versions}; CPU time leaves out the "
          "waits: on a busy machine it is the steadier figure, except at FULL, where the fsync wait is the cost)")

    def ratio(label: str, top: str, bottom: str, target: str) -> None:
        if top in wall and bottom in wall:
            shown = []
            for times in (wall, cpu):
                per_round = [a / b for a, b in zip(times[top], times[bottom], strict=True)]
                shown.append(f"{statistics.median(per_round):6.2f}x ({min(per_round):.2f}-{max(per_round):.2f})")
            print(f"  {label:<50} {shown[0]:>20}   {shown[1]:>20}   target {target}")

    print(f"ratios, median of the rounds' ratios (range): {'wall':>28}   {'CPU':>20}")
    ratio("no-store step / pydantic-graph 1.x", "harness-lab", "pydantic-graph 1.x", TARGETS["no-store"])
    ratio("stored step / commit-only, NORMAL", "harness-lab+store(NORMAL)", "commit-only(NORMAL)", TARGETS["stored"])
    ratio("stored step / commit-only, FULL", "harness-lab+store(FULL)", "commit-only(FULL)", TARGETS["stored"])
    ratio("LangGraph SqliteSaver(sync) / stored step, NORMAL", "langgraph+sqlite(NORMAL)",
          "harness-lab+store(NORMAL)", TARGETS["langgraph"])
    ratio("LangGraph SqliteSaver(sync) / stored step, FULL", "langgraph+sqlite(FULL)",
          "harness-lab+store(FULL)", TARGETS["langgraph"])
    ratio("LangGraph (no checkpointer) / no-store step", "langgraph", "harness-lab", "(for reference)")
    print(f"memory: a {args.memory_steps}-step run without a store (after 50 warm-up steps, fresh process) grew "
          f"{memory['kib'] / 1024:.1f} MiB resident; Python holds {held['kib'] / 1024:.1f} MiB more (tracemalloc; "
          f"records={memory['records']} events={memory['events']})   target {TARGETS['memory']}")


if __name__ == "__main__":
    main()
