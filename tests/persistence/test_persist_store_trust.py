"""A store is untrusted input: an edited spec, a step or checkpoint row of the wrong shape, or a ledger
entry out of form is one line naming the run and what is wrong (StoreError; the CLI exits 2), and
resume acts on none of it: no write, no chown, in the recorded workspace or any other folder."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.errors import StoreError
from harness_lab.persistence.heartbeat import Watchdog
from harness_lab.persistence.replay import replay_run, saved_trace
from harness_lab.store import Heartbeat, SQLiteStore

PWN = {"kind": "write_file", "path": "pwned.txt", "content": "written by a resume told to work here"}


def _stored_run(tmp_path: Path, steps: int = 3) -> Path:
    """A run of ``steps`` steps (read, read, write a note) checkpointed in a store, not finished."""
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    for _ in range(steps):
        run.step()
    run.close()
    store.close()
    return db


def _sql(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def _spec(db: Path) -> dict[str, Any]:
    return dict(json.loads(_sql(db, "SELECT spec FROM runs WHERE run_id = 'R1'")[0][0]))


def _set_spec(db: Path, spec: object) -> None:
    _sql(db, "UPDATE runs SET spec = ? WHERE run_id = 'R1'", (spec if isinstance(spec, str) else json.dumps(spec),))


def _checkpoints(db: Path) -> list[tuple[int, dict[str, Any]]]:
    return [(rowid, json.loads(text)) for rowid, text in _sql(db, "SELECT rowid, checkpoint FROM steps ORDER BY rowid")]


def _set_checkpoint(db: Path, rowid: int, data: dict[str, Any]) -> None:
    # compact, as the checkpointer writes it (the row form is recognised by its exact first bytes)
    _sql(db, "UPDATE steps SET checkpoint = ? WHERE rowid = ?", (json.dumps(data, separators=(",", ":")), rowid))


def _rowid(db: Path, step: int) -> int:
    """The rowid of R1's row of ``step`` (the only run: its rows in step order)."""
    return int(_sql(db, "SELECT rowid FROM steps ORDER BY rowid LIMIT 1 OFFSET ?", (step,))[0][0])


def _tree(folder: Path) -> list[tuple[str, int, int, int]]:
    """Names, modes and owners of a folder and everything in it: what a write or a chown would change."""
    out = []
    for path in sorted([folder, *folder.rglob("*")]):
        st = path.lstat()
        out.append((str(path.relative_to(folder)), st.st_mode, st.st_uid, st.st_gid))
    return out


def _resume_and_drive(db: Path) -> str | None:
    """Resume R1 and drive it a few steps (what `harness-lab resume` does); the refusal's line, or None."""
    store = SQLiteStore(db, create=False)
    try:
        run = Run.resume(store, "R1", effects=CountingOutbox())
        try:
            if run.resume_report is not None and not run.resume_report.ok:
                return run.resume_report.summary()
            run.run(max_steps=3)
        finally:
            run.close()
    except StoreError as exc:
        return str(exc)
    finally:
        store.close()
    return None


def _attack(tmp_path: Path, victim: Path, *, unbind: bool) -> Path:
    """The issue's attack on a stored run: its spec's workspace and script edited, every workspace hash
    nulled (``unbind``: the first row's spec binding removed too)."""
    db = _stored_run(tmp_path)
    spec = _spec(db)
    spec["workspace"], spec["proposer"]["actions"] = str(victim), [PWN] * 5
    _set_spec(db, spec)
    for rowid, data in _checkpoints(db):
        for key in ("workspace_hash", *(("spec_sha256", "workspace") if unbind else ())):
            data.pop(key, None)
        _set_checkpoint(db, rowid, data)
    return db


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    folder = tmp_path / "victim"
    folder.mkdir(mode=0o700)
    (folder / "keep.txt").write_text("someone else's file")
    return folder


