"""The change journal: outside writes are seen without a walk, and what it cannot vouch for is walked.

Each guarantee the cheap paths rely on has a test here: an outside write (in place, by rename,
through a hard link from outside, by a directory removed and made again or renamed) is seen by
the next ``workspace_hash`` / ``manifest`` / ``rollback`` without ``rescan``; what is read is
only what changed; an overflowing journal falls back to a full walk; a machine without a journal
says so. The oracle is a walk-mode sandbox over the same tree, which proves every entry.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest
from sbhelpers import isolation_or_skip, journal_or_skip, small_tree, walked

from harness_lab.sandbox import Sandbox, SandboxPolicy
from harness_lab.sandbox import journal as journal_mod


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return small_tree(tmp_path / "ws", 5, 8)


@pytest.fixture
def sb(tree: Path, tmp_path: Path) -> Sandbox:
    box = Sandbox(tree, snapshot_dir=tmp_path / "snaps")
    journal_or_skip(box)
    box.snapshot("base")
    yield box  # type: ignore[misc]
    box.close()


def test_an_outside_write_is_seen_by_the_next_hash_and_only_it_is_read(sb: Sandbox, tree: Path,
                                                                      tmp_path: Path) -> None:
    before = sb.workspace_hash()
    assert sb.workspace_hash() == before and not sb._scanner.full_last and sb._scanner.hashed_last == 0
    with open(tree / "d2" / "f3.txt", "r+b") as fh:  # in place: same inode, same size
        fh.write(b"X")
    after = sb.workspace_hash()
    assert after != before and after == walked(tree, tmp_path)[0]
    assert not sb._scanner.full_last and sb._scanner.hashed_last == 1


def test_a_write_through_a_hard_link_from_outside_is_seen(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-name"
    os.link(tree / "d1" / "f1.txt", outside)  # made outside: no event reaches the directory watch
    before = sb.workspace_hash()
    with open(outside, "r+b") as fh:
        fh.write(b"Z")
    assert sb.workspace_hash() != before
    assert sb.manifest() == walked(tree, tmp_path)[1]


def test_rollback_after_outside_changes_is_byte_identical_without_a_walk(sb: Sandbox, tree: Path,
                                                                        tmp_path: Path) -> None:
    base = sb.snapshots()[0]
    want = walked(tree, tmp_path)[1]
    (tree / "d0" / "f0.txt").write_text("outside edit")
    shutil.rmtree(tree / "d3")
    (tree / "d3" / "sub").mkdir(parents=True)  # made again, emptier, with a stranger inside
    (tree / "d3" / "sub" / "stranger.txt").write_text("?")
    os.rename(tree / "d4", tree / "d4-moved")
    os.symlink("/etc/passwd", tree / "d1" / "f2.txt.link")
    os.mkfifo(tree / "d1" / "pipe")
    sb.rollback(base.id)
    assert not sb._scanner.full_last  # the journal proved the current state
    assert walked(tree, tmp_path)[1] == want
    assert sb.workspace_hash() == base.workspace_hash


def test_rollback_writes_only_what_differs_and_reads_only_that(sb: Sandbox, tree: Path) -> None:
    base = sb.snapshots()[0]
    assert sb.call("write_file", path="d2/f2.txt", content="tool write").ok
    ino = (tree / "d2" / "f5.txt").stat().st_ino
    sb.rollback(base.id)
    assert not sb._scanner.full_last and sb._scanner.hashed_last == 1  # the tool's write, nothing else
    assert (tree / "d2" / "f2.txt").read_text() == "2-2\n" and (tree / "d2" / "f5.txt").stat().st_ino == ino


def test_random_outside_changes_agree_with_a_full_walk(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    rnd = random.Random(7)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    def files() -> list[Path]:
        return sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())

    def dirs() -> list[Path]:
        return sorted(p for p in tree.rglob("*") if p.is_dir() and not p.is_symlink())

    ops = ["append", "overwrite", "chmod", "new_dir", "rm_dir", "mv_file", "mv_dir", "symlink",
           "rm_file", "replace_by_rename", "outside_link_write", "dir_in_from_outside"]
    serial = 0
    for round_no in range(40):
        for _ in range(rnd.randint(1, 4)):
            serial += 1
            op, fs, ds = rnd.choice(ops), files(), dirs()
            target = rnd.choice(fs) if fs else None
            if op == "append" and target:
                with open(target, "a") as fh:
                    fh.write("+")
            elif op == "overwrite" and target:
                target.write_text(target.read_text()[::-1] or "x")
            elif op == "chmod" and target:
                os.chmod(target, rnd.choice([0o600, 0o644, 0o755]))
            elif op == "new_dir":
                d = tree / f"n{serial}" / "inner"
                d.mkdir(parents=True, exist_ok=True)
                (d / "x.txt").write_text(str(round_no))
            elif op == "rm_dir" and ds:
                shutil.rmtree(rnd.choice(ds))
            elif op == "mv_file" and target and ds:
                os.replace(target, rnd.choice(ds) / f"moved{serial}.txt")
            elif op == "mv_dir" and len(ds) > 1:
                src = rnd.choice(ds)
                dst = tree / f"renamed{serial}"
                if not dst.exists():
                    os.rename(src, dst)
            elif op == "symlink" and ds:
                os.symlink("../elsewhere", rnd.choice(ds) / f"link{serial}")
            elif op == "rm_file" and target:
                target.unlink()
            elif op == "replace_by_rename" and target:
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_text("renamed over")
                os.replace(tmp, target)
            elif op == "outside_link_write" and target:
                alias = outside / f"alias{serial}"
                os.link(target, alias)
                with open(alias, "a") as fh:
                    fh.write("via outside name")
            elif op == "dir_in_from_outside":
                d = outside / f"incoming{serial}"
                (d / "a").mkdir(parents=True)
                (d / "a" / "b.txt").write_text("came in")
                os.rename(d, tree / f"incoming{serial}")
        truth_hash, truth = walked(tree, tmp_path)
        assert sb.manifest() == truth, f"round {round_no}"
        assert sb.workspace_hash() == truth_hash
        assert not sb._scanner.full_last
    back = sb.snapshots()[0]
    sb.rollback(back.id)
    assert sb.workspace_hash() == back.workspace_hash == walked(tree, tmp_path)[0]


def test_an_overflowing_journal_falls_back_to_a_full_walk(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: overflowing it would take too long")
    a, b = tree / "d0" / "f0.txt", tree / "d0" / "f1.txt"
    for i in range(limit // 2 + 10):  # alternate so the kernel cannot merge identical events
        os.utime(a, ns=(i, i))
        os.utime(b, ns=(i, i))
    (tree / "d4" / "f4.txt").write_text("after the overflow")
    assert sb.workspace_hash() == walked(tree, tmp_path)[0]
    assert sb._scanner.full_last  # the journal lost track, so the tree was walked
    (tree / "d4" / "f5.txt").write_text("and the new journal sees this")
    assert sb.workspace_hash() == walked(tree, tmp_path)[0] and not sb._scanner.full_last


def test_after_run_command_the_tree_iswalked(sb: Sandbox, tree: Path, tmp_path: Path) -> None:
    isolation_or_skip()
    sb.workspace_hash()
    # A shared memory map writes without an inotify event: only the walk after the command sees it.
    code = ("import mmap,os\nfd=os.open('d0/f0.txt',os.O_RDWR)\nm=mmap.mmap(fd,0)\nm[0:1]=b'M'\n"
            "m.flush()\nos.close(fd)")
    res = sb.call("run_command", argv=["python3", "-c", code])
    assert res.ok, res
    assert sb._scanner.full_last  # walked right after the command (the walk that checks its quota)
    assert sb.workspace_hash() == walked(tree, tmp_path)[0]
    assert (tree / "d0" / "f0.txt").read_text().startswith("M")


def test_without_a_journal_the_sandbox_says_so_and_walks(tree: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with Sandbox(tree, snapshot_dir=tmp_path / "s1", policy=SandboxPolicy(change_tracking="walk")) as sb:
        assert sb.capabilities["change_tracking"] == "walk (no change journal requested)"
        sb.workspace_hash()
        assert sb._scanner.full_last
    monkeypatch.setattr("harness_lab.sandbox.scan.open_journal", lambda: "inotify is unavailable: test")
    with Sandbox(tree, snapshot_dir=tmp_path / "s2") as sb:
        assert sb.capabilities["change_tracking"] == "walk (inotify is unavailable: test)"
        h = sb.workspace_hash()
        (tree / "d0" / "f0.txt").write_text("seen by the walk")
        assert sb.workspace_hash() != h and sb._scanner.full_last


def test_a_full_watch_table_is_lost_track_not_silence(sb: Sandbox, tree: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    journal = sb._scanner._journal
    assert isinstance(journal, journal_mod.Journal)
    real = journal._add

    def full(path: str, mask: int, gone_ok: bool) -> int:
        if "/proc/self/fd/" in path and not path.endswith(".txt"):
            journal.lost = True  # what _add does on ENOSPC
            return -1
        return real(path, mask, gone_ok)

    monkeypatch.setattr(journal, "_add", full)
    (tree / "brand_new" / "x").mkdir(parents=True)  # its watch cannot be added
    sb.workspace_hash()
    (tree / "brand_new" / "x" / "inside.txt").write_text("unwatched directory")
    assert sb.workspace_hash() == walked(tree, tmp_path)[0]


def test_random_rollbacks_compare_only_what_changed_and_stay_byte_identical(sb: Sandbox, tree: Path,
                                                                           tmp_path: Path) -> None:
    # Rollback compares only the paths the snapshot deltas and the journal name; a path missing
    # from them would be left as it is, and the oracle walk below would see it.
    rnd = random.Random(11)
    truths = {sb.snapshots()[0].id: walked(tree, tmp_path)[1]}
    names = [f"d{i}/f{j}.txt" for i in range(5) for j in range(8)] + ["extra/new.txt", "d1/sub/more.txt"]
    for round_no in range(30):
        for _ in range(rnd.randint(1, 3)):
            kind, name = rnd.random(), rnd.choice(names)
            if kind < 0.4:
                sb.call("write_file", path=name, content=f"tool {round_no}")
            elif kind < 0.55:
                sb.call("delete_file", path=name)
            elif kind < 0.8 and (tree / name).is_file():
                (tree / name).write_text(f"outside {round_no}")
            elif kind < 0.9:
                shutil.rmtree(tree / name.split("/")[0], ignore_errors=True)
            else:
                os.mkfifo(tree / f"fifo{round_no}")
        choice = rnd.random()
        if choice < 0.5:
            snap = sb.snapshot(f"r{round_no}", rescan=rnd.random() < 0.2)
            truths[snap.id] = walked(tree, tmp_path)[1]
        elif choice < 0.8:
            back = rnd.choice(sorted(truths))
            sb.rollback(back)
            assert walked(tree, tmp_path)[1] == truths[back], f"round {round_no}: rollback to {back}"
        else:
            sb.workspace_hash(rescan=rnd.random() < 0.3)


def test_closing_releases_the_journal_even_when_it_holds_watches(tree: Path, tmp_path: Path) -> None:
    # With watches, the descriptor is closed by a short-lived thread (the kernel's teardown waits
    # for a grace period); it must still be released, and close() must not leave it to the GC.
    box = Sandbox(tree, snapshot_dir=tmp_path / "snaps")
    journal_or_skip(box)
    box.workspace_hash()
    journal = box._scanner._journal
    assert isinstance(journal, journal_mod.Journal) and journal._dirs
    fd = journal.fd
    link = f"/proc/self/fd/{fd}"
    assert os.readlink(link) == "anon_inode:inotify"
    box.close()
    assert journal.fd == -1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.readlink(link) != "anon_inode:inotify":
                break  # the number was reused by something else: ours is closed
        except FileNotFoundError:
            break
        time.sleep(0.005)
    else:
        pytest.fail(f"the journal's descriptor {fd} is still open 10 s after close()")
