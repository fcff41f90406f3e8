"""The ``experiment`` and ``study`` commands of :mod:`harness_lab.cli` (kept apart: that module stays small).

Arguments are checked before any run; ``--output`` is made before the work and removed again when the
work fails and nothing was written into it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import HarnessLabError

if TYPE_CHECKING:
    from .study import TaskFamily

__all__ = ["MAX_WORKERS_PER_CPU", "cmd_experiment", "cmd_study", "families", "output_dir", "undo_output_dir"]

MAX_WORKERS_PER_CPU = 8
"""``study --workers`` beyond this many per CPU is refused (the runs are CPU-bound: more only fork)."""


def output_dir(path: str) -> tuple[Path, list[Path]]:
    """Create ``--output`` before any work; return it and the folders this made (to undo on failure)."""
    if not path.strip():
        raise HarnessLabError("--output: empty path (say '.' for the current folder)")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise HarnessLabError(f"--output: {out} exists and is not a directory")
    made = [p for p in (out, *out.parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarnessLabError(f"--output: cannot create {out}: {exc.strerror or exc}") from None
    return out, made


def undo_output_dir(made: list[Path]) -> None:
    for folder in made:  # innermost first; a folder something was written into stays
        try:
            folder.rmdir()
        except OSError:
            return


def cmd_experiment(args: argparse.Namespace) -> int:
    from . import write_coding_experiment, write_experiment

    _, made = output_dir(args.output)
    try:
        (write_coding_experiment if getattr(args, "family", "report") == "coding" else write_experiment)(args.output)
    except BaseException:
        undo_output_dir(made)
        raise
    print((Path(args.output) / "table.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {Path(args.output) / 'results.json'} and {Path(args.output) / 'table.md'}")
    return 0


def families() -> dict[str, TaskFamily]:
    """The task families ``study --family`` runs, by name: adding a family is one entry here."""
    from .coding_family import CODING
    from .study import REPORTS

    return {f.name: f for f in (REPORTS, CODING)}


def cmd_study(args: argparse.Namespace) -> int:
    import importlib.util

    from . import GROUPS

    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    if not groups or (bad := [g for g in groups if g not in GROUPS]):
        raise HarnessLabError(f"--groups: unknown group(s) {','.join(bad) if groups else repr(args.groups)}; "
                              f"choose from {','.join(GROUPS)}")
    known_families = families()
    if (family := known_families.get(args.family)) is None:
        raise HarnessLabError(f"--family: unknown family {args.family!r}; choose from {','.join(known_families)}")
    if all(g in family.not_applicable for g in groups):
        raise HarnessLabError(f"--groups: no group applies to family {family.name}: "
                              + "; ".join(f"{g}: {family.not_applicable[g]}" for g in groups))
    known = list(family.scenarios())
    names = known if args.scenarios == "all" else list(family.subsets[args.scenarios]) \
        if args.scenarios in family.subsets else [n.strip() for n in args.scenarios.split(",") if n.strip()]
    if not names or (bad := [n for n in names if n not in known]):
        raise HarnessLabError(f"--scenarios: unknown scenario(s) {','.join(bad) if names else repr(args.scenarios)}; "
                              f"use {', '.join(['all', *family.subsets])} or some of {','.join(known)}")
    for flag, given in (("--groups", groups), ("--scenarios", names)):
        if twice := _repeated(given):
            raise HarnessLabError(f"{flag}: {twice} given twice (it would count double)")
    if args.seeds < 1:
        raise HarnessLabError(f"--seeds: must be >= 1, got {args.seeds}")
    if not 0.0 <= args.noise <= 1.0:
        raise HarnessLabError(f"--noise: must lie in [0, 1], got {args.noise}")
    if args.workers is not None and args.workers < 1:
        raise HarnessLabError(f"--workers: must be >= 1, got {args.workers}")
    # A process pool that forks starts all its workers at once: --workers 100000 was a fork bomb.
    if args.workers is not None and args.workers > (most := MAX_WORKERS_PER_CPU * (os.cpu_count() or 1)):
        raise HarnessLabError(f"--workers: at most {most} here ({MAX_WORKERS_PER_CPU} per CPU; each worker is "
                              f"a process), got {args.workers}")
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
        raise HarnessLabError("plots need matplotlib: pip install 'harness-lab[plot]', or pass --no-plots")
    limits = {k: v for k, v in (("max_decisions", args.max_decisions), ("max_tool_calls", args.max_tool_calls))
              if v is not None}
    # The contract's own floors: a finish is decided without a tool call, so 0 tool calls is a
    # budget a contract file may state (a run that may only finish); 0 decisions is not.
    for name, floor in (("max_decisions", 1), ("max_tool_calls", 0)):
        if name in limits and limits[name] < floor:
            raise HarnessLabError(f"--{name.replace('_', '-')}: must be >= {floor}, got {limits[name]}")
    out, made = output_dir(args.output)
    try:
        return _study_into(out, groups, names, limits, args, family)
    except BaseException:
        undo_output_dir(made)
        raise


def _repeated(names: list[str]) -> str:
    return next((n for i, n in enumerate(names) if n in names[:i]), "")


def _study_into(out: Path, groups: list[str], names: list[str], limits: dict[str, int],
                args: argparse.Namespace, family: TaskFamily) -> int:
    import importlib
    from concurrent.futures import Executor
    from typing import Any

    from . import render_study_table, run_study, write_study
    from .sweep import local_pool

    executor: Executor | None = None
    client: Any = None
    if args.dask:
        try:  # an optional extra, untyped: imported by name so the runtime never needs it
            distributed = importlib.import_module("dask.distributed")
        except ImportError as exc:
            raise HarnessLabError("--dask needs dask.distributed: pip install 'harness-lab[dask]'") from exc
        if not args.quiet:
            print(f"connecting to the Dask scheduler at {args.dask} ...", file=sys.stderr, flush=True)
        try:
            client = distributed.Client(args.dask)
        except (OSError, ValueError, TypeError) as exc:  # unreachable (after its connect timeout), or malformed
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise HarnessLabError(f"--dask: cannot reach a scheduler at {args.dask!r}: {reason}") from None
        executor = client.get_executor()
    elif args.workers is not None:
        executor = local_pool(args.workers)
    try:
        # the limits replace those of each scenario's own contract (a scenario may bring its own)
        result = run_study(groups, names, args.seeds, noise=args.noise, budget=limits, executor=executor,
                           progress=not args.quiet, family=family)
    finally:
        if client is not None:
            client.close()
        elif executor is not None:
            executor.shutdown()
    written = write_study(result, out, plots=not args.no_plots)
    print(render_study_table(result), end="")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
