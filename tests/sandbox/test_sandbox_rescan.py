"""A full walk (``snapshot(rescan=True)``, the walk after ``run_command``) updates the last manifest in place.

Its cost must follow the tree's stat calls, not a rebuild: the walk itself says which entries
changed, so the snapshot after it is saved as a delta without comparing every entry again, and
the workspace hash moves by the changed entries' terms only. The oracle for what the manifest
must be is a walk-mode sandbox with no memory of the tree.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import small_tree, walked

from harness_lab.sandbox import Sandbox, SandboxPolicy
from harness_lab.sandbox.snapshots import SnapshotStore


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return small_tree(tmp_path / "ws", 4, 6)


@pytest.fixture(params=["auto", "walk"])
def sb(request: pytest.FixtureRequest, tree: Path, tmp_path: Path) -> Any:
    box = Sandbox(tree, snapshot_dir=tmp_path / "snaps", policy=SandboxPolicy(change_tracking=request.param))
    box.snapshot("base")
    yield box
    box.close()


def _spy_saves(monkeypatch: pytest.MonkeyPatch) -> list[set[str] | None]:
    seen: list[set[str] | None] = []
    real = SnapshotStore.save

    def save(self: SnapshotStore, *args: Any, **kwargs: Any) -> Any:
        seen.append(None if args[-1] is None else set(args[-1]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SnapshotStore, "save", save)
    return seen


def test_a_rescan_hands_the_store_exactly_what_changed(sb: Sandbox, tree: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    saves = _spy_saves(monkeypatch)
    sb.snapshot("nothing changed", rescan=True)
    assert saves[-1] == set() and sb._scanner.full_last
    (tree / "d1" / "f2.txt").write_text("changed behind the sandbox's back\n")
    (tree / "d2" / "f0.txt").unlink()
    shutil.rmtree(tree / "d3" / "sub")
    (tree / "d3" / "sub").write_text("a file where a directory was\n")
    (tree / "d0" / "new.txt").write_text("new\n")
    info = sb.snapshot("after outside changes", rescan=True)
    assert saves[-1] == {"d1/f2.txt", "d2/f0.txt", "d3/sub", "d3/sub/deep.txt", "d0/new.txt"}
    truth_hash, truth = walked(tree, tmp_path)
    assert info.workspace_hash == truth_hash and sb.manifest() == truth
    # The snapshot is a delta naming only those paths, and reads back as the whole tree.
    doc = sb._store._load_meta(info.id)
    assert set(doc["set"]) | set(doc["drop"]) == saves[-1] and sb._store.entries(info.id) == truth


def test_in_place_walks_match_a_fresh_walk_through_random_changes(sb: Sandbox, tree: Path,
                                                                  tmp_path: Path) -> None:
    rng = random.Random(20)
    for rnd in range(12):
        files = sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())
        dirs = sorted(p for p in tree.rglob("*") if p.is_dir() and not p.is_symlink())
        pick = rng.choice(["write", "remove", "rmdir", "dir_to_file", "file_to_dir", "link", "chmod", "fifo"])
        if pick == "write" and files:
            rng.choice(files).write_text(f"round {rnd}\n")
        elif pick == "remove" and files:
            rng.choice(files).unlink()
        elif pick == "rmdir" and dirs:
            shutil.rmtree(rng.choice(dirs))
        elif pick == "dir_to_file" and dirs:
            d = rng.choice(dirs)
            shutil.rmtree(d)
            d.write_text(f"was a directory {rnd}\n")
        elif pick == "file_to_dir" and files:
            f = rng.choice(files)
            f.unlink()
            (f / "inner").mkdir(parents=True)
            (f / "inner" / "x.txt").write_text(f"{rnd}\n")
        elif pick == "link":
            os.symlink(f"target-{rnd}", tree / f"link{rnd}")
        elif pick == "chmod" and files:
            rng.choice(files).chmod(0o600)
        elif pick == "fifo":
            os.mkfifo(tree / f"fifo{rnd}")
        info = sb.snapshot(f"round {rnd}", rescan=True)
        truth_hash, truth = walked(tree, tmp_path)
        assert sb.manifest() == truth, (rnd, pick)
        assert info.workspace_hash == sb.workspace_hash() == truth_hash, (rnd, pick)
        assert sb._store.entries(info.id) == {p: e for p, e in truth.items() if e[0] != "s"}, (rnd, pick)
    first = sb.snapshots()[0]
    sb.rollback(first.id)
    assert sb.workspace_hash() == first.workspace_hash == walked(tree, tmp_path)[0]


def test_a_rescan_looks_one_by_one_only_into_directories_that_changed(sb: Sandbox, tree: Path,
                                                                      tmp_path: Path) -> None:
    sb.snapshot("records made", rescan=True)
    (tree / "d2" / "f4.txt").write_text("changed behind the sandbox's back\n")
    time.sleep(0.06)  # past the racy-clean window, or the file is proven again by every walk
    info = sb.snapshot("one change", rescan=True)
    # d2's own entries (6 files, sub/), nothing else: every other directory was taken whole.
    assert sb._scanner.full_last and sb._scanner.examined_last == 7 and sb._scanner.hashed_last == 1
    assert info.workspace_hash == walked(tree, tmp_path)[0]
    sb.snapshot("nothing changed", rescan=True)
    assert sb._scanner.full_last and sb._scanner.examined_last == 0


def test_a_write_through_a_shared_map_is_seen_by_a_rescan_of_a_recorded_directory(
        sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    sb.snapshot("records made", rescan=True)
    before = sb.snapshot("all recorded", rescan=True)
    time.sleep(0.06)
    fd = os.open(tree / "d1" / "f1.txt", os.O_RDWR)
    try:
        with mmap.mmap(fd, 0) as m:  # same inode, same size, and no inotify event
            m[0:1] = b"M"
            m.flush()
    finally:
        os.close(fd)
    info = sb.snapshot("after the mapped write", rescan=True)
    assert info.workspace_hash != before.workspace_hash
    assert info.workspace_hash == walked(tree, tmp_path)[0]
    assert sb.diff(before.id, info.id).changed == ("d1/f1.txt",)


def test_a_directory_moved_away_and_back_is_watched_again(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    if not sb._scanner.journaled:
        pytest.skip("without a journal every scan walks: nothing to watch again")
    outside = tmp_path / "outside-link"
    os.link(tree / "d3" / "f5.txt", outside)  # a write through it reaches only the inode's own watch
    time.sleep(0.06)  # the link changed f5's ctime: past the racy-clean window, so d3 gets a record
    sb.snapshot("records made", rescan=True)
    sb.snapshot("all recorded", rescan=True)
    (tree / "d3").rename(tmp_path / "away")
    (tmp_path / "away").rename(tree / "d3")
    # The walk drains the journal (which lets go of the watches under d3) and then meets d3 as its
    # record has it: same names, same stat keys. The record predates the let-go, so d3's files are
    # looked at one by one and watched again.
    sb.snapshot("back", rescan=True)
    with open(outside, "r+b") as fh:
        fh.write(b"X")
    assert sb.workspace_hash() == walked(tree, tmp_path)[0] and not sb._scanner.full_last


def test_a_name_made_or_removed_in_a_recorded_directory_is_seen(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    sb.snapshot("records made", rescan=True)
    before = sb.snapshot("all recorded", rescan=True)
    assert sb._scanner.examined_last == 0
    (tree / "d1" / "new.txt").write_text("new\n")  # moves d1's mtime and ctime: d1 is listed again
    (tree / "d2" / "sub" / "deep.txt").rename(tree / "d2" / "sub" / "moved.txt")
    info = sb.snapshot("after", rescan=True)
    assert info.workspace_hash == walked(tree, tmp_path)[0]
    d = sb.diff(before.id, info.id)
    assert d.added == ("d1/new.txt", "d2/sub/moved.txt") and d.removed == ("d2/sub/deep.txt",)
