"""Where a no-op step's time goes: each part of ``Run.step()`` timed alone, beside the whole step.

    .venv/bin/python bench/step_breakdown.py [--steps 2000]

The whole step is the ``harness-lab`` row of ``step_overhead.py`` (two alternating ``think`` calls, no
store). Each part below is timed in isolation on the same inputs a step of that run gives it, best of
five, so the parts add up to roughly the whole; what is left is the step's own glue (state checks,
fault hooks, the trace lists). CPU time of this thread (``time.thread_time``), so other jobs on the
machine disturb it less than wall time would.

The second table splits a step of the ``harness-lab+store`` row (``Run(store=SQLiteStore(...))``): the
checkpoint's parts are timed inside the run by wrapping them (a wrapper adds ~0.3 µs per call), so
they show what each costs with the caches as a real step leaves them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import noop_run  # noqa: E402

from harness_lab import Run  # noqa: E402
from harness_lab.loop._step_records import proposed, step_record, tool_called  # noqa: E402
from harness_lab.loop._step_records import usage as make_usage  # noqa: E402
from harness_lab.loop.gates import LoopGates  # noqa: E402
from harness_lab.persistence._context_rows import ContextRows  # noqa: E402
from harness_lab.records.proposal import parse_proposal  # noqa: E402
from harness_lab.records.redaction import Redactor  # noqa: E402
from harness_lab.store import SQLiteStore  # noqa: E402


def _per_call(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - start) / n * 1e6)
    return best


def _warm(workdir: Path) -> Run:
    run = noop_run(workdir)
    for _ in range(300):  # past the first compressions and retirements: the steady state
        run.step()
    return run


def measure(steps: int, tmp: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    run = _warm(tmp / "whole")
    out["whole step"] = _per_call(run.step, steps)
    run.close()

    raws = ({"kind": "think", "thought": "plan the next step"}, {"kind": "think", "thought": "check the budget"})
    flip = iter(range(10**9))
    out["parse_proposal"] = _per_call(lambda: parse_proposal(raws[next(flip) % 2]), steps)
    fresh = iter([parse_proposal(raws[i % 2]) for i in range(5 * steps)])
    out["canonical fingerprint"] = _per_call(lambda: next(fresh).canonical, steps)
    feed = iter([parse_proposal(raws[i % 2]) for i in range(5 * steps)])  # fingerprints not made yet
    gates = LoopGates(budget=run.contract.budget, clock=run.clock)
    decision = iter(range(1, 10**9))
    out["convergence gate"] = _per_call(lambda: gates.convergence(next(feed), next(decision)), steps)

    run = _warm(tmp / "context")
    ctx, n = run.context, iter(range(10**9))

    def observe_and_view() -> None:
        i = next(n)
        ctx.add_interaction(i, "think(thought='plan the next step')", "noted", source=f"step {i}:think")
        ctx.view()

    out["context: add + view (incl. compression)"] = _per_call(observe_and_view, steps)

    def observe_view_and_log() -> None:
        observe_and_view()
        ctx.take_changes(raw_items=True)

    # A store's checkpoint takes the change log every step: shown (as the difference), not added.
    with_log = _per_call(observe_view_and_log, steps)
    out["context: take_changes"] = max(0.0, with_log - _per_call(observe_and_view, steps))
    out["workspace_hash (quiet journal)"] = _per_call(run.sandbox.workspace_hash, steps)
    record = run.step()
    assert record.proposal is not None and record.tool_result is not None
    proposal, result, dec, usage = record.proposal, record.tool_result, record.decision, record.usage

    def records() -> None:  # as the run makes them (harness_lab.loop._step_records: no re-validation)
        a = proposed(1, 1, proposal, dec)
        b = tool_called(2, 1, result.tool, result)
        step_record(1, record.state_before, record.state_after, proposal, dec, result, None,
                    make_usage(usage.decisions, usage.tool_calls, usage.tokens, usage.elapsed_s), (a, b))

    out["trace records (2 events, usage, StepRecord)"] = _per_call(records, steps)
    run.close()
    return out


def measure_store(steps: int, tmp: Path) -> dict[str, float]:
    """A store step and, timed inside it, the checkpoint's parts."""
    from harness_lab.persistence import checkpoint as cp  # noqa: PLC0415

    store = SQLiteStore(tmp / "store.sqlite")
    run = noop_run(tmp / "store-ws", store=store)
    for _ in range(300):
        run.step()
    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - start
        return wrapper

    parts = {  # (owner, attribute, label); the ones a refactoring renamed are skipped
        "commit": (cp.Checkpointer, "commit", "checkpoint commit, all of it"),
        "sql": (store, "_tx", "SQLite transaction (the INSERT and its commit)"),
        "context": (ContextRows, "take", "context change log / whole state"),
        "context_text": (ContextRows, "text", "context JSON assembled"),
        "record": (cp, "dump_step_row", "step record JSON"),
        "capture": (type(run), "capture", "run state captured"),
        "clean": (Redactor, "clean", "redaction memo check"),
    }
    saved = []
    for key, (owner, attr, _) in parts.items():
        if hasattr(owner, attr):
            saved.append((owner, attr, getattr(owner, attr)))
            setattr(owner, attr, timed(key, getattr(owner, attr)))
    try:
        best: dict[str, float] = {}
        for _ in range(5):
            spent.clear()
            start = time.thread_time()
            for _ in range(steps):
                run.step()
            whole = (time.thread_time() - start) / steps * 1e6
            if whole < best.get("whole", float("inf")):
                best = {"whole": whole, **{k: v / steps * 1e6 for k, v in spent.items()}}
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)
        run.close()
    return {(parts[k][2] if k in parts else k): v for k, v in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-lab-breakdown-") as d:
        parts = measure(args.steps, Path(d))
    whole = parts.pop("whole step")
    print(f"no-op step, no store: {whole:.1f} µs CPU (best of 5 x {args.steps} steps)")
    counted = 0.0
    for name, value in parts.items():
        if name == "canonical fingerprint":  # made inside the convergence gate: shown, not added
            print(f"  {name:<42} {value:6.1f} µs  (part of the convergence gate)")
            continue
        if name == "context: take_changes":  # a store's per-step change log: shown, not added
            print(f"  {name:<42} {value:6.1f} µs  (a store's checkpoint, every step; alone, not added)")
            continue
        counted += value
        print(f"  {name:<42} {value:6.1f} µs  {value / whole:5.0%}")
    print(f"  {'the rest (glue, fault hooks, gates, tool)':<42} {whole - counted:6.1f} µs  {(whole - counted) / whole:5.0%}")
    with tempfile.TemporaryDirectory(prefix="harness-lab-breakdown-") as d:
        parts = measure_store(args.steps, Path(d))
    whole = parts.pop("whole")
    commit = parts.pop("checkpoint commit, all of it", 0.0)
    print(f"no-op step with SQLiteStore: {whole:.1f} µs CPU (best of 5 x {args.steps} steps, parts wrapped)")
    print(f"  {'the step without its checkpoint':<48} {whole - commit:6.1f} µs  {(whole - commit) / whole:5.0%}")
    print(f"  {'checkpoint commit, all of it':<48} {commit:6.1f} µs  {commit / whole:5.0%}, of which:")
    for name, value in parts.items():
        print(f"    {name:<46} {value:6.1f} µs")
    rest = commit - sum(parts.values())
    print(f"    {'the rest (checkpoint dict, JSON, redaction)':<46} {rest:6.1f} µs")


if __name__ == "__main__":
    main()
