"""The README is executed, not trusted: its code blocks run, its command lines exit as it says and write what
it says, its tables name files that exist and results the code reproduces. (Its "Benchmarks" section and what
follows are measurements, checked by their own scripts in bench/, not here.)

Each README code block runs in a scratch directory (cwd, HOME and TMPDIR inside tmp_path). Python blocks run
statement by statement, as a notebook would, so a comment stating a shown value can be checked against it:
a comment that starts with a quoted string (``# "... -> timeout | ..."``) must match the value, ``...``
standing for any text; the other stated results are checked by hand below, next to the statement they follow.
"""

from __future__ import annotations

import ast
import builtins
import gc
import hashlib
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import harness_lab

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
# Everything before the benchmark figures: what a user reads to use the project.
DOCS = README.split("\n## Benchmarks", 1)[0]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _section(title: str) -> str:
    """The text of the README section whose ``## `` heading starts with ``title``."""
    for part in DOCS.split("\n## ")[1:]:
        if part.startswith(title):
            return part
    raise AssertionError(f"README: no section '## {title}...' (before ## Benchmarks)")


def _blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def _prose(text: str) -> str:
    return FENCE.sub("", text)


# -- running a python block the way a notebook shows it --------------------------------------------------
@dataclass
class Shown:
    source: str
    comment: str
    value: Any


def _comments(code: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _run_block(code: str, ns: dict[str, Any], after: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Shown]:
    """Execute ``code`` statement by statement in ``ns``; each statement's source maps to its comment and, for
    an expression, its value. ``after(source, ns)`` is called after each statement."""
    comments = _comments(code)
    shown: dict[str, Shown] = {}
    for node in ast.parse(code).body:
        src = ast.get_source_segment(code, node)
        assert src is not None
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), "<README>", "eval"), ns)
        else:
            exec(compile(ast.Module([node], type_ignores=[]), "<README>", "exec"), ns)
            value = None
        shown[src] = Shown(src, comments.get(node.lineno, ""), value)
        if after is not None:
            after(src, ns)
    return shown


