"""Convergence as seed 003 means it: the same kind and target with the same or near-same arguments
three times in a row gets the hint, then the stop; different files, ids, folders and commands are
progress (issue 16, item 8: writing src/main.py, src/util.py, src/cli.py in a row was "repeated the
same call 3 times", and a fourth, different read ended the run BLOCKED no_progress)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loophelpers import READ_A, READ_B, READ_C, READ_D, contract, make_run

from harness_lab.clock import FakeClock
from harness_lab.contract import Budget
from harness_lab.loop.gates import LoopGates, _call, _call_of_text, _similar, text_similarity
from harness_lab.records.proposal import parse_proposal
from harness_lab.records.states import RunState

HEADER = '"""A module of the small task."""\n\nfrom __future__ import annotations\n\nimport sys\n\n'


def _write(path: str, content: str) -> dict[str, Any]:
    return {"kind": "write_file", "path": path, "content": content}


def _read(path: str) -> dict[str, Any]:
    return {"kind": "read_file", "path": path}


def _ls(path: str) -> dict[str, Any]:
    return {"kind": "list_dir", "path": path}


def _cmd(*argv: str) -> dict[str, Any]:
    return {"kind": "run_command", "argv": list(argv)}


# A small coding task as a model drives it: files that share their boilerplate, read back, folders
# listed, different commands, evidence read; several calls of one kind in a row, never the same target.
MULTI_FILE_TASK = [
    _write("src/main.py", HEADER + "from util import greet\n\nprint(greet(sys.argv[1:]))\n"),
    _write("src/util.py", HEADER + "def greet(names):\n    return 'hello ' + ', '.join(names)\n"),
    _write("src/cli.py", HEADER + "def main():\n    print(sys.argv)\n"),
    _read("src/main.py"),
    _read("src/util.py"),
    _read("src/cli.py"),
    _ls("."),
    _ls("src"),
    _write("tests/test_a.py", HEADER + "def test_a():\n    assert True\n"),
    _write("tests/test_b.py", HEADER + "def test_b():\n    assert True\n"),
    _write("tests/test_c.py", HEADER + "def test_c():\n    assert True\n"),
    _ls("tests"),
    _cmd("python3", "src/main.py", "ada"),
    _cmd("python3", "src/main.py", "grace"),
    _cmd("python3", "-c", "import sys; print(sys.version_info[0])"),
    _cmd("ls", "src"),
    READ_A, READ_B, READ_C, READ_D,
]


def test_a_multi_file_task_is_never_refused(tmp_path: Path) -> None:
    n = len(MULTI_FILE_TASK)
    run = make_run(tmp_path, MULTI_FILE_TASK, then="finish", contract_=contract(max_decisions=n + 1, max_tool_calls=n))
    records = [run.step() for _ in range(n)]
    refused = [(r.step, r.decision.verdict, r.decision.reason) for r in records if r.decision.verdict != "execute"]
    assert refused == [], "different files, folders, commands and ids are progress"
    assert run.state is RunState.RUNNING and run.usage.tool_calls == n
    assert (run.workspace / "src" / "cli.py").is_file() and (run.workspace / "tests" / "test_c.py").is_file()
    assert "hello ada" in records[12].tool_result.content  # type: ignore[union-attr]  # the commands ran


def test_the_issues_sequence_three_writes_and_a_read_goes_on(tmp_path: Path) -> None:
    script = [_write("src/main.py", "x = 1\n"), _write("src/util.py", "x = 1\n"), _write("src/cli.py", "x = 1\n"),
              _read("src/main.py")]
    run = make_run(tmp_path, script, then="finish")
    assert [run.step().decision.verdict for _ in range(4)] == ["execute"] * 4
    assert run.state is RunState.RUNNING


@pytest.mark.parametrize("call", [
    _write("notes.md", "the same body\n"), _read("notes.md"), _ls("."), _cmd("ls", "-a"), READ_A,
    {"kind": "think", "thought": "try the same thing"}, {"kind": "write_report", "text": "# Report\n"},
], ids=lambda c: c["kind"])
def test_identical_repeats_are_hinted_then_stopped(tmp_path: Path, call: dict[str, Any]) -> None:
    run = make_run(tmp_path, [call])  # repeats the call forever
    records = [run.step() for _ in range(4)]
    assert [r.decision.verdict for r in records] == ["execute", "execute", "refuse", "block"]
    assert records[2].decision.reason == "repeated the same call 3 times; change approach"
    assert run.state is RunState.BLOCKED and run.stop_reason is not None and run.stop_reason.code == "no_progress"
    assert run.usage.tool_calls == 2


_LONG = "".join(f"line {i}: the harness decides, the model only proposes\n" for i in range(120))  # ~6.5 KB


@pytest.mark.parametrize("body", ["a long and stable note body, version ", _LONG], ids=["short", "6KB"])
def test_the_same_path_with_content_differing_by_a_character_is_near_identical(tmp_path: Path, body: str) -> None:
    middle = len(body) // 2
    versions = [body[:middle] + ch + body[middle + 1:] for ch in "xyzw"]
    paths = ["notes.md", "./notes.md", "notes.md", "sub/../notes.md"]  # one file, spelled four ways
    run = make_run(tmp_path, [_write(p, v) for p, v in zip(paths, versions, strict=True)])
    assert [run.step().decision.verdict for _ in range(4)] == ["execute", "execute", "refuse", "block"]
    assert run.stop_reason is not None and run.stop_reason.code == "no_progress"


def test_a_rewrite_with_different_content_is_progress(tmp_path: Path) -> None:
    drafts = [_write("draft.md", f"# Draft {n}\n\n" + f"paragraph {n} " * (5 + 7 * n)) for n in range(4)]
    run = make_run(tmp_path, drafts, then="finish")
    assert [run.step().decision.verdict for _ in range(4)] == ["execute"] * 4


def test_the_result_does_not_count(tmp_path: Path) -> None:
    # three empty folders list alike (the same result), but each call lists another folder
    run = make_run(tmp_path, [_ls(d) for d in ("a", "b", "c")], then="finish")
    for d in ("a", "b", "c"):
        (run.workspace / d).mkdir(parents=True)
    records = [run.step() for _ in range(3)]
    assert len({r.tool_result.content for r in records if r.tool_result is not None}) == 1
    assert [r.decision.verdict for r in records] == ["execute"] * 3


def _gates(limit: int = 3) -> LoopGates:
    gates = LoopGates(Budget(), FakeClock())
    gates.repeat_limit = limit
    return gates


def _verdicts(gates: LoopGates, raws: list[dict[str, Any]]) -> list[str]:
    return [gates.convergence(parse_proposal(raw), n) for n, raw in enumerate(raws, start=1)]


def test_what_counts_as_the_same_target_and_the_same_arguments() -> None:
    ref = {"kind": "read_ref", "ref": "out-1"}
    pages = [dict(ref, start=s, end=s + 100) for s in (0, 100, 200, 300)]
    assert _verdicts(_gates(), pages) == ["ok"] * 4, "another page of a stored output is progress"
    assert _verdicts(_gates(), [dict(ref, start=0, end=100)] * 3) == ["ok", "ok", "hint"]
    timeouts = [{"kind": "run_command", "argv": ["make", "test"], "timeout": t} for t in (10, 30, 60)]
    assert _verdicts(_gates(), timeouts) == ["ok"] * 3, "a number is the same only when equal"
    pushes = [{"kind": "push", "args": {"remote": "origin", "branch": b}} for b in ("main", "dev", "release")]
    assert _verdicts(_gates(), pushes) == ["ok"] * 3
    messages = [{"kind": "send_message", "to": "team", "text": f"the nightly build {n} failed again"} for n in (1, 2, 3)]
    assert _verdicts(_gates(), messages) == ["ok", "ok", "hint"], "an external effect's text compares by similarity"
    kinds = [_read("a.md"), _write("a.md", "x"), _read("a.md")]
    assert _verdicts(_gates(), kinds) == ["ok"] * 3
    argv = [_cmd("pytest", "tests/test_a.py"), _cmd("pytest", "tests/test_b.py"), _cmd("pytest", "tests/test_c.py")]
    assert _verdicts(_gates(), argv) == ["ok"] * 3, "the argv is the target: a different command is progress"


def test_a_streak_survives_a_checkpoint_of_the_gates() -> None:
    near = [_write("./notes.md", HEADER + "v1"), _write("notes.md", HEADER + "v2"), _write("notes.md", HEADER + "v3")]
    gates = _gates()
    assert _verdicts(gates, near[:2]) == ["ok", "ok"]
    state = gates.state()
    assert state["recent"] == [parse_proposal(raw).canonical for raw in near[:2]]  # what checkpoints keep
    again = _gates()
    again.restore(state)
    assert again.convergence(parse_proposal(near[2]), 3) == "hint"


_ARGS = st.one_of(st.text(max_size=12), st.integers(), st.none(), st.booleans(), st.floats(allow_nan=False),
                  st.lists(st.text(max_size=4), max_size=3), st.dictionaries(st.text(max_size=4), st.text(max_size=4),
                                                                           max_size=2))
_RAWS = st.one_of(
    st.builds(lambda p, c: _write(p, c), st.text(min_size=1, max_size=12), st.text(max_size=20)),
    st.builds(_read, st.text(min_size=1, max_size=12)),
    st.builds(_ls, st.text(min_size=1, max_size=12)),
    st.builds(lambda a, t: {"kind": "run_command", "argv": a, "timeout": t},
              st.lists(st.text(max_size=6), min_size=1, max_size=3), st.one_of(st.none(), st.integers(1, 9))),
    st.builds(lambda r, s: {"kind": "read_ref", "ref": r, "start": s}, st.text(min_size=1, max_size=6),
              st.integers(0, 99)),
    st.builds(lambda t: {"kind": "think", "thought": t}, st.text(min_size=1, max_size=20)),
    st.builds(lambda k, a: {"kind": k, "args": a}, st.sampled_from(["push", "send_message"]),
              st.dictionaries(st.text(max_size=5), _ARGS, max_size=3)),
)


@settings(max_examples=400, deadline=None)
@given(_RAWS)
def test_a_call_splits_alike_live_and_from_its_kept_fingerprint(raw: dict[str, Any]) -> None:
    """After a resume or rollback the gates compare calls parsed back from the checkpoint's JSON:
    they must split exactly as the live proposal did, or a streak would change across a restore."""
    proposal = parse_proposal(raw)
    if proposal.action is None:
        return
    assert _call_of_text(proposal.canonical) == _call(proposal.action_json)


_LINES = st.lists(st.sampled_from(["alpha\n", "beta\n", "return x\n", "\n", "    pass\n", "# note\n", "x = 1\n"]),
                  max_size=80).map("".join)
_TEXTS = st.one_of(st.text(alphabet="abc de\n", max_size=60), _LINES)


@settings(max_examples=500, deadline=None)
@given(_TEXTS, _TEXTS, st.sampled_from([0.5, 0.8, 0.9, 0.95]))
def test_the_similarity_shortcuts_never_change_a_verdict(a: str, b: str, threshold: float) -> None:
    """Bounds decide most pairs without a diff (lengths, the common ends, the characters the middles
    share) and short pairs' verdicts are cached: every verdict is still the definition's."""
    for _ in range(2):  # the second round reads the cache
        assert _similar(a, b, threshold) is (text_similarity(a, b) >= threshold)


def test_similarity_of_long_texts_is_by_line_and_fast() -> None:
    import time

    a = _LONG * 4  # 26 KB
    one = a[:13000] + "#" + a[13001:]
    other = "".join(f"row {i}: something else entirely\n" for i in range(800))
    start = time.perf_counter()
    assert text_similarity(a, one) > 0.999
    assert text_similarity(a, other) < 0.5
    assert _similar(a, one, 0.9) and not _similar(a, other, 0.9)
    assert time.perf_counter() - start < 1.0  # a character diff of these takes minutes
    # scattered one-character edits in many lines still leave most lines matching
    edited = "".join(line.replace("model", "modal") if i % 10 == 0 else line
                     for i, line in enumerate(a.splitlines(keepends=True)))
    assert 0.85 < text_similarity(a, edited) < 0.95
