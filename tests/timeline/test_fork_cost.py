"""What a fork from a step and `at(n)` do not do again (issue 20): read back the files just written from the
store, hash the contract a second time, read rows that cannot have changed. Counted, not timed."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from harness_lab import Run
from harness_lab.context import Layer
from harness_lab.errors import RunStateError
from harness_lab.loop.approval import AutoApprove
from harness_lab.proposers import FunctionProposer
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.scan import Scanner
from harness_lab.store import SQLiteStore, StepFiles
from harness_lab.timeline.files import files_at
from tests.loop.loophelpers import contract, evidence, make_run

READS = ("harness-boundary", "acceptance-snapshot", "budget-gates")


def _writing(tmp_path: Path) -> tuple[Run, SQLiteStore]:
    """Three files written by step 4, one of them overwritten at step 5: forks from step 4 take the store's files."""
    store = SQLiteStore(tmp_path / "runs.db")
    base = contract()
    gate = base.human_gate.model_copy(update={"required_for": ()})
    run = make_run(tmp_path, [{"kind": "write_file", "path": "a.md", "content": "alpha\n"},
                              {"kind": "write_file", "path": "notes/b.md", "content": "beta\n"},
                              {"kind": "write_file", "path": "notes/c.md", "content": "gamma\n"},
                              {"kind": "think", "thought": "next"},
                              {"kind": "write_file", "path": "a.md", "content": "alpha, again\n"}],
                   then="repeat_last", contract_=base.model_copy(update={"human_gate": gate}), store=store,
                   approver=AutoApprove())
    run.run(max_steps=5)
    assert run.step_no == 5 and {"a.md", "notes/b.md", "notes/c.md"} <= set(run.at(4).files)
    return run, store