def test_the_issues_attack_an_edited_workspace_and_script_with_the_hash_nulled_touches_no_folder(
        tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _attack(tmp_path, victim, unbind=False)
    before, ws_before = _tree(victim), _tree(tmp_path / "ws")
    refused = _resume_and_drive(db)
    assert _tree(victim) == before, "resume wrote into (or chowned) a folder the run never recorded"
    assert _tree(tmp_path / "ws") == ws_before
    assert refused is not None and f"names the workspace {str(victim)!r}" in refused and "R1" in refused
    assert main(["resume", "--db", str(db), "--run-id", "R1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness-lab: error: run 'R1': its stored spec names the workspace")
    assert _tree(victim) == before


def test_a_missing_workspace_hash_is_a_refusal_even_when_the_spec_and_its_binding_agree(
        tmp_path: Path, victim: Path) -> None:
    # The attacker also strips the first row's binding (as if an older harness-lab had registered the run):
    # the workspace hash is what is left, and a checkpoint without one proves nothing about the folder.
    db = _attack(tmp_path, victim, unbind=True)
    before = _tree(victim)
    refused = _resume_and_drive(db)
    assert _tree(victim) == before
    assert refused is not None and "recorded no workspace hash" in refused


def test_a_spec_edited_alone_is_refused_by_its_binding(tmp_path: Path) -> None:
    db = _stored_run(tmp_path)
    spec = _spec(db)
    spec["proposer"]["actions"] = [PWN] * 5  # the workspace as recorded, another script
    _set_spec(db, spec)
    refused = _resume_and_drive(db)
    assert not (tmp_path / "ws" / "pwned.txt").exists()
    assert refused is not None and "its stored spec is not the one the run registered" in refused


def _edit_spec(edit: str) -> Any:
    def apply(spec: dict[str, Any]) -> object:
        if edit == "validation":
            spec["validation"] = "yes"
        elif edit == "unknown":
            spec["run_as"] = "root"
        elif edit == "contract":
            spec["contract"]["goal"] = 5
        elif edit == "actions":
            spec["proposer"]["actions"] = "write pwned.txt"
        elif edit == "no_actions":
            spec["proposer"]["actions"] = []
        elif edit == "relative":
            spec["workspace"] = "ws"
        elif edit == "list":
            return [spec]
        elif edit == "text":
            return "{not json"
        return spec
    return apply


@pytest.mark.parametrize(("edit", "says"), [
    ("validation", "field validation: Input should be a valid boolean"),
    ("unknown", "field run_as: Extra inputs are not permitted"),
    ("contract", "field contract.goal"),
    ("actions", "field proposer.actions"),
    ("no_actions", "a scripted proposer needs a non-empty list of actions"),
    ("relative", "workspace 'ws' is not an absolute path"),
    ("list", "its stored spec is not a JSON object (list)"),
    ("text", "its stored spec is unreadable"),
])
def test_a_tampered_spec_is_one_line_naming_the_run_and_the_field_for_every_reader(
        tmp_path: Path, edit: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_run(tmp_path)
    _set_spec(db, _edit_spec(edit)(_spec(db)))
    ws_before = _tree(tmp_path / "ws")
    store = SQLiteStore(db, create=False)
    for read in (lambda: Run.resume(store, "R1", effects=CountingOutbox()), lambda: replay_run(store, "R1")):
        with pytest.raises(StoreError, match="R1") as caught:
            read()
        assert says in str(caught.value) and "\n" not in str(caught.value)
    store.close()
    for command in ("resume", "replay"):
        assert main([command, "--db", str(db), "--run-id", "R1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "R1" in err and says in err, err
    assert _tree(tmp_path / "ws") == ws_before


# -- rows of the wrong shape -------------------------------------------------------------------------
_RECORDS = {
    "a list": "[]",
    "not JSON": "{\"step\": 2, ",
    "a key missing": '{"step":2}',
    "a string where a number goes": None,  # built from the stored row below
    "events not a list": None,
}


def _bad_record(db: Path, shape: str) -> str:
    text = _RECORDS[shape]
    if text is not None:
        return text
    record = json.loads(_sql(db, "SELECT record FROM steps WHERE rowid = ?", (_rowid(db, 2),))[0][0])
    if shape == "events not a list":
        record["events"] = "abc"
    else:
        record["usage"] = {"decisions": "two"}
    return json.dumps(record)


@pytest.mark.parametrize("shape", list(_RECORDS))
def test_trace_and_replay_of_a_step_row_of_the_wrong_shape_name_the_run_and_the_step(
        tmp_path: Path, shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_run(tmp_path)
    _sql(db, "UPDATE steps SET record = ? WHERE rowid = ?", (_bad_record(db, shape), _rowid(db, 2)))
    store = SQLiteStore(db, create=False)
    with pytest.raises(StoreError, match=r"^the step record of R1@2 is unreadable: \S"):
        saved_trace(store, "R1")
    store.close()
    for command in ("trace", "replay"):
        assert main([command, "--db", str(db), "--run-id", "R1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("harness-lab: error: the step record of R1@2 is unreadable"), err


@pytest.mark.parametrize("shape", ["a list", "run_state a list", "the state unknown", "not JSON"])
def test_resume_and_fork_from_a_checkpoint_row_of_the_wrong_shape_name_it(
        tmp_path: Path, shape: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_run(tmp_path)
    rowid, data = _checkpoints(db)[-1]  # step 3's: the one resume reads
    text = {"a list": "[]", "not JSON": '{"kind":"row_checkpoint",'}.get(shape)
    if text is None:
        if shape == "run_state a list":
            data["run_state"] = [1, 2]
        else:
            data["state"] = "SLEEPING"
        text = json.dumps(data, separators=(",", ":"))
    _sql(db, "UPDATE steps SET checkpoint = ? WHERE rowid = ?", (text, rowid))
    ws_before = _tree(tmp_path / "ws")
    assert main(["resume", "--db", str(db), "--run-id", "R1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness-lab: error: checkpoint R1@3 is unreadable: "), err
    store = SQLiteStore(db, create=False)
    # A fork reads the checkpoint row the same way (from a run of the same store and contract).
    run = push_run(tmp_path / "ws2", store, CountingOutbox(), run_id="R2")
    with pytest.raises(StoreError, match=r"^checkpoint R1@3 is unreadable: "):
        run.fork("R1@3", new_run_id="F1", workspace=tmp_path / "fork")
    assert not store.has_run("F1") and not (tmp_path / "fork").exists()
    run.close()
    store.close()
    assert _tree(tmp_path / "ws") == ws_before


@pytest.mark.parametrize(("column", "value"), [("record", b"\xff{}"), ("checkpoint", b"{}"), ("at", "yesterday")])
def test_a_step_row_column_of_the_wrong_type_is_one_line(tmp_path: Path, column: str, value: object,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_run(tmp_path)
    _sql(db, f"UPDATE steps SET {column} = ? WHERE rowid = ?", (value, _rowid(db, 3)))
    for command in ("trace", "resume"):
        assert main([command, "--db", str(db), "--run-id", "R1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "the row of run 'R1' step 3 is unreadable" in err, err


def test_a_ledger_entry_out_of_form_is_one_line_and_resume_acts_on_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_run(tmp_path, steps=2)
    # An intent for step 3 (what a kill mid-write leaves), its detail edited to a list where an object goes.
    _sql(db, "INSERT INTO effects (key, run_id, step, tool, status, detail) VALUES (?, ?, ?, ?, ?, ?)",
         ("R1:3", "R1", 3, "write_file", "intent", json.dumps({"path": "notes/plan.txt", "pre": ["x"]})))
    ws_before = _tree(tmp_path / "ws")
    assert main(["resume", "--db", str(db), "--run-id", "R1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the ledger entry 'R1:3' of step 3 is unreadable" in err, err
    _sql(db, "UPDATE effects SET detail = ?", ("not json",))
    assert main(["resume", "--db", str(db), "--run-id", "R1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the ledger entry 'R1:3' of run 'R1' is unreadable" in err, err
    assert _tree(tmp_path / "ws") == ws_before


def test_the_watchdog_names_a_last_checkpoint_row_of_the_wrong_shape(tmp_path: Path) -> None:
    db = _stored_run(tmp_path)
    rowid, data = _checkpoints(db)[-1]
    data["state"] = "SLEEPING"
    _set_checkpoint(db, rowid, data)
    store = SQLiteStore(db, create=False)
    store.beat(Heartbeat("R1", at=time.time(), step=3, progress_at=time.time(), pid=os.getpid(), doing="step 4"))
    try:  # a plain ValueError from the row's reading before
        with pytest.raises(StoreError, match=r"^checkpoint R1@3 is unreadable: "):
            Watchdog(store, timeout_s=90).check("R1", now=time.time() + 1000)
    finally:
        store.close()
