"""Snapshots: byte-identical rollback with run state, a snapshot before every irreversible call, diff,
a stat cache that hashes only what changed, and no write through planted links on rollback."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import SECRET, isolation_or_skip, journal_or_skip

import harness_lab
from harness_lab.errors import SandboxEnvironmentError
from harness_lab.sandbox import Sandbox, SandboxPolicy, SnapshotInfo


def _tree(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Everything rollback must restore: kind, bytes or link text, permission bits."""
    out: dict[str, tuple[str, bytes | str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", "", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    (d / "docs" / "deep").mkdir(parents=True)
    (d / "empty_dir").mkdir()
    (d / "docs" / "a.txt").write_text("alpha\n")
    (d / "docs" / "deep" / "bin.dat").write_bytes(bytes(range(256)) * 40)
    (d / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(d / "run.sh", 0o755)
    os.symlink("docs/a.txt", d / "inner_link")
    return d


@pytest.fixture
def state() -> dict[str, Any]:
    return {"step": 0, "context": ["goal"]}


@pytest.fixture(params=["auto", "walk"])
def sb(ws: Path, tmp_path: Path, state: dict[str, Any], request: pytest.FixtureRequest) -> Any:
    # Every guarantee holds with the change journal (inotify) and without it (full walks).
    box = Sandbox(ws, snapshot_dir=tmp_path / "snaps", policy=SandboxPolicy(change_tracking=request.param),
                  state_provider=lambda: {"step": state["step"], "context": list(state["context"])})
    if request.param == "auto":
        journal_or_skip(box)
    yield box
    box.close()


def test_rollback_restores_bytes_modes_links_and_run_state(sb: Sandbox, ws: Path, state: dict[str, Any]) -> None:
    before = _tree(ws)
    snap = sb.snapshot("healthy")
    assert snap.run_state == {"step": 0, "context": ["goal"]} and snap.files == 4
    state.update(step=7, context=["goal", "approach X"])
    (ws / "docs" / "a.txt").write_text("ALPHA CHANGED\n")
    (ws / "docs" / "deep" / "bin.dat").write_bytes(b"\x00" * 10)
    os.chmod(ws / "run.sh", 0o600)
    os.unlink(ws / "inner_link")
    os.symlink("run.sh", ws / "inner_link")
    (ws / "empty_dir").rmdir()
    (ws / "new_dir" / "sub").mkdir(parents=True)
    (ws / "new_dir" / "sub" / "created_after.txt").write_text("later")
    (ws / "created_after.txt").write_text("later")
    os.mkfifo(ws / "fifo_after")
    os.remove(ws / "docs" / "a.txt")
    (ws / "docs" / "a.txt").mkdir()  # a file replaced by a directory
    restored = sb.rollback(snap.id)
    assert _tree(ws) == before
    assert restored.id == snap.id and restored.run_state == {"step": 0, "context": ["goal"]}
    assert sb.workspace_hash() == snap.workspace_hash


def test_rollback_writes_only_what_differs(sb: Sandbox, ws: Path) -> None:
    snap = sb.snapshot()
    ino_a = (ws / "docs" / "a.txt").stat().st_ino
    ino_bin = (ws / "docs" / "deep" / "bin.dat").stat().st_ino
    (ws / "docs" / "a.txt").write_text("changed")
    sb.rollback(snap.id)
    assert (ws / "docs" / "a.txt").read_text() == "alpha\n"
    assert (ws / "docs" / "a.txt").stat().st_ino != ino_a  # rewritten by rename
    assert (ws / "docs" / "deep" / "bin.dat").stat().st_ino == ino_bin  # untouched


def test_rollback_never_writes_through_a_planted_link(sb: Sandbox, ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text(SECRET)
    snap = sb.snapshot()
    os.remove(ws / "docs" / "a.txt")
    os.symlink(outside, ws / "docs" / "a.txt")
    os.remove(ws / "run.sh")
    os.link(outside, ws / "run.sh")
    (ws / "docs" / "deep" / "bin.dat").unlink()
    (ws / "docs" / "deep").rmdir()
    os.symlink(tmp_path, ws / "docs" / "deep")  # a directory swapped for a link to outside
    sb.rollback(snap.id)
    assert outside.read_text() == SECRET and os.stat(outside).st_nlink == 1
    assert not (tmp_path / "bin.dat").exists()
    assert (ws / "docs" / "a.txt").read_text() == "alpha\n" and not (ws / "docs" / "a.txt").is_symlink()
    assert not (ws / "docs" / "deep").is_symlink() and (ws / "docs" / "deep" / "bin.dat").stat().st_size == 10240


def test_irreversible_calls_always_snapshot_first(sb: Sandbox, ws: Path) -> None:
    assert sb.call("write_file", path="fresh.txt", content="new").ok
    assert sb.last_auto_snapshot is None  # creating a new file is undone by deleting it
    res = sb.call("write_file", path="docs/a.txt", content="overwritten")
    auto = sb.last_auto_snapshot
    assert res.ok and auto is not None and res.data["snapshot_before"] == auto.id
    assert auto.trigger == "before write_file docs/a.txt"
    sb.rollback(auto.id)
    assert (ws / "docs" / "a.txt").read_text() == "alpha\n"
    res = sb.call("delete_file", path="docs/a.txt")
    auto2 = sb.last_auto_snapshot
    assert res.ok and auto2 is not None and auto2.id != auto.id and not (ws / "docs" / "a.txt").exists()
    sb.rollback(auto2.id)
    assert (ws / "docs" / "a.txt").read_text() == "alpha\n"
    if os.geteuid() == 0 and sb.capabilities["isolation"] != "none":
        res = sb.call("run_command", argv=["sh", "-c", "rm -rf docs"])
        auto3 = sb.last_auto_snapshot
        assert res.ok and auto3 is not None and auto3.id == res.data["snapshot_before"]
        assert not (ws / "docs").exists()
        sb.rollback(auto3.id)
        assert (ws / "docs" / "deep" / "bin.dat").read_bytes() == bytes(range(256)) * 40
    labels = [i.label for i in sb.snapshots()]
    assert labels and set(labels) == {"auto"}


def test_refused_or_failed_calls_take_no_snapshot(sb: Sandbox) -> None:
    assert sb.call("delete_file", path="../x").status == "denied"
    assert sb.call("delete_file", path="missing.txt").status == "error"
    assert sb.call("write_file", path="inner_link", content="x").status == "denied"
    assert sb.snapshots() == [] and sb.last_auto_snapshot is None


def test_failed_snapshot_blocks_the_irreversible_call(sb: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> SnapshotInfo:
        raise SandboxEnvironmentError("disk full")

    monkeypatch.setattr(sb._store, "save", broken)
    for tool, args in (("delete_file", {"path": "docs/a.txt"}),
                       ("write_file", {"path": "docs/a.txt", "content": "lost"}),
                       ("run_command", {"argv": ["rm", "-f", "docs/a.txt"]})):
        res = sb.call(tool, **args)
        assert res.status == "error" and "not executed" in (res.reason or "")
    assert (ws / "docs" / "a.txt").read_text() == "alpha\n"


def test_diff_reports_added_removed_changed(sb: Sandbox, ws: Path) -> None:
    a = sb.snapshot()
    (ws / "docs" / "a.txt").write_text("changed")
    os.remove(ws / "run.sh")
    (ws / "added.txt").write_text("+")
    (ws / "empty_dir").rmdir()
    b = sb.snapshot(rescan=True)  # changed behind the sandbox's back: ask for a walk
    d = sb.diff(a.id, b.id)
    assert d.added == ("added.txt",)
    assert d.removed == ("empty_dir/", "run.sh")
    assert d.changed == ("docs/a.txt",)
    back = sb.diff(b.id, a.id)
    assert back.added == d.removed and back.removed == d.added
    with pytest.raises(KeyError):
        sb.diff(a.id, "snap-9999")


@pytest.mark.parametrize("tracking", ["auto", "walk"])
def test_stat_cache_hashes_only_what_changed(tmp_path: Path, tracking: str) -> None:
    ws = tmp_path / "big"
    for i in range(20):
        (ws / f"d{i}").mkdir(parents=True)
        for j in range(25):
            (ws / f"d{i}" / f"f{j}.txt").write_text(f"file {i} {j}\n")
    time.sleep(0.06)  # older than the racy-clean window, as any file not touched this instant is
    with Sandbox(ws, snapshot_dir=tmp_path / "snaps", policy=SandboxPolicy(change_tracking=tracking)) as sb:
        first = sb.snapshot()
        assert first.files == 500 and first.hashed == 500
        assert sb.call("write_file", path="d3/f4.txt", content="changed by a tool").ok
        second = sb.snapshot()
        assert second.hashed == 1
        (ws / "d7" / "f7.txt").write_text("changed behind the sandbox's back")
        quiet = sb.snapshot()
        if tracking == "auto":  # the journal reported the outside write: that file alone is read
            assert quiet.hashed == 1 and sb.diff(second.id, quiet.id).changed == ("d7/f7.txt",)
        else:  # no journal: only what the tools touched is looked at (the stated trade-off)
            assert quiet.hashed == 0 and sb.diff(second.id, quiet.id).changed == ()
        third = sb.snapshot(rescan=True)
        # a file may be read once more when it was hashed within the racy-clean window of its write
        assert (1 if tracking == "walk" else 0) <= third.hashed <= 2 and sb.diff(second.id, third.id).changed == ("d7/f7.txt",)


def test_incremental_snapshots_agree_with_a_full_walk(sb: Sandbox, ws: Path) -> None:
    first = sb.snapshot()
    steps = [("write_file", {"path": "n1/n2/new.txt", "content": "new"}),
             ("write_file", {"path": "docs/a.txt", "content": "over"}),
             ("delete_file", {"path": "run.sh"}),
             ("delete_file", {"path": "empty_dir"}),
             ("write_file", {"path": "n1/other.txt", "content": "o"}),
             ("delete_file", {"path": "n1/n2/new.txt"}),
             ("delete_file", {"path": "n1/n2"})]
    for tool, args in steps:
        assert sb.call(tool, **args).ok, (tool, args)
        inc = sb.snapshot()
        assert inc.workspace_hash == sb.workspace_hash(), (tool, args)
        full = sb.snapshot(rescan=True)
        assert sb.diff(inc.id, full.id) == sb.diff(full.id, full.id).model_copy(update={"a": inc.id})
    final = sb.snapshots()[-1]
    assert sb.diff(first.id, final.id).added == ("n1/", "n1/other.txt")
    sb.rollback(first.id)
    assert sb.workspace_hash() == first.workspace_hash


def test_same_size_change_within_one_clock_tick_is_seen(sb: Sandbox, ws: Path) -> None:
    f = ws / "tick.txt"
    for _ in range(20):
        f.write_text("aaaa")
        s1 = sb.snapshot(rescan=True)
        f.write_text("bbbb")  # same size, very likely the same coarse mtime
        s2 = sb.snapshot(rescan=True)
        assert sb.diff(s1.id, s2.id).changed == ("tick.txt",)


def test_snapshots_persist_and_chains_resolve(ws: Path, tmp_path: Path) -> None:
    snaps = tmp_path / "persist"
    with Sandbox(ws, snapshot_dir=snaps) as sb:
        ids = []
        for i in range(40):  # longer than one delta chain
            (ws / "counter.txt").write_text(str(i))
            ids.append(sb.snapshot(f"s{i}", rescan=True).id)
    with Sandbox(ws, snapshot_dir=snaps) as again:
        assert [i.id for i in again.snapshots()] == ids
        again.rollback(ids[5])
        assert (ws / "counter.txt").read_text() == "5"
        again.rollback(ids[37])
        assert (ws / "counter.txt").read_text() == "37"
        assert again.snapshot().created_seq == 41


def test_two_live_sandboxes_cannot_share_a_snapshot_dir(ws: Path, tmp_path: Path) -> None:
    # Both would number from the same snap-0001 and overwrite each other's manifests: a rollback
    # would then restore the other workspace's files. The second one is refused; once the first
    # is closed the store (and its snapshots) can be opened again.
    other = tmp_path / "other"
    other.mkdir()
    (other / "docs").mkdir()
    (other / "docs" / "a.txt").write_text("the other workspace\n")
    snaps = tmp_path / "shared"
    with Sandbox(ws, snapshot_dir=snaps) as first:
        mine = first.snapshot("mine")
        with pytest.raises(SandboxEnvironmentError, match=r"snapshot_dir .* is in use by another live sandbox"):
            Sandbox(other, snapshot_dir=snaps)
        (ws / "docs" / "a.txt").write_text("changed\n")
        first.rollback(mine.id)
        assert (ws / "docs" / "a.txt").read_text() == "alpha\n"
    with Sandbox(ws, snapshot_dir=snaps) as later:
        assert [i.id for i in later.snapshots()] == [mine.id]


def test_a_killed_process_leaves_its_snapshot_dir_free(ws: Path, tmp_path: Path) -> None:
    snaps = tmp_path / "shared"
    holder = ("import sys, time\nfrom harness_lab.sandbox import Sandbox\n"
              f"sb = Sandbox({str(ws)!r}, snapshot_dir={str(snaps)!r})\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(Path(harness_lab.__file__).parents[1])})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        with pytest.raises(SandboxEnvironmentError, match=f"in use by another live sandbox .process {proc.pid}"):
            Sandbox(ws, snapshot_dir=snaps)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    with Sandbox(ws, snapshot_dir=snaps) as after:  # the kernel dropped the dead process's lock
        assert after.snapshot().id == "snap-0001"


def test_snapshot_store_must_be_outside_workspace(ws: Path) -> None:
    with pytest.raises(SandboxEnvironmentError):
        Sandbox(ws, snapshot_dir=ws / ".snapshots")
    with pytest.raises(SandboxEnvironmentError):
        Sandbox(ws / "no-such-dir")


def test_default_snapshot_dir_is_private_and_outside(ws: Path) -> None:
    with Sandbox(ws) as sb:
        snap_dir = Path(sb.capabilities["snapshot_dir"])
        assert not str(snap_dir).startswith(str(ws)) and stat.S_IMODE(snap_dir.stat().st_mode) == 0o700


def test_snapshot_subdirectories_are_made_on_first_use_and_private(ws: Path, tmp_path: Path) -> None:
    with Sandbox(ws, snapshot_dir=tmp_path / "snaps") as sb:
        assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == []  # nothing stored, nothing made
        sb.snapshot()
        for sub in ("blobs", "manifests"):
            assert stat.S_IMODE((tmp_path / "snaps" / sub).stat().st_mode) == 0o700


def test_workspace_hash_tracks_content(sb: Sandbox, ws: Path) -> None:
    h1 = sb.workspace_hash()
    assert sb.workspace_hash() == h1
    (ws / "docs" / "a.txt").write_text("different")
    h2 = sb.workspace_hash()
    assert h2 != h1
    (ws / "docs" / "a.txt").write_text("alpha\n")
    assert sb.workspace_hash() == h1


def test_run_command_files_are_captured_and_rolled_back(sb: Sandbox, ws: Path) -> None:
    isolation_or_skip()
    base = sb.snapshot()
    res = sb.call("run_command", argv=["sh", "-c", "mkdir -p out && echo built > out/artifact && chmod 700 out"])
    assert res.ok, res
    after = sb.snapshot()
    assert sb.diff(base.id, after.id).added == ("out/", "out/artifact")
    sb.rollback(base.id)
    assert not (ws / "out").exists()


def test_materialize_forks_a_snapshot_into_a_new_directory(sb: Sandbox, ws: Path, tmp_path: Path,
                                                          state: dict[str, Any]) -> None:
    before = _tree(ws)
    snap = sb.snapshot("fork point")
    state["step"] = 3
    (ws / "docs" / "a.txt").write_text("moved on")
    info = sb.materialize(snap.id, tmp_path / "fork")
    assert _tree(tmp_path / "fork") == before and info.run_state == {"step": 0, "context": ["goal"]}
    assert (ws / "docs" / "a.txt").read_text() == "moved on"  # the source workspace is untouched
    with Sandbox(tmp_path / "fork", snapshot_dir=tmp_path / "fork-snaps") as forked:
        assert forked.workspace_hash() == snap.workspace_hash
    with pytest.raises(SandboxEnvironmentError):
        sb.materialize(snap.id, tmp_path / "fork")  # not empty
    with pytest.raises(SandboxEnvironmentError):
        sb.materialize(snap.id, ws / "inside")
    assert not (ws / "inside").exists()


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        SandboxPolicy(allowed_tools=frozenset({"read_file", "rm_rf"}))
    with pytest.raises(ValueError):
        SandboxPolicy(timeouts={"install": 300})
    with pytest.raises(ValueError):
        SandboxPolicy(timeouts={"default": 0})


def test_manifest_lists_current_entries_with_content_hashes(sb: Sandbox, ws: Path) -> None:
    import hashlib

    m = sb.manifest()
    mode = stat.S_IMODE((ws / "docs" / "a.txt").stat().st_mode)
    assert m["docs/a.txt"] == ("f", hashlib.sha256(b"alpha\n").hexdigest(), mode)
    assert m["docs"][0] == "d" and m["inner_link"] == ("l", "docs/a.txt", 0)
    (ws / "docs" / "a.txt").write_text("beta")
    assert sb.manifest()["docs/a.txt"][1] == hashlib.sha256(b"beta").hexdigest()  # proven, not remembered


def test_rollback_copies_by_hand_where_the_kernel_cannot(sb: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    snap = sb.snapshot()
    (ws / "docs" / "deep" / "bin.dat").write_bytes(b"\x01" * 3)
    calls: list[int] = []

    def cross_device(src: int, dst: int, count: int, *rest: Any) -> int:
        calls.append(count)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    sb.rollback(snap.id)
    assert calls and (ws / "docs" / "deep" / "bin.dat").read_bytes() == bytes(range(256)) * 40


def test_adopted_blobs_spare_storing_a_copied_tree_again_and_outlive_the_source(sb: Sandbox, ws: Path,
                                                                               tmp_path: Path) -> None:
    shutil.copytree(ws, tmp_path / "copy", symlinks=True)
    blobs = Path(sb.capabilities["snapshot_dir"]) / "blobs"
    sb.workspace_hash()  # the source's files are stored
    with Sandbox(tmp_path / "copy", snapshot_dir=tmp_path / "copy-snaps") as copy:
        files = {e[1] for e in sb.manifest().values() if e[0] == "f"}
        assert copy.adopt_blobs(sb) == len(files) > 0
        first = copy.snapshot()
        assert first.workspace_hash == sb.workspace_hash()
        # every file is still read and hashed
        assert copy._scanner.hashed_last == sum(1 for e in sb.manifest().values() if e[0] == "f")
        for digest in files:  # ... but stored once: the copy's store shares the source's inodes
            mine = tmp_path / "copy-snaps" / "blobs" / digest[:2] / digest[2:]
            assert mine.stat().st_ino == (blobs / digest[:2] / digest[2:]).stat().st_ino
        shutil.rmtree(blobs)  # the source's store goes away: the copy's own names keep the contents
        (tmp_path / "copy" / "docs" / "a.txt").write_text("changed in the copy")
        copy.rollback(first.id)
        assert (tmp_path / "copy" / "docs" / "a.txt").read_text() == (ws / "docs" / "a.txt").read_text()


def test_held_blobs_are_proven_kept_off_disk_and_written_when_a_rollback_reads_them(sb: Sandbox, ws: Path,
                                                                                   tmp_path: Path) -> None:
    shutil.copytree(ws, tmp_path / "copy", symlinks=True)
    before = {p: (tmp_path / "copy" / p).read_bytes() for p, e in sb.manifest().items() if e[0] == "f"}
    blobs = tmp_path / "copy-snaps" / "blobs"
    with Sandbox(tmp_path / "copy", snapshot_dir=tmp_path / "copy-snaps") as copy:
        copy.hold_blobs(1 << 20)
        first = copy.snapshot()
        copy.hold_blobs(0)
        assert copy._scanner.hashed_last == len(before) > 0  # every file still read and hashed
        assert first.workspace_hash == sb.workspace_hash()
        assert not blobs.exists()  # ... but none stored on disk yet
        for path in before:
            assert copy.call("write_file", path=path, content="changed").ok
        assert copy.call("write_file", path="new.txt", content="new").ok
        copy.rollback(first.id)
        assert {p: (tmp_path / "copy" / p).read_bytes() for p in before} == before
        assert not (tmp_path / "copy" / "new.txt").exists()
        assert copy.workspace_hash(rescan=True) == first.workspace_hash


def test_past_the_hold_budget_blobs_are_linked_from_the_shared_store(sb: Sandbox, ws: Path, tmp_path: Path) -> None:
    shutil.copytree(ws, tmp_path / "copy", symlinks=True)
    theirs = Path(sb.capabilities["snapshot_dir"]) / "blobs"
    sb.workspace_hash()  # the source's files are stored
    files = {e[1] for e in sb.manifest().values() if e[0] == "f"}
    with Sandbox(tmp_path / "copy", snapshot_dir=tmp_path / "copy-snaps") as copy:
        copy.hold_blobs(1, share=sb)  # no file fits in one byte
        copy.snapshot()
        for digest in files:
            mine = tmp_path / "copy-snaps" / "blobs" / digest[:2] / digest[2:]
            assert mine.stat().st_ino == (theirs / digest[:2] / digest[2:]).stat().st_ino
