"""Review fixes: fork ids without a store, the resume summary's words, a failed `run --db` and a
read-only `trace`/`replay` leaving no file behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.store import SQLiteStore


def test_forks_of_a_run_without_a_store_get_distinct_ids(tmp_path: Path) -> None:
    run = push_run(tmp_path / "ws", None, CountingOutbox())
    run.run(max_steps=3)
    snap = run.sandbox.snapshot(label="here")
    forks = [run.fork(snap.id, workspace=tmp_path / f"f{n}") for n in range(3)]
    assert [f.run_id for f in forks] == ["R1-fork1", "R1-fork2", "R1-fork3"]
    again = forks[0].fork(forks[0].sandbox.snapshot(label="there").id, workspace=tmp_path / "ff")
    assert again.run_id == "R1-fork1-fork1"  # a fork counts its own forks
    for r in (*forks, again, run):
        r.close()


def test_forks_with_a_store_take_the_first_id_not_in_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=3)
    first = run.fork("R1@3", workspace=tmp_path / "f1")
    second = run.fork("R1@3", new_run_id="R1-fork2", workspace=tmp_path / "f2")
    third = run.fork("R1@3", workspace=tmp_path / "f3")
    assert (first.run_id, third.run_id) == ("R1-fork1", "R1-fork3")
    for r in (first, second, third, run):
        r.close()
    store.close()


def test_run_with_a_bad_scenario_makes_no_store_and_leaves_an_existing_one_as_it_was(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: [unclosed\n", encoding="utf-8")
    new = tmp_path / "new" / "runs.sqlite"
    new.parent.mkdir()
    for scenario in (str(bad), "no_such_scenario"):
        assert main(["run", scenario, "--db", str(new)]) == 2
        assert list(new.parent.iterdir()) == []
    old = tmp_path / "old.sqlite"
    store = SQLiteStore(old)
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=2)
    run.close()
    store.close()
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("old.sqlite")}
    assert main(["run", str(bad), "--db", str(old)]) == 2
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("old.sqlite")} == files
    assert "error:" in capsys.readouterr().err


def _stopped_after(tmp_path: Path, steps: int) -> SQLiteStore:
    tmp_path.mkdir(exist_ok=True)
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run(max_steps=steps)
    run.close()
    return store


def _resume_summary(store: SQLiteStore) -> tuple[bool, str]:
    with Run.resume(store, "R1", effects=CountingOutbox()) as run:
        assert run.resume_report is not None
        return run.resume_report.ok, run.resume_report.summary()


def test_the_resume_summary_says_when_the_pending_report_is_not_written_yet(tmp_path: Path) -> None:
    store = _stopped_after(tmp_path, 2)  # two reads: no report yet
    summary = _resume_summary(store)[1]
    assert ("evidence ['acceptance-snapshot', 'harness-boundary']; pending: an accepted report.md (not written yet);"
            in summary)
    store.close()
    store = _stopped_after(tmp_path / "later", 5)  # the report is written at step 5, accepted at the finish
    summary = _resume_summary(store)[1]
    assert "pending: an accepted report.md;" in summary and "not written" not in summary
    store.close()


def test_a_concurrent_change_names_an_empty_workspace_in_words(tmp_path: Path) -> None:
    store = _stopped_after(tmp_path, 1)  # a read: the checkpoint's workspace is empty
    (tmp_path / "ws" / "stray.txt").write_text("outside write", encoding="utf-8")
    ok, summary = _resume_summary(store)
    assert not ok and "the checkpoint of step 1 recorded that of an empty workspace" in summary
    assert "000000000000" not in summary
    store.close()


def test_trace_and_replay_leave_the_stores_folder_as_they_found_it(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    store = SQLiteStore(folder / "runs.sqlite")
    run = push_run(tmp_path / "ws", store, CountingOutbox())
    run.run()
    run.close()
    store.close()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert list(before) == ["runs.sqlite"]
    for command in ("trace", "replay"):
        assert main([command, "--db", str(folder / "runs.sqlite"), "--run-id", "R1"]) == 0
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    reader = SQLiteStore(folder / "runs.sqlite", read_only=True)
    other = SQLiteStore(folder / "runs.sqlite", read_only=True)
    reader.close()  # not the last: the side files stay while the other reads
    assert sorted(p.name for p in folder.iterdir()) == ["runs.sqlite", "runs.sqlite-shm", "runs.sqlite-wal"]
    assert other.run_ids() == ["R1"]
    other.close()  # it did not make them (they were there when it opened): it leaves them
    assert sorted(p.name for p in folder.iterdir()) == ["runs.sqlite", "runs.sqlite-shm", "runs.sqlite-wal"]
    for side in ("runs.sqlite-shm", "runs.sqlite-wal"):
        (folder / side).unlink()
    reader = SQLiteStore(folder / "runs.sqlite", read_only=True)
    writer = SQLiteStore(folder / "runs.sqlite")  # a writer starts while it reads: its log is not taken away
    second = push_run(tmp_path / "ws2", writer, CountingOutbox(), run_id="R2")
    reader.close()
    second.run(max_steps=2)
    assert reader.path.with_name("runs.sqlite-wal").exists() and writer.last_step("R2") is not None
    second.close()
    writer.close()
    reader = SQLiteStore(folder / "runs.sqlite", read_only=True)
    assert reader.run_ids() == ["R1", "R2"]
    reader.close()
