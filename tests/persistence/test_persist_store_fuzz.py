"""Fuzzing the store reader: a valid store (a finished scripted run and one stopped after three steps)
has one or two of its rows mutated by Hypothesis (a JSON value replaced, deleted, given another type or a
new key; the text truncated; random text or bytes; a column of another type), and every reader (trace,
replay, resume, a fork, the CLI's ``main`` in-process) either works or fails with one line of the
project's error types: no other exception, no traceback, nothing written outside the run's workspaces.

The example budget is fixed (``derandomize``: the same examples every time) and small enough for a busy
2-core host: each example copies the store and both workspaces and runs every reader once (~0.15 s of CPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.errors import HarnessLabError
from harness_lab.persistence.replay import replay_run, saved_trace
from harness_lab.store import SQLiteStore

EXAMPLES = 40
HANG_S = 120  # an example is ~0.1 s: this only turns a hang into a failure instead of a stuck suite


class _Pristine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "pristine.sqlite"
        self.targets: list[tuple[str, int, str]] = []  # (table, rowid, column) of every cell the fuzzer edits
        self.hot: list[tuple[str, int, str]] = []  # what resume reads most: P1's last row and its spec


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> _Pristine:
    root = tmp_path_factory.mktemp("fuzzstore")
    p = _Pristine(root)
    store = SQLiteStore(root / "work.sqlite")
    done = push_run(root / "ws-R1", store, CountingOutbox(), run_id="R1")
    done.run()
    done.close()
    stopped = push_run(root / "ws-P1", store, CountingOutbox(), run_id="P1")
    for _ in range(3):
        stopped.step()
    stopped.close()
    store.close()
    _copy_db(root / "work.sqlite", p.db)
    for ws in ("ws-R1", "ws-P1"):
        shutil.copytree(root / ws, root / f"pristine-{ws}", symlinks=True)
    conn = sqlite3.connect(p.db)
    for table, columns in (("runs", ("spec", "created_at", "status")),
                           ("steps", ("record", "checkpoint", "context", "at", "step")),
                           ("effects", ("detail", "status", "step", "tool"))):
        for (rowid,) in conn.execute(f"SELECT rowid FROM {table}"):
            p.targets += [(table, rowid, column) for column in columns]
    (last,) = conn.execute("SELECT max(rowid) FROM steps").fetchone()  # P1 registered last: its step 3
    (spec,) = conn.execute("SELECT rowid FROM runs WHERE run_id = 'P1'").fetchone()
    p.hot = [("steps", last, "checkpoint"), ("steps", last, "context"), ("steps", last, "record"), ("runs", spec, "spec")]
    conn.close()
    return p


def _copy_db(src: Path, dst: Path) -> None:
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    a.backup(b)
    a.close()
    b.close()


# -- mutations ---------------------------------------------------------------------------------------
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


def _edit_json(data: st.DataObject, value: Any) -> Any:
    """``value`` with one node (drawn by walking down from the top) replaced, deleted, retyped or added to."""
    if isinstance(value, (dict, list)) and value and data.draw(st.booleans()):
        keys = list(value) if isinstance(value, dict) else list(range(len(value)))
        key = data.draw(st.sampled_from(keys))
        op = data.draw(st.sampled_from(["descend", "descend", "delete", "replace"]))
        if op == "delete":
            del value[key]
        elif op == "replace":
            value[key] = data.draw(_JSON)
        else:
            value[key] = _edit_json(data, value[key])
        return value
    op = data.draw(st.sampled_from(["replace", "retype", "add"]))
    if op == "add" and isinstance(value, dict):
        value[data.draw(st.text(max_size=10))] = data.draw(_JSON)
        return value
    if op == "retype":
        return {str: lambda v: len(v), int: str, float: str, bool: int, dict: lambda v: list(v.values()),
                list: lambda v: {str(i): x for i, x in enumerate(v)}}.get(type(value), lambda v: [v])(value)
    return data.draw(_JSON)


def _mutated(data: st.DataObject, old: Any) -> Any:
    how = data.draw(st.sampled_from(["json", "json", "json", "truncate", "text", "bytes", "type"]))
    if how == "json" and isinstance(old, str):
        try:
            parsed = json.loads(old)
        except ValueError:
            parsed = None
        if parsed is not None:
            compact = data.draw(st.booleans())  # compact keeps a checkpoint's row form recognisable
            return json.dumps(_edit_json(data, parsed), separators=(",", ":") if compact else None)
    if how == "truncate" and isinstance(old, str) and old:
        return old[:data.draw(st.integers(0, len(old) - 1))]
    if how == "text":
        return data.draw(st.text(max_size=40))
    if how == "bytes":
        return data.draw(st.binary(max_size=40))
    return data.draw(st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.just(b"{}")
                     | st.just("null"))


def _mutate(db: Path, data: st.DataObject, pristine: _Pristine) -> list[str]:
    done = []
    cells = st.sampled_from(pristine.hot) | st.sampled_from(pristine.targets)
    conn = sqlite3.connect(db)
    try:
        for table, rowid, column in data.draw(st.lists(cells, min_size=1, max_size=2)):
            (old,) = conn.execute(f"SELECT {column} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
            new = _mutated(data, old)
            if isinstance(new, float) and math.isnan(new):
                new = None
            try:
                conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (new, rowid))
            except sqlite3.IntegrityError:  # NOT NULL, a key taken: the file cannot hold it
                continue
            done.append(f"{table}.{column}@{rowid} = {new!r}"[:300])
        conn.commit()
    finally:
        conn.close()
    return done


# -- readers -----------------------------------------------------------------------------------------
def _one_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"


def _api_readers(db: Path, root: Path) -> None:
    store = SQLiteStore(db, create=False, read_only=True)
    try:
        for reader in (lambda: saved_trace(store, "R1"), lambda: saved_trace(store, "P1"),
                       lambda: replay_run(store, "R1").run.close()):
            try:
                reader()
            except HarnessLabError as exc:
                _one_line(exc)
    finally:
        store.close()
    store = SQLiteStore(db, create=False)
    try:
        try:
            run = Run.resume(store, "P1", effects=CountingOutbox())
        except HarnessLabError as exc:
            _one_line(exc)
            return
        try:
            if run.resume_report is not None and run.resume_report.ok:
                fork = run.fork("P1@3", new_run_id="F1", workspace=root / "fork")
                fork.close()
        except HarnessLabError as exc:
            _one_line(exc)
        finally:
            run.close()
    finally:
        store.close()


def _cli(args: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    text = err.getvalue()
    assert "Traceback" not in text, text
    assert code in (0, 1, 2), (code, text)
    if code == 2:
        assert text.count("\n") == 1 and text.startswith("harness-lab: error: "), text


@contextlib.contextmanager
def _no_hang(seconds: int) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise AssertionError(f"a reader hung on the mutated store (over {seconds} s)")

    previous: Callable[..., Any] | int | None = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_reader_of_a_mutated_store_works_or_fails_with_one_line(pristine: _Pristine, data: st.DataObject) -> None:
    root = pristine.root
    db = root / "example.sqlite"
    for leftover in (db, root / "fork", *(root / ws for ws in ("ws-R1", "ws-P1"))):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
    for suffix in ("-wal", "-shm"):
        (root / f"example.sqlite{suffix}").unlink(missing_ok=True)
    _copy_db(pristine.db, db)
    for ws in ("ws-R1", "ws-P1"):
        shutil.copytree(root / f"pristine-{ws}", root / ws, symlinks=True)
    before = sorted(p.name for p in root.iterdir())
    edits = _mutate(db, data, pristine)
    with _no_hang(HANG_S):
        _api_readers(db, root)
        for command, run_id in (("trace", "R1"), ("trace", "P1"), ("replay", "R1"), ("resume", "P1")):
            _cli([command, "--db", str(db), "--run-id", run_id])
    made = sorted(set(p.name for p in root.iterdir()) - set(before) - {"fork", "example.sqlite-wal",
                                                                          "example.sqlite-shm"})
    assert made == [], (edits, made)