def _reads_back(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the files a sandbox reads back into its blob store from now on."""
    read_back: list[int] = []
    put_fd = BlobStore.put_fd

    def counting(self: BlobStore, fd: int, size_hint: int) -> str:
        read_back.append(size_hint)
        return put_fd(self, fd, size_hint)

    monkeypatch.setattr(BlobStore, "put_fd", counting)
    return read_back


def test_a_fork_from_a_step_does_not_read_back_the_files_it_wrote(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run, store = _writing(tmp_path)
    read_back = _reads_back(monkeypatch)
    fork = run.fork(at_step=4, budget="fresh", workspace=tmp_path / "fork")
    assert read_back == []  # the first row's scan took the hashes the fork wrote the files with
    files = {p: e[1] for p, e in fork.sandbox.manifest().items() if e[0] == "f"}
    assert files == run.at(4).files == fork.at(4).files
    # A later full walk proves them (written within a clock tick of the first scan: racily clean).
    fork.sandbox.workspace_hash(rescan=True)
    assert len(read_back) == len(run.at(4).files)
    fork.close()
    run.close()
    store.close()


def test_a_fork_refuses_stored_bytes_that_are_not_their_sha256(tmp_path: Path) -> None:
    run, store = _writing(tmp_path)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE files SET data = CAST('edited' AS BLOB)")
    with pytest.raises(RunStateError, match=r"\.md are not those of its sha256 .* edited or damaged store"):
        run.fork(at_step=4, budget="fresh", workspace=tmp_path / "fork")
    assert not (tmp_path / "fork").exists()  # nothing half-written
    run.close()
    store.close()


def test_a_primed_hash_serves_one_walk_and_a_changed_file_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_bytes(b"alpha")
    (root / "b.txt").write_bytes(b"beta")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    scanner = Scanner(fd, BlobStore(str(tmp_path / "blobs")))
    # A wrong hash, primed: the walk takes it for a.txt (stat key unchanged), so it was not read.
    scanner.prime("a.txt", os.stat(root / "a.txt"), "f" * 64, 0)
    scanner.prime("b.txt", os.stat(root / "b.txt"), "e" * 64, 0)
    (root / "b.txt").write_bytes(b"beta, longer")  # its key moved: read again
    first = scanner.scan(full=True)
    assert first["a.txt"][1] == "f" * 64 and first["b.txt"][1] != "e" * 64
    assert scanner.hashed_last == 1
    scanner.close()
    os.close(fd)


def test_the_contract_version_is_hashed_once_per_contract_object(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    run, store = _writing(tmp_path)
    import harness_lab.contract as contract_module

    dumps: list[str] = []
    canonical = contract_module.canonical_json

    def counting(data: object) -> str:
        dumps.append("x")
        return canonical(data)

    monkeypatch.setattr(contract_module, "canonical_json", counting)
    fork = run.fork(at_step=4, budget="fresh", workspace=tmp_path / "fork")
    assert dumps == []  # the source's run hashed it when it registered
    changed = run.contract.with_budget(max_decisions=99)
    assert changed.version != run.contract.version  # a changed copy does not carry the cached version
    assert len(dumps) == 1
    fork.close()
    run.close()
    store.close()


def _alternating(tmp_path: Path, decisions: int) -> tuple[Run, SQLiteStore, Callable[[object], dict[str, str]]]:
    """A run thinking and reading in turn (no stop rule fires), its store and its proposer's function."""
    steps = count()

    def propose(view: object) -> dict[str, str]:
        i = next(steps)
        return {"kind": "read_evidence", "id": READS[i % 3]} if i % 2 else {"kind": "think", "thought": f"plan {i}"}

    store = SQLiteStore(tmp_path / "runs.db")
    run = Run(contract=contract(max_decisions=decisions, max_tool_calls=decisions, max_tokens=None),
              evidence=evidence(), proposer=FunctionProposer(propose), workspace=tmp_path / "ws", store=store,
              run_id="long")
    return run, store, propose


def test_a_resumed_or_forked_run_does_not_pack_the_trace_its_store_holds(tmp_path: Path) -> None:
    run, store, propose = _alternating(tmp_path, 10**6)
    run.run(max_steps=3)
    run.close()
    resumed = Run.resume(store, "long", proposer=FunctionProposer(propose))
    resumed.run(max_steps=400)
    fork = resumed.fork(at_step=2, budget="fresh", workspace=tmp_path / "fork")
    fork.run(max_steps=400)
    # More than a packing log holds unpacked (records: 16 kept + a batch of 32; events: 32 + 64)
    assert resumed.step_no == 403 and fork.step_no == 402 and len(fork.records) > 48 and len(fork.events) > 96
    for log in (resumed.records, resumed.events, fork.records, fork.events):
        assert log.packed == 0  # a store's window of the trace, held as it is (was: 64 records, 256 events)
    fork.close()
    resumed.close()
    store.close()


def test_at_n_reads_the_first_and_last_rows_of_a_live_run_no_more(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run, store = _writing(tmp_path)
    fork = run.fork(at_step=4, budget="fresh", workspace=tmp_path / "fork")
    fork.run(max_steps=2)
    assert fork.at(2).files == run.at(2).files  # warm: each run's first row read once
    reads: list[str] = []
    for name in ("first_step", "last_step"):
        method = getattr(store, name)
        monkeypatch.setattr(store, name, lambda run_id, method=method, name=name: reads.append(name) or method(run_id))
    assert [p.step for p in fork.history] == list(range(7))
    assert fork.at(6).files == {p: e[1] for p, e in fork.sandbox.manifest().items() if e[0] == "f"}
    with pytest.raises(RunStateError, match=r"step 7 is out of range: run .* has steps 0\.\.6"):
        fork.at(7)
    assert reads == []  # its first row does not change, its last step is its checkpointer's
    fork.close()
    run.close()
    store.close()


def test_a_fork_from_the_last_checkpoint_copies_files_and_modes_without_reading_them_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    (ws / "bin" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (ws / "bin" / "run.sh").chmod(0o750)
    (ws / "bin").chmod(0o750)
    (ws / "empty").mkdir(mode=0o700)
    run, store = _writing(tmp_path)
    source = run.sandbox.workspace_hash(rescan=True)
    read_back = _reads_back(monkeypatch)
    fork = run.fork(f"{run.run_id}@{run.step_no}", workspace=tmp_path / "fork")
    assert read_back == []
    assert fork.sandbox.manifest() == run.sandbox.manifest()  # each file's sha256 and mode, each folder's mode
    assert fork.sandbox.workspace_hash(rescan=True) == source
    assert len(read_back) == 4  # proven again by a later full walk (racily clean)
    fork.close()
    run.close()
    store.close()


def test_a_fork_from_a_step_reads_its_files_in_one_statement_and_asks_for_its_id_once(tmp_path: Path) -> None:
    run, store = _writing(tmp_path)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    fork = run.fork(at_step=4, budget="fresh", new_run_id="F", workspace=tmp_path / "fork")
    store._db.set_trace_callback(None)
    reads = [s.split(" WHERE")[0] for s in statements if s.startswith("SELECT")]
    assert reads.count("SELECT sha256, data FROM files") == 1  # three files, one statement (was: one each)
    assert reads.count("SELECT 1 FROM runs") == 1  # the fork's id asked for once (was: twice)
    assert reads.count("SELECT step, text FROM manifests") == 1  # the manifest rows and their base: one read (was two)
    # the registration's transaction, the only one, takes the lease first (was: an INSERT autocommitted before it)
    assert [s for s in statements if "leases" in s or s in ("BEGIN IMMEDIATE", "COMMIT")] == [
        "BEGIN IMMEDIATE", statements[statements.index("BEGIN IMMEDIATE") + 1], "COMMIT"]
    assert statements[statements.index("BEGIN IMMEDIATE") + 1].startswith("INSERT INTO leases ")
    # was 17 (20 before): the manifests, the rows, one per kind of blob, the lease (one INSERT, was a transaction
    # of four statements), the registration
    assert len(statements) == 13
    assert fork.at(4).files == run.at(4).files
    fork.close()
    run.close()
    store.close()


def test_a_context_row_reads_its_long_items_in_one_statement(tmp_path: Path) -> None:
    run, store, _ = _alternating(tmp_path, 100)
    for n in range(3):  # items of >= 512 B are stored once by sha256 in blobs (schema 9)
        run.context.add(Layer.L2, f"a long note {n} " * 50, source="test", round=0)
    run.run(max_steps=16)  # a whole state at step 16 (FULL_EVERY) holds them all
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    fork = run.fork(at_step=16, budget="fresh", new_run_id="F", workspace=tmp_path / "fork")
    store._db.set_trace_callback(None)
    blobs = [s for s in statements if "FROM blobs" in s]
    assert len(blobs) == 1 and blobs[0].count("'") >= 8  # four or more items (was: one statement each)
    texts = [item["text"] for item in fork.context.state()["items"]]
    assert all(f"a long note {n} " * 50 in texts for n in range(3))  # each read back whole
    fork.close()
    run.close()
    store.close()


def test_a_fork_makes_no_snapshot_folder_until_it_keeps_a_snapshot(tmp_path: Path) -> None:
    run, store = _writing(tmp_path)
    fork = run.fork(at_step=4, budget="fresh", new_run_id="F", workspace=tmp_path / "fork")
    folder = Path(fork.sandbox.capabilities["snapshot_dir"])
    assert not folder.exists()  # was: a mkdtemp per run made, snapshot or not
    snap = fork.sandbox.snapshot("now")
    assert folder.is_dir() and snap.id in {s.id for s in fork.sandbox.snapshots()}
    fork.close()
    assert not folder.exists()
    run.close()
    store.close()


def test_a_fork_registers_its_spec_without_dumping_its_contract_again(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A fork's spec is its source's with another workspace: the contract's dump (~20 µs) is the one its
    # source registered with; another contract object is dumped afresh.
    run, store = _writing(tmp_path)
    dumped: list[object] = []
    model_dump = type(run.contract).model_dump

    def counting(self: object, **kwargs: object) -> object:
        dumped.append(self)
        return model_dump(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(type(run.contract), "model_dump", counting)
    forks = [run.fork(at_step=n, budget="fresh", new_run_id=f"F{n}", workspace=tmp_path / f"fork{n}") for n in (3, 4)]
    assert dumped == []
    for fork in forks:
        assert store.run_info(fork.run_id).spec["contract"] == model_dump(run.contract, mode="json")
        assert store.run_info(fork.run_id).spec["workspace"] == str(fork.workspace)
    other = make_run(tmp_path / "other", [{"kind": "think", "thought": "x"}], store=store, run_id="other",
                     contract_=run.contract.with_budget(max_decisions=99))
    assert [made is other.contract for made in dumped] == [True, True]  # its version, its spec: once each
    assert store.run_info("other").spec["contract"]["stop"]["budget"]["max_decisions"] == 99
    for made in (*forks, other, run):
        made.close()
    store.close()


def test_a_fork_spec_is_redacted_like_any_other(tmp_path: Path) -> None:
    # The spec's clean pieces are remembered (Redactor.json): a secret in the one new piece, the fork's
    # workspace, is still caught.
    run, store = _writing(tmp_path)
    fork = run.fork(at_step=4, budget="fresh", new_run_id="F", workspace=tmp_path / "password=hunter2hunter2")
    workspace = store.run_info("F").spec["workspace"]
    assert "hunter2" not in workspace and "[REDACTED]" in workspace
    fork.close()
    run.close()
    store.close()


def test_a_steps_files_are_folded_without_the_standard_librarys_parser(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # files_at reads up to FULL_EVERY manifest rows (Run.at(n) twice): orjson parses them (~5x faster), and
    # json.loads has the last word only on what orjson refuses (below).
    run, store = _writing(tmp_path)
    parsed: list[str] = []
    real = json.loads
    monkeypatch.setattr(json, "loads", lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    now, before = files_at(store, run.run_id, 5), files_at(store, run.run_id, 4)
    assert now is not None and before is not None and set(now) == set(before) == {"a.md", "notes/b.md", "notes/c.md"}
    assert now["a.md"] != before["a.md"] and now["notes/b.md"] == before["notes/b.md"]  # step 5 rewrote a.md
    assert parsed == []
    run.close()
    store.close()


def test_a_stored_path_orjson_refuses_is_folded_as_the_standard_library_reads_it(tmp_path: Path) -> None:
    # A file name that is not UTF-8 (os.fsdecode: a lone surrogate) is stored escaped; orjson refuses it.
    store = SQLiteStore(tmp_path / "runs.db")
    odd = "notes/\udcff.md"
    whole = json.dumps({"a.md": "1" * 64, odd: "2" * 64}, separators=(",", ":"))
    store.commit_step("R", 0, 0.0, "null", '{"kind":"checkpoint"}', None, register={"kind": "run_spec"},
                      files=StepFiles(0, whole))
    store.commit_step("R", 1, 0.0, "null", '{"kind":"checkpoint"}', None,
                      files=StepFiles(0, json.dumps({odd: None, "b.md": "3" * 64}, separators=(",", ":"))))
    assert files_at(store, "R", 0) == {"a.md": "1" * 64, odd: "2" * 64}
    assert files_at(store, "R", 1) == {"a.md": "1" * 64, "b.md": "3" * 64}
    store.close()


def test_a_fork_restoring_a_stored_context_builds_no_initial_context(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The fork replaces it at once (~90 µs: three items counted, the tool signatures spelled); a checkpoint
    # whose context memory.persist left out still gives the fork the initial context (L0 and L1).
    import harness_lab.loop.run as loop_run

    built: list[str] = []
    initial_context = loop_run.initial_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append("initial")
        return initial_context(*args, **kwargs)

    run, store = _writing(tmp_path)
    monkeypatch.setattr(loop_run, "initial_context", counting)
    fork = run.fork(at_step=4, budget="fresh", new_run_id="F", workspace=tmp_path / "fork")
    assert built == []
    view = run.at(5).context  # what step 5 saw: the context after step 4
    assert view is not None and fork.context.view().items == view.items
    base = contract()
    bare = base.model_copy(update={"memory": base.memory.model_copy(update={"persist": ()}),
                                   "human_gate": base.human_gate.model_copy(update={"required_for": ()})})
    unkept = make_run(tmp_path / "unkept", [{"kind": "think", "thought": "x"}], then="repeat_last", contract_=bare,
                      store=store, run_id="U", approver=AutoApprove())
    unkept.run(max_steps=3)
    built.clear()
    fork_unkept = unkept.fork(at_step=2, budget="fresh", new_run_id="FU", workspace=tmp_path / "fork-unkept")
    assert built == ["initial"]
    assert [item.key for item in fork_unkept.context.view().items][:3] == ["system", "goal", "acceptance"]
    for made in (fork, fork_unkept, unkept, run):
        made.close()
    store.close()


def test_a_forks_lease_taken_in_its_first_row_is_judged_when_a_row_holds_it(tmp_path: Path) -> None:
    # A fork takes its lease in the transaction that registers it; a lease row there already (a process that
    # registers the same id, or one that died) fails that INSERT, rolls it all back, and is judged as
    # Store.take_lease judges it: a live holder refuses the fork, naming it, with nothing written; a dead one's
    # is taken over.
    import subprocess
    import sys

    from harness_lab.process_id import host_name, process_identity

    run, store = _writing(tmp_path)
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        store._db.execute("INSERT INTO leases VALUES ('L', ?, ?, ?, 'tok', 0)",
                          (live.pid, host_name(), process_identity(live.pid)))
        store._db.execute("INSERT INTO leases VALUES ('D', ?, ?, 'another-boot:1', 'tok', 0)", (live.pid, host_name()))
        with pytest.raises(RunStateError, match=rf"run 'L' is held by pid {live.pid} on host "):
            run.fork(at_step=4, budget="fresh", new_run_id="L", workspace=tmp_path / "fork-L")
        assert not store.has_run("L") and not (tmp_path / "fork-L").exists()
        fork = run.fork(at_step=4, budget="fresh", new_run_id="D", workspace=tmp_path / "fork-D")
        fresh = run.fork(at_step=4, budget="fresh", new_run_id="N", workspace=tmp_path / "fork-N")
        assert store.has_run("D") and store.has_run("N") and fork.at(4).files == fresh.at(4).files == run.at(4).files
        held = dict(store._db.execute("SELECT run_id, token FROM leases").fetchall())
        assert held["D"] == held["N"] == store._me.token and held["L"] == "tok"
        for made in (fork, fresh, run):
            made.close()
    finally:
        live.communicate(b"")
    store.close()
    left = sqlite3.connect(tmp_path / "runs.db").execute("SELECT run_id FROM leases ORDER BY run_id").fetchall()
    assert left == [("L",)]  # the fork's leases given back on close, as any run's
