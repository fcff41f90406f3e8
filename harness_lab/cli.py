"""The ``harness-lab`` command line. Bad input is one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .contract import load_contract
from .errors import HarnessLabError
from .evidence import EvidenceCatalogue
from .paths import data_dir
from .validation import check_report

__all__ = ["main"]


def _cmd_experiment(args: argparse.Namespace) -> int:
    from .experiments import write_experiment

    write_experiment(args.output)
    print((Path(args.output) / "table.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {Path(args.output) / 'results.json'} and {Path(args.output) / 'table.md'}")
    return 0


def _cmd_check_report(args: argparse.Namespace) -> int:
    contract = load_contract(Path(args.contract) if args.contract else data_dir() / "contracts" / "report_task.yaml")
    evidence = EvidenceCatalogue.from_dir(args.evidence or data_dir() / "evidence")
    report = Path(args.report)
    if not report.is_file():
        raise HarnessLabError(f"{report}: report file not found")
    verdict = check_report(report.read_bytes(), set(args.read), evidence, contract.verification.report)
    errors = [{"code": e.code, "message": e.message} for e in verdict.errors]
    print(json.dumps({"accepted": verdict.accepted, "errors": errors}, ensure_ascii=False))
    return 0 if verdict.accepted else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from .run import Run

    run = Run.from_scenario(args.scenario, validation=not args.no_validation)
    while not run.state.terminal and run.waiting is None:
        record = run.step()
        print(record.model_dump_json() if args.json else record.summary())
    final = {
        "scenario": args.scenario,
        "validation": not args.no_validation,
        "final_state": run.state.value,
        "stop_reason": run.stop_reason.code if run.stop_reason else None,
        "decisions": run.usage.decisions,
        "tool_calls": run.usage.tool_calls,
        "receipt": run.receipt.model_dump(mode="json") if run.receipt else None,
    }
    print(json.dumps(final) if args.json else f"final: {run.state.value} ({final['stop_reason']})")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-lab", description="Watch, step, break and repair an agent harness.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("experiment", help="reproduce seed 004's ten-scenario table")
    p.add_argument("--output", required=True, help="directory for results.json and table.md")
    p.set_defaults(func=_cmd_experiment)

    p = sub.add_parser("check-report", help="validate a report file against the default contract")
    p.add_argument("report")
    p.add_argument("--read", action="append", default=[], metavar="ID", help="an evidence id read (repeatable)")
    p.add_argument("--evidence", help="evidence directory (default: the shipped data/evidence)")
    p.add_argument("--contract", help="contract file (default: data/contracts/report_task.yaml)")
    p.set_defaults(func=_cmd_check_report)

    p = sub.add_parser("run", help="run one scenario headless")
    p.add_argument("scenario")
    p.add_argument("--no-validation", action="store_true")
    p.add_argument("--json", action="store_true", help="one JSON object per step, then the final state")
    p.set_defaults(func=_cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except HarnessLabError as exc:
        print(f"harness-lab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
