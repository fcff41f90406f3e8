"""What a rollback of a changed file costs: one copy of the blob, and no rename over a regular file.

ext4 writes a file's data out before a rename over an existing regular file returns (auto_da_alloc):
half the wall time of restoring 8 MiB. The restore unlinks the old name first, then renames the
fresh copy in; it still never writes through what is there (hard links keep their bytes).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness_lab.sandbox import Sandbox
from harness_lab.sandbox import restore as restore_mod


def test_a_restored_file_is_never_renamed_over_an_existing_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.bin").write_bytes(b"a" * (1 << 20))
    (ws / "link.txt").symlink_to("big.bin")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    time.sleep(0.06)
    renames: list[tuple[str, bool]] = []
    real = os.rename

    def spy(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        renames.append((dst, os.path.lexists(f"/proc/self/fd/{dst_dir_fd}/{dst}")))
        real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    with Sandbox(ws, snapshot_dir=tmp_path / "snaps") as sb:
        snap = sb.snapshot("before")
        (ws / "big.bin").write_bytes(b"b" * (1 << 20))
        (ws / "link.txt").unlink()
        os.link(outside, ws / "link.txt")  # a hard link to an outside file where the symlink was
        monkeypatch.setattr(restore_mod.os, "rename", spy)
        sb.rollback(snap.id)
        monkeypatch.undo()
        assert sorted(renames) == [("big.bin", False), ("link.txt", False)]
        assert (ws / "big.bin").read_bytes() == b"a" * (1 << 20)
        assert os.readlink(ws / "link.txt") == "big.bin"
        assert outside.read_text() == "outside\n" and outside.stat().st_nlink == 1
        assert sb.workspace_hash() == snap.workspace_hash
