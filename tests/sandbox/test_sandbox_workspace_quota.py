"""``Quotas.workspace_bytes`` (issue 17, item 8: 4 x 200 MB were accepted and the next snapshot copied
800 MB more). A write_file past the quota is refused; a command that leaves the workspace past it gets an
error result (workspace_quota_exceeded) and its changes are rolled back to the snapshot before it,
without the excess ever being read into the snapshot store. Scaled down: a 1 MiB quota."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness_lab.sandbox.sandbox as sandbox_module
from harness_lab.sandbox import Quotas, Sandbox
from harness_lab.sandbox._quota import file_sizes
from harness_lab.sandbox.blobs import BlobStore
from harness_lab.sandbox.scan import Manifest, Scanner

QUOTA = 1 << 20
KIB = 1024


def _stored_bytes(snapshot_dir: Path) -> int:
    return sum(p.stat().st_size for p in snapshot_dir.rglob("*") if p.is_file())


def test_a_write_past_the_quota_is_refused_and_writes_nothing(tmp_path: Path,
                                                             make_sandbox: Callable[..., Sandbox]) -> None:
    (ws := tmp_path / "ws").mkdir()
    sb = make_sandbox(ws, quotas=Quotas(workspace_bytes=QUOTA))
    assert sb.call("write_file", path="a.txt", content="a" * (600 * KIB)).ok
    refused = sb.call("write_file", path="dir/b.txt", content="b" * (600 * KIB))
    assert refused.status == "error" and refused.reason is not None
    assert refused.reason.startswith("workspace_quota_exceeded:"), refused.reason
    assert refused.data["workspace_quota_exceeded"] == {"bytes": 1200 * KIB, "quota": QUOTA}
    assert not (ws / "dir").exists()
    # An overwrite counts the file once: 900 KiB in place of 600 KiB fits.
    assert sb.call("write_file", path="a.txt", content="c" * (900 * KIB)).ok
    assert (ws / "a.txt").stat().st_size == 900 * KIB


def test_a_command_past_the_quota_is_an_error_and_its_changes_are_undone(tmp_path: Path,
                                                                         make_sandbox: Callable[..., Any]) -> None:
    (ws := tmp_path / "ws").mkdir()
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(workspace_bytes=QUOTA))
    assert sb.call("write_file", path="keep.txt", content="kept\n").ok
    assert sb.call("write_file", path="same.txt", content="12345").ok
    snapshots = Path(sb.capabilities["snapshot_dir"])
    stored = _stored_bytes(snapshots)
    # Four files of 400 KiB (1.6 MiB, past the 1 MiB quota), one file of the same size rewritten, one removed.
    script = ("for i in 1 2 3 4; do head -c 409600 /dev/zero | tr '\\0' x > big$i; done; "
              "printf abcde > same.txt; rm keep.txt; echo done")
    result = sb.call("run_command", argv=["sh", "-c", script], timeout=30)
    assert result.status == "error" and result.reason is not None, result
    assert result.reason.startswith("workspace_quota_exceeded:"), result.reason
    over = result.data["workspace_quota_exceeded"]
    assert over["bytes"] == 4 * 409600 + 5 and over["quota"] == QUOTA and over["removed"] == 4
    assert over["rolled_back_to"] == result.data["snapshot_before"]
    assert result.content is not None and "done" in result.content  # the command's own output stays
    assert sorted(os.listdir(ws)) == ["keep.txt", "same.txt"]
    assert (ws / "keep.txt").read_text() == "kept\n" and (ws / "same.txt").read_text() == "12345"
    # The excess never reached the snapshot store (before the quota: 1.6 MiB more on the next snapshot).
    sb.snapshot("after")
    assert _stored_bytes(snapshots) - stored < 64 * KIB


def test_a_command_within_the_quota_is_untouched(tmp_path: Path, make_sandbox: Callable[..., Any]) -> None:
    (ws := tmp_path / "ws").mkdir()
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(workspace_bytes=QUOTA))
    result = sb.call("run_command", argv=["sh", "-c", "head -c 409600 /dev/zero > big; echo ok"], timeout=30)
    assert result.ok and "workspace_quota_exceeded" not in result.data, result
    assert (ws / "big").stat().st_size == 409600


def test_the_default_quota_is_one_gib() -> None:
    assert Quotas().workspace_bytes == 1 << 30


def test_a_command_within_the_quota_costs_one_walk_of_the_tree(tmp_path: Path, make_sandbox: Callable[..., Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The quota is summed by the walk the next snapshot needs anyway: no stat walk of its own (issue 20)."""
    (ws := tmp_path / "ws").mkdir()
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"file {i}\n")
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(workspace_bytes=QUOTA))
    if not sb._scanner.journaled:
        pytest.skip("without a change journal every workspace_hash walks the tree: nothing to count")
    sb.workspace_hash()
    walks: list[str] = []
    scan = Scanner.scan

    def counting(self: Scanner, *args: Any, **kwargs: Any) -> Manifest:
        out = scan(self, *args, **kwargs)
        walks.extend(["walk"] if self.full_last else [])
        return out

    def stat_walk(root_fd: int) -> dict[str, int]:
        walks.append("stat walk")
        return file_sizes(root_fd)

    monkeypatch.setattr(Scanner, "scan", counting)
    monkeypatch.setattr(sandbox_module, "file_sizes", stat_walk)
    result = sb.call("run_command", argv=["sh", "-c", "printf 'made by the command' > new.txt; echo ok"], timeout=30)
    assert result.ok and "workspace_quota_exceeded" not in result.data, result
    walks.clear()  # the snapshot before the command walks the tree (run_command invalidates it): not counted
    sb.call("run_command", argv=["sh", "-c", "printf 'and again' > new2.txt"], timeout=30)
    sb.workspace_hash()
    sb.snapshot("after")
    assert walks == ["walk", "walk"]  # the one before the command (it may hand files over), the one after
    # The file the walk met new is hashed once the total was known to fit.
    assert sb.manifest()["new2.txt"][1] == hashlib.sha256(b"and again").hexdigest()


def test_a_walk_within_a_quota_reads_nothing_new_past_it(tmp_path: Path) -> None:
    (ws := tmp_path / "ws").mkdir()
    (ws / "old.txt").write_bytes(b"o" * 100)
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    scanner = Scanner(fd, BlobStore(str(tmp_path / "blobs")))
    scanner.scan(full=True)
    (ws / "sub").mkdir()
    (ws / "sub" / "new.txt").write_bytes(b"n" * 300)
    assert scanner.walk_within(399) == 400 and scanner.hashed_last == 0  # over: the new file was not read
    assert not scanner.blobs.has(hashlib.sha256(b"n" * 300).hexdigest())  # ... nor stored
    assert scanner.scan()["sub/new.txt"][1] == hashlib.sha256(b"n" * 300).hexdigest()  # the next scan walks
    (ws / "sub" / "new2.txt").write_bytes(b"m" * 50)
    assert scanner.walk_within(450) == 450  # within: read once the total fits
    assert scanner.scan()["sub/new2.txt"][1] == hashlib.sha256(b"m" * 50).hexdigest()
    scanner.close()
    os.close(fd)