def _check_quoted_results(shown: dict[str, Shown]) -> int:
    """A comment starting with a quoted string states the value: check it (``...`` is any text)."""
    checked = 0
    for item in shown.values():
        m = re.match(r'"([^"]*)"', item.comment)
        if m is None:
            continue
        pattern = ".*".join(re.escape(part) for part in m.group(1).split("..."))
        assert isinstance(item.value, str) and re.fullmatch(pattern, item.value, re.S), \
            f"README: {item.source!r} shows {item.value!r}, its comment says {m.group(1)!r}"
        checked += 1
    return checked


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd, HOME and TMPDIR inside tmp_path; returns the TMPDIR (empty at the start)."""
    tmp = tmp_path / "tmp"
    home = tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # tempfile caches the folder it found first
    return tmp


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the Python blocks ------------------------------------------------------------------------------------
def test_the_tour_and_the_break_and_repair_blocks_run_and_show_what_they_say(scratch: Path) -> None:
    from harness_lab import RunState, StepRecord
    from harness_lab.faults import fault_catalogue

    tour, breaking = _blocks(_section("A short tour"), "python")
    ns: dict[str, Any] = {}
    seen: dict[str, Any] = {}

    def after_tour(src: str, ns: dict[str, Any]) -> None:
        if src.startswith("run = Run.from_scenario"):
            seen["pending"] = ns["run"].pending

    shown = _run_block(tour, ns, after_tour)
    run = ns["run"]
    # "the next proposal, inspectable before it executes": the step that follows executes that proposal
    assert shown["run.pending"].value == seen["pending"] is not None
    assert ns["rec"].proposal == seen["pending"]
    # "one decision: proposal, decision, tool result, verdicts, state before/after"
    assert isinstance(ns["rec"], StepRecord) and ns["rec"].state_before is RunState.CREATED
    assert {"proposal", "decision", "tool_result", "verdict", "state_before", "state_after"} <= set(StepRecord.model_fields)
    # "to a terminal state: REVIEW_READY, BLOCKED or EXHAUSTED, with a stop reason"
    final = shown["run.run()"].value
    assert final in (RunState.REVIEW_READY, RunState.BLOCKED, RunState.EXHAUSTED) and run.stop_reason is not None
    # "artifact sha256, contract version, sha256 of every evidence note read"
    receipt = shown["run.receipt"].value
    assert receipt.artifact_sha256 == _sha256(run.workspace / receipt.artifact_path)
    assert receipt.contract_version == run.contract.version
    read = {r.proposal.action.id for r in run.records
            if r.proposal is not None and r.proposal.action is not None and r.proposal.action.kind == "read_evidence"}
    assert receipt.evidence_sha256 == {n: run.evidence[n].sha256 for n in read} != {}

    def after_break(src: str, ns: dict[str, Any]) -> None:
        run = ns["run"]
        if src.startswith("snap = "):
            seen.update(pending_after_1=run.pending, hash_at_snap=run.sandbox.workspace_hash(), step_at_snap=run.step_no,
                        state_at_snap=run.state)
        elif src.startswith("run.run("):
            seen.update(decisions_before_rollback=run.usage.decisions, step_before_rollback=run.step_no)
        elif src.startswith("run.rollback("):
            seen.update(after_rollback=(run.sandbox.workspace_hash(), run.step_no, run.state, run.usage.decisions))
        elif src.startswith("fork = "):
            seen["after_fork"] = (run.sandbox.workspace_hash(), run.step_no, run.state, run.pending)

    shown = _run_block(breaking, ns, after_break)
    assert _check_quoted_results(shown) == 1  # run.step().summary(): "... -> timeout | ..."
    inject = next(s for s in shown if s.startswith("run.inject("))
    assert ast.literal_eval(inject[len("run.inject("):-1]) in fault_catalogue()  # "any name from `harness-lab faults`"
    # the rollback: "files, run state and context go back together (budget spent stays spent)"; the step
    # counter goes on (the trace only grows: a rollback is one more event in it)
    assert seen["step_before_rollback"] > seen["step_at_snap"] == 1
    ws_hash, step, state, decisions = seen["after_rollback"]
    assert (ws_hash, state) == (seen["hash_at_snap"], seen["state_at_snap"])
    assert decisions == seen["decisions_before_rollback"] > 1 and step == seen["step_before_rollback"]
    # "the proposal after step 1 again"
    assert shown["run.pending"].value == seen["pending_after_1"] is not None
    # the fork: "a new run id and workspace from that snapshot; the original is untouched"
    fork, run = ns["fork"], ns["run"]
    assert fork.run_id != run.run_id and fork.workspace != run.workspace
    assert (fork.sandbox.workspace_hash(), fork.state, fork.pending) == (
        seen["hash_at_snap"], seen["state_at_snap"], seen["pending_after_1"])
    assert seen["after_fork"] == (ws_hash, step, state, seen["pending_after_1"])

    # "a run's temporary workspace and snapshots go with it": once the runs are dropped, nothing is left
    assert any(scratch.iterdir())
    ns.clear()
    del run, fork, receipt
    gc.collect()
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_the_lab_block_makes_a_dashboard_whose_calls_replay(scratch: Path) -> None:
    for extra in ("ipywidgets", "matplotlib"):
        pytest.importorskip(extra, reason="the README's LabView block needs the lab extra")
    section = _section("The lab")
    (block,) = _blocks(section, "python")
    ns: dict[str, Any] = {}
    shown = _run_block(block, ns)
    from harness_lab.widgets import LabView, Session

    view = shown["view"].value
    assert isinstance(view, LabView)
    # Every button is one public method, named in the text that follows the block.
    named = set(re.findall(r"`view\.(\w+)", _prose(section)))
    assert {"step", "run_to_gate", "run_to_end", "approve", "reject", "edit_pending", "inject", "rollback", "fork",
            "last_changed", "session"} <= named
    assert [n for n in sorted(named) if not hasattr(view, n)] == []
    # "view.session.save(...), then Session.load(...).replay(LabView(fresh_run)) makes the same calls headless"
    view.step()
    view.inject("tool_timeout")
    view.run_to_gate()
    assert isinstance(view.last_changed, list)
    view.session.save("session.json")
    replay = Session.load("session.json").replay(LabView(ns["Run"].from_scenario("missing_section_then_fixed")))
    assert replay.diverged_at is None and replay.entries == 3, replay.detail


def test_the_time_travel_block_opens_forks_and_compares_as_it_says(scratch: Path) -> None:
    from harness_lab import RunState, StepPoint, StepView

    (block,) = _blocks(_section("Time travel"), "python")
    ns: dict[str, Any] = {}
    shown = _run_block(block, ns)
    run, fork = ns["run"], ns["fork"]
    # "EXHAUSTED: the report lacks its Limitations section, every finish is rejected"
    assert shown["run.run()"].value is RunState.EXHAUSTED
    finishes = [p for p in run.history if p.tool == "finish"]
    assert finishes and all(p.accepted is False for p in finishes)
    # "step 0 is the registered run; then one point per step"
    points = run.history
    assert all(isinstance(p, StepPoint) for p in points) and [p.step for p in points] == list(range(run.step_no + 1))
    assert shown["[(p.step, p.tool, p.decision) for p in run.history][:5]"].value[0] == (0, None, None)
    at3 = ns["at3"]
    assert isinstance(at3, StepView) and at3.step == 3 and at3.proposal is not None
    assert at3.proposal.action is not None and at3.proposal.action.kind == "write_report"
    assert [(c.path, c.change) for c in shown["at3.changes"].value] == [("report.md", "added")]
    report = shown['at3.file_text("report.md")'].value
    assert report.startswith("# Report") and "## Limitations" not in report
    # "the state after step 2, nothing spent; the source is untouched"
    assert fork.run_id != run.run_id and run.state is RunState.EXHAUSTED
    assert shown['fork.pending.arguments["text"]'].value == report
    # "REVIEW_READY", with a fresh budget: the fork spent only its own steps
    assert shown["fork.run()"].value is RunState.REVIEW_READY and fork.usage.decisions == 2
    # "the first step where they differ (3: decision, files)"
    assert re.search(r"first differ at step 3 \(decision, files\)", shown["compare(run, fork).summary()"].value)
    assert shown['again.at(3).file_text("report.md") == at3.file_text("report.md")'].value is True
    # "stops with that call pending, not executed"
    probe = ns["probe"]
    assert shown['probe.run(until=Breakpoint.tool("write_report"))'].value is RunState.RUNNING
    assert probe.pending is not None and probe.pending.action is not None and probe.pending.action.kind == "write_report"
    assert not (probe.workspace / "report.md").exists()
    for r in (probe, fork, run, ns["again"]):
        r.close()


def test_the_dask_block_runs_the_study_on_a_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed", reason="the README's Dask block needs the dask extra")
    (block,) = _blocks(_section("The four-group study"), "python")
    # A fresh interpreter, as a user's: a LocalCluster's worker processes and its warnings stay out of pytest.
    code = block + "\nprint('outcomes', len(result.outcomes))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "outcomes 800"  # 4 groups x 10 scenarios x 20 seeds


# -- the command lines ------------------------------------------------------------------------------------
def _harness_lab() -> list[str]:
    script = Path(sys.executable).parent / "harness-lab"  # the venv's console script, as the README runs it
    return [str(script)] if script.exists() else [sys.executable, "-m", "harness_lab.cli"]


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    (root / "home").mkdir(exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"), PYTHONPATH=str(REPO))
    return env


@dataclass
class Command:
    line: str
    argv: list[str]
    comment: str


def _commands(text: str) -> list[Command]:
    out = []
    for block in _blocks(text, "bash"):
        for line in block.splitlines():
            line = line.strip()
            if not re.match(r"(\.venv/bin/)?harness-lab ", line):
                continue
            command, _, comment = line.partition("#")
            argv = shlex.split(command)
            out.append(Command(line, _harness_lab() + argv[1:], comment.strip()))
    return out


def _run(cmd: Command, root: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd.argv, cwd=root, env=_env(root), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"README: `{cmd.line}` exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _table(text: str, first_cell: str) -> dict[str, dict[str, str]]:
    """The markdown table whose header starts with ``| first_cell |``, as {row's first cell: {column: cell}}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=True))
    return rows


def _outcomes(cell: str) -> list[tuple[str, str]]:
    """The states and steps a table cell names: 'rejected at step 4, fixed at 5, REVIEW_READY at step 6'."""
    return re.findall(r"\b([A-Z_]{5,}|rejected|fixed) at (?:step )?(\d+)", cell)


def _writes(comment: str) -> list[str]:
    return re.findall(r"[\w.-]+\.(?:json|md|png|svg|sqlite)\b", comment.partition("writes")[2])


def test_the_command_lines_run_and_write_what_they_say(tmp_path: Path) -> None:
    from harness_lab.faults import fault_catalogue

    section = _section("A short tour")
    commands = _commands(section)
    assert [c.argv[len(_harness_lab())] for c in commands] == [
        "experiment", "run", "run", "check-report", "faults", "run", "resume", "resume", "trace", "replay", "watch"]
    # The inputs the lines name: a report (the shipped sample) and a scenario file with a gated action.
    shutil.copy(REPO / "data" / "reports" / "conforming.md", tmp_path / "report.md")
    (tmp_path / "my_scenario.yaml").write_text(
        "id: my_scenario\ntitle: a push behind the human gate\nlabels: {acceptable_reports: []}\n"
        "actions:\n  - {kind: read_evidence, id: harness-boundary}\n  - {kind: push, branch: main}\n"
        "  - {kind: list_dir, path: .}\n", encoding="utf-8")
    tmp = tmp_path / "tmp"
    finals: dict[str, str] = {}
    for cmd in commands:
        sub = cmd.argv[len(_harness_lab())]
        db, before = _option(cmd.argv, "--db"), set(tmp.iterdir()) if tmp.exists() else set()
        db_sha = _sha256(tmp_path / db) if db and sub in ("trace", "replay") else None
        out = _run(cmd, tmp_path).stdout.splitlines()
        made = sorted(p.name for p in set(tmp.iterdir()) - before)
        output = _option(cmd.argv, "--output")
        for name in _writes(cmd.comment):
            assert (tmp_path / (output or "") / name).is_file(), f"README: `{cmd.line}` did not write {name}"
        if db:
            assert (tmp_path / db).is_file()
        if sub == "run":
            # "prints each step and the final state"
            assert all(re.match(r"step \d+: ", line) for line in out[:-1]) and out[-1].startswith("final: ")
            if db is None:
                assert made == [], f"`{cmd.line}` left {made} in TMPDIR: without --db nothing can resume it"
            else:
                assert [n.startswith("harness-lab-ws-") for n in made] == [True], "run --db keeps its workspace"
                finals[_option(cmd.argv, "--run-id") or ""] = out[-1]
            if _option(cmd.argv, "--gate-policy") == "approve":
                assert any("approved by policy:approve" in line for line in out)  # "human gates decided headless"
        elif sub == "resume":
            assert out[-1] == finals[_option(cmd.argv, "--run-id") or ""]  # "same final state"
        elif sub == "faults":
            assert len(out) == len(fault_catalogue())  # "the fault catalogue, one line each"
        elif sub == "check-report":
            assert json.loads(out[-1])["accepted"] is True
        elif sub == "trace":
            assert out and all(re.match(r"step \d+: ", line) for line in out)
        elif sub == "replay":
            assert out[-1].startswith("identical: ")
        elif sub == "watch":  # "find stuck runs": R1 has ended, so nothing is stuck and nothing is resumed
            assert any("R1" in line and "settled" in line for line in out) and not any("resum" in line for line in out), out
        if db_sha is not None:
            assert _sha256(tmp_path / db) == db_sha, f"`{cmd.line}` changed the store it reads"
    # The ten-scenario table is what `experiment` reproduces (the README keeps each cell's states and steps).
    readme = _table(_section("The seed's ten-scenario table"), "scenario")
    made_table = _table((tmp_path / "results" / "experiment" / "table.md").read_text(encoding="utf-8"), "scenario")
    assert list(readme) == list(made_table)
    for scenario, cells in readme.items():
        for column, cell in cells.items():
            assert _outcomes(cell) == _outcomes(made_table[scenario][column]) != [], (scenario, column)


def test_the_study_command_writes_its_files_and_the_table_the_readme_shows(tmp_path: Path) -> None:
    section = _section("The four-group study")
    (cmd,) = _commands(section)
    _run(cmd, tmp_path)
    output = tmp_path / (_option(cmd.argv, "--output") or "")
    listed = re.findall(r"`([\w.]+\.\w+)`", _prose(section).partition("Writes")[2].partition("(not with")[0])
    assert listed == ["results.json", "table.md", "scenarios.md", "study.png", "study.svg"]
    assert sorted(p.name for p in output.iterdir()) == sorted(listed)
    # "Result of the command above": every cell the README shows, as the command makes it (the README may
    # leave out a count's percentage and whole columns).
    readme = _table(section, "group")
    made = _table((output / "table.md").read_text(encoding="utf-8"), "group")
    assert list(readme) == list(made)
    for group, cells in readme.items():
        for column, cell in cells.items():
            got = made[group][column]
            assert got == cell or got.startswith(cell + " ("), f"README study table: {group} / {column}: {cell} vs {got}"


# -- the tables and paths -------------------------------------------------------------------------------
def _table_paths(row: str) -> list[Path]:
    """The repository paths a row of the "where | what" table names: each backticked file or folder, relative
    to the repository, to harness_lab/, or to a folder named before it in the same row."""
    bases = [REPO, REPO / "harness_lab"]
    found = []
    for token in re.findall(r"`([\w./-]+(?:\.py|/))`", row):
        hit = next((b / token for b in reversed(bases) if (b / token).exists()), None)
        assert hit is not None, f"README table: `{token}` does not exist (row: {row[:80]}...)"
        found.append(hit.resolve())
        if token.endswith("/"):
            bases.append(hit)
    return found


def _where_rows() -> list[str]:
    return [line for line in _section("A short tour").splitlines() if line.startswith("| `")]


def test_every_path_the_module_table_names_exists() -> None:
    rows = _where_rows()
    assert len(rows) > 10
    assert all(_table_paths(row) for row in rows)


def test_every_public_module_and_package_of_harness_lab_is_in_the_module_table() -> None:
    named = {p for row in _where_rows() for p in _table_paths(row)}
    public = sorted(
        p.resolve() for p in (REPO / "harness_lab").iterdir()
        if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").is_file())
    )
    assert public
    assert [str(p.relative_to(REPO)) for p in public if p not in named] == []


def test_every_repository_path_the_readme_names_exists() -> None:
    tokens = re.findall(r"`((?:harness_lab|widgets|notebooks|tests|data|bench|\.ci)/[\w./-]*)`", DOCS)
    assert tokens
    assert [t for t in tokens if not (REPO / t).exists()] == []


def test_every_lesson_exists_with_the_parameters_the_table_names() -> None:
    rows = _table(_section("The lab"), "lesson (`notebooks/`)")
    assert len(rows) == len(list((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    for name, cells in rows.items():
        notebook = REPO / "notebooks" / (name.strip("`") + ".ipynb")
        assert notebook.is_file(), notebook
        cells_json = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        params = "".join(next("".join(c["source"]) for c in cells_json
                              if "parameters" in c.get("metadata", {}).get("tags", [])))
        for param in re.findall(r"`(\w+)`", cells["papermill parameters"]):
            assert re.search(rf"^{param}\s*=", params, re.M), f"{name}: no parameter {param}"


def _runtime_names() -> dict[str, Any]:
    names: dict[str, Any] = {}
    modules = ["harness_lab", *(m.name for m in pkgutil.walk_packages(harness_lab.__path__, "harness_lab.")
                                if not m.name.startswith(("harness_lab.widgets", "harness_lab.data")))]
    if importlib.util.find_spec("ipywidgets") is not None:  # the lab extra
        modules.append("harness_lab.widgets")
    for name in modules:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            names.setdefault(attr, getattr(module, attr))
    return names


def test_every_class_and_attribute_the_text_names_exists() -> None:
    # `Receipt.semantic`, `OpenAICompatConfig.timeout_s`, `Quotas.scratch_bytes`, `RepairPolicy()`, ...
    foreign = {"LocalCluster", "Authorization"}  # Dask's; an HTTP header
    names = _runtime_names()
    missing = []
    for cls, attr in re.findall(r"`([A-Z][a-z]\w*)(?:\.(\w+))?[(`]", _prose(DOCS)):
        if cls in foreign:
            continue
        obj = names.get(cls, getattr(builtins, cls, None))
        if obj is None:
            missing.append(cls)
        elif attr and not (hasattr(obj, attr) or attr in getattr(obj, "model_fields", {})):
            missing.append(f"{cls}.{attr}")
    assert missing == []
