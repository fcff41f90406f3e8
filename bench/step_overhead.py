"""Per-step overhead of a scripted run, side by side with a bare loop and LangGraph.

    .venv/bin/python bench/step_overhead.py [--steps 2000] [--no-langgraph]

Every loop does the same thing per step: propose an action, decide on it, execute a no-op tool,
record the step. "durable" means the step's record is committed to SQLite (WAL, synchronous=NORMAL:
survives a killed process) before the next step starts.

* bare            - a Python loop that calls the no-op tool (the floor without persistence);
* bare+sqlite     - the same loop committing one SQLite row per step (the durable floor);
* harness-lab     - ``Run.step()`` with a proposer alternating two ``think`` calls (the pure no-op tool);
* harness-lab+sqlite - the same, committing the ``StepRecord`` per step in the store's row form
  (``dump_step_row``): the harness plus one durable row, a floor for the store's design;
* harness-lab+store - ``Run(store=SQLiteStore(...))``: the real per-step checkpoint (step record,
  checkpoint, context change log;
  step: one transaction, since ``think`` has no effect to make durable first);
* harness-lab+store(ext) - the same with two ungated no-op *external effects* (send_message/push):
  two transactions per step, because an external effect's write-ahead intent must be durable
  before the effect runs (shown for transparency; not the issue's no-op loop);
* harness-lab+store(FULL) - the real store with ``synchronous="FULL"``: an fsync on every commit
  (survives a power cut, not only a killed process); a quarter of the steps, as fsyncs are slow;
* langgraph[/+sqlite] - a one-node StateGraph looping N times; with ``SqliteSaver`` and
  ``durability="sync"``, at ``synchronous=NORMAL`` as ours commit (the ratios' peer), and at
  SqliteSaver's own default, sqlite's FULL (``langgraph+sqlite(sync,FULL)``, compared with
  ``harness-lab+store(FULL)``). LangGraph is installed by this script into its own venv under
  ``~/.cache/harness-lab-bench`` (never into the project); ``--no-langgraph`` skips it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from harness_lab import Run
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.approval import AutoApprove
from harness_lab.paths import data_dir
from harness_lab.persistence.row_text import dump_step_row
from harness_lab.proposers.scripted import FunctionProposer
from harness_lab.records.tools import ToolResult

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "harness-lab-bench"
PEER_PACKAGES = ["langgraph", "langgraph-checkpoint-sqlite"]


class NoopEffects:
    """The no-op tool: an ungated external effect that does nothing."""

    def apply(self, action: Any, idempotency_key: str) -> ToolResult:
        return ToolResult.success(action.kind, "ok")


def sqlite_store_class() -> Any:
    """``harness_lab.store.SQLiteStore`` once ``Run`` takes ``store=``; None before the store lands."""
    if "store" not in inspect.signature(Run).parameters:
        return None
    try:
        return importlib.import_module("harness_lab.store").SQLiteStore
    except (ImportError, AttributeError):
        return None


def noop_run(workspace: Path | None = None, store: Any = None, *, external: bool = False) -> Run:
    """A run that never ends on its own: two different ``think`` calls (the pure no-op tool), alternating
    (no convergence stop), every budget lifted (decisions, tool calls, the default token and wall-clock
    limits). ``external``: two ungated no-op *external effects* instead (send_message /
    push), whose write-ahead intent a store must make durable before each runs: a second transaction."""
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=10**9, max_tool_calls=10**9, max_tokens=None, wall_clock_seconds=None)
    contract = contract.model_copy(update={"human_gate": contract.human_gate.model_copy(update={"required_for": ()})})
    actions = (({"kind": "send_message", "to": "noop"}, {"kind": "push", "ref": "noop"}) if external else
               ({"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"}))
    counter = iter(range(10**12))
    return Run(contract=contract, proposer=FunctionProposer(lambda view: actions[next(counter) % 2]),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace,
               effects=NoopEffects(), approver=AutoApprove(), run_id="bench",
               **({"store": store} if store is not None else {}))


def _db(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    # Keyed by one integer, as the store keys its step rows (schema 5): one b-tree per INSERT.
    conn.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, run TEXT, step INTEGER, record TEXT)")
    return conn


def bare(steps: int, tmp: Path | None) -> float:
    conn = _db(tmp / "bare.db") if tmp else None
    tool = NoopEffects()
    kinds = (types.SimpleNamespace(kind="push"), types.SimpleNamespace(kind="send_message"))
    state: dict[str, Any] = {"step": 0, "log": []}
    start = time.perf_counter()
    for i in range(steps):
        action = kinds[i % 2]
        decision = "execute" if action.kind in ("send_message", "push") else "refuse"
        result = tool.apply(action, str(i)) if decision == "execute" else None
        state["step"] = i
        record = {"step": i, "action": action.kind, "decision": decision, "ok": result is not None}
        if conn is not None:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO steps VALUES (?, ?, ?, ?)", (i, "bare", i, json.dumps(record)))
            conn.execute("COMMIT")
    return (time.perf_counter() - start) / steps * 1e6


def ours(steps: int, tmp: Path | None, workdir: Path, *, real_store: bool = False, external: bool = False,
         synchronous: str = "NORMAL") -> float:
    conn = _db(tmp / "ours.db") if tmp and not real_store else None
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
    store = sqlite_store_class()(tmp / "store.sqlite", synchronous=synchronous) if tmp and real_store else None
    run = noop_run(workdir / ("ws-durable" if tmp else "ws"), store=store, external=external)
    for _ in range(50):  # warm-up: first view, first compression
        run.step()
    start = time.perf_counter()
    for _ in range(steps):
        record = run.step()
        if conn is not None:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO steps VALUES (?, ?, ?, ?)", (record.step, "bench", record.step, dump_step_row(record)))
            conn.execute("COMMIT")
    elapsed = (time.perf_counter() - start) / steps * 1e6
    run.close()
    return elapsed


# The peer's loop (bench/core_targets.py runs it too): one node looping N times, the same work per step.
LANGGRAPH_LOOP = r'''
from typing import TypedDict
from langgraph.graph import StateGraph, END
from langgraph.checkpoint.sqlite import SqliteSaver

class S(TypedDict):
    step: int
    n: int
    last: dict

def node(state: S) -> dict:
    action = {"kind": "send_message" if state["step"] % 2 else "push"}     # propose
    decision = "execute"                                                   # decide
    result = {"tool": action["kind"], "ok": True}                          # no-op tool
    return {"step": state["step"] + 1, "last": {"action": action, "decision": decision, "result": result}}

def route(state: S) -> str:
    return END if state["step"] >= state["n"] else "step"

def graph(checkpointer):
    g = StateGraph(S)
    g.add_node("step", node)
    g.set_entry_point("step")
    g.add_conditional_edges("step", route)
    return g.compile(checkpointer=checkpointer)
'''

_PEER = LANGGRAPH_LOOP + r'''
import json, sqlite3, sys, tempfile, time, os
n = int(sys.argv[1])
out = {}
plain = graph(None)
plain.invoke({"step": 0, "n": 20, "last": {}}, {"recursion_limit": 10**9})
best = []
for _ in range(3):
    t = time.perf_counter(); plain.invoke({"step": 0, "n": n, "last": {}}, {"recursion_limit": 10**9})
    best.append((time.perf_counter() - t) / n * 1e6)
out["plain"] = min(best)
# "durable": synchronous=NORMAL, as our store and the bare floor commit (a WAL commit survives a
# killed process); "durable_full": SqliteSaver's own default (sqlite's FULL: an fsync per commit).
for key, synchronous in (("durable", "NORMAL"), ("durable_full", None)):
    with tempfile.TemporaryDirectory() as d:
        conn = sqlite3.connect(os.path.join(d, "lg.db"), check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()  # sets WAL; the PRAGMA below must come after it
        if synchronous is not None:
            conn.execute(f"PRAGMA synchronous={synchronous}")
        durable = graph(saver)
        warm = {"recursion_limit": 10**9, "configurable": {"thread_id": "warm"}}
        durable.invoke({"step": 0, "n": 20, "last": {}}, warm, durability="sync")
        best = []
        for i in range(3):
            cfg = {"recursion_limit": 10**9, "configurable": {"thread_id": f"bench{i}"}}
            t = time.perf_counter(); durable.invoke({"step": 0, "n": n, "last": {}}, cfg, durability="sync")
            best.append((time.perf_counter() - t) / n * 1e6)
        out[key] = min(best)
        out[key + "_mode"] = "{}/synchronous={}".format(conn.execute("PRAGMA journal_mode").fetchone()[0],
                                                       conn.execute("PRAGMA synchronous").fetchone()[0])
import importlib.metadata as md
out["version"] = md.version("langgraph")
print(json.dumps(out))
'''


def bench_venv(name: str, packages: list[str]) -> Path:
    """The python of a venv of the bench's own under the cache, made and filled once (core_targets.py and
    serializer.py keep their peers there too)."""
    venv = CACHE / name
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        print(f"installing {' '.join(packages)} into {venv} (benchmark only) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
        (venv / ".installed").touch()
    return python


def peer_python() -> Path:
    return bench_venv("langgraph-venv", PEER_PACKAGES)


def langgraph(steps: int) -> dict[str, Any]:
    out = subprocess.run([str(peer_python()), "-c", _PEER, str(steps)], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def store_growth(tmp: Path, marks: tuple[int, ...] = (300, 1000, 10000), span: int = 100,
                 windows: int = 3) -> dict[int, float]:
    """µs per step with ``SQLiteStore`` at each history length: the best of the ``windows``
    ``span``-step windows ending at the mark, flat or growing. 100 steps hold six whole-state rows;
    a WAL checkpoint or a full garbage collection (~30 ms) lands in one window and not the next:
    a single window reads those as growth or its absence by chance."""
    run = noop_run(tmp / "ws-growth", store=sqlite_store_class()(tmp / "growth.sqlite"))
    out, done = {}, 0
    for mark in marks:
        while done < mark - span * windows:
            run.step()
            done += 1
        best = float("inf")
        for _ in range(windows):
            start = time.perf_counter()
            for _ in range(span):
                run.step()
            done += span
            best = min(best, (time.perf_counter() - start) / span * 1e6)
        out[mark] = best
    run.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--no-langgraph", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-lab-bench-") as d:
        tmp = Path(d)
        # Best of three: the least-disturbed run is the overhead; a busy machine only adds to it.
        rows = {
            "bare": min(bare(args.steps, None) for _ in range(3)),
            "bare+sqlite": min(bare(args.steps, tmp / f"b{i}") for i in range(3)),
            "harness-lab": min(ours(args.steps, None, tmp / f"o{i}") for i in range(3)),
            "harness-lab+sqlite": min(ours(args.steps, tmp / f"d{i}", tmp / f"d{i}") for i in range(3)),
        }
        growth: dict[int, float] = {}
        if sqlite_store_class() is not None:  # the real checkpoint store, once it has landed
            rows["harness-lab+store"] = min(ours(args.steps, tmp / f"s{i}", tmp / f"s{i}", real_store=True)
                                            for i in range(3))
            rows["harness-lab+store(ext)"] = min(ours(args.steps, tmp / f"e{i}", tmp / f"e{i}", real_store=True,
                                                      external=True) for i in range(3))
            # fsync on every commit (survives a power cut): compared with SqliteSaver's default below
            rows["harness-lab+store(FULL)"] = min(ours(args.steps // 4, tmp / f"f{i}", tmp / f"f{i}", real_store=True,
                                                       synchronous="FULL") for i in range(3))
            growth = store_growth(tmp)
    peer: dict[str, Any] = {} if args.no_langgraph else langgraph(args.steps)
    if peer:
        rows["langgraph"], rows["langgraph+sqlite(sync)"] = peer["plain"], peer["durable"]
        rows["langgraph+sqlite(sync,FULL)"] = peer["durable_full"]
    print(f"per-step overhead, {args.steps} steps, no-op tool, best of 3 (µs/step; lower is better)")
    for name, value in rows.items():
        print(f"  {name:<24} {value:9.1f}")
    print("ratios:")
    print(f"  harness-lab / bare                    {rows['harness-lab'] / rows['bare']:8.1f}x   (target: <= 15 µs/step)")
    print(f"  harness-lab+sqlite / bare+sqlite      {rows['harness-lab+sqlite'] / rows['bare+sqlite']:8.2f}x   "
          "(target: <= 3x, and <= 100 µs/step)")
    if "harness-lab+store" in rows:
        print(f"  harness-lab+store / bare+sqlite       {rows['harness-lab+store'] / rows['bare+sqlite']:8.2f}x")
    else:
        print("  (harness_lab.store not landed: harness-lab+sqlite is the stand-in row)")
    if growth:
        print("  harness-lab+store by history length (µs/step, best 100-step window of the 300 up to step N): "
              + ", ".join(f"N={n}: {v:.0f}" for n, v in growth.items())
              + f"  ({growth[max(growth)] / growth[min(growth)]:.2f}x; flat ~1x)")
    if peer:
        print(f"  langgraph / harness-lab               {rows['langgraph'] / rows['harness-lab']:8.2f}x")
        print(f"  langgraph+sqlite / harness-lab+sqlite {rows['langgraph+sqlite(sync)'] / rows['harness-lab+sqlite']:8.2f}x"
              "   (target: >= 10x)")
        if "harness-lab+store" in rows:
            print(f"  langgraph+sqlite / harness-lab+store  "
                  f"{rows['langgraph+sqlite(sync)'] / rows['harness-lab+store']:8.2f}x   (target: >= 10x)")
        if "harness-lab+store(FULL)" in rows:
            print(f"  langgraph+sqlite(FULL) / harness-lab+store(FULL) "
                  f"{rows['langgraph+sqlite(sync,FULL)'] / rows['harness-lab+store(FULL)']:6.2f}x   (both fsync every commit: bound by the disk's flush latency, which other writers on the machine swing)")
        print(f"  (langgraph {peer['version']}; SqliteSaver compared at {peer['durable_mode']} (1 = NORMAL), "
              f"as ours; its default is {peer['durable_full_mode']} (2 = FULL))")


if __name__ == "__main__":
    main()
