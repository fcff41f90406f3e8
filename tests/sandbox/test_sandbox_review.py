"""Defects found by the sandbox review: each test failed before its fix."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import isolation_or_skip, journal_or_skip

from harness_lab.sandbox import Quotas, Sandbox, SandboxPolicy


def test_list_dir_names_that_are_not_utf8_or_hold_newlines_stay_one_serialisable_line_each(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # A command can create any byte string as a name; the listing goes into the context and the
    # checkpoint as JSON text, so it must be valid UTF-8, and one name must not read as two.
    ws = tmp_path / "ws"
    ws.mkdir()
    for raw in (b"a\xffb", b"new\nline", b"plain.txt"):
        fd = os.open(os.path.join(os.fsencode(ws), raw), os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    result = make_sandbox(ws).call("list_dir", path=".")
    assert result.ok
    result.model_dump_json()  # raised UnicodeEncodeError (lone surrogate) before the fix
    (result.content or "").encode("utf-8")
    lines = (result.content or "").splitlines()
    assert len([ln for ln in lines if not ln.startswith("(")]) == 3, lines
    assert "plain.txt" in lines
    assert r"a\xffb" in result.content and r"new\nline" in result.content
    names = {str(e["name"]) for e in result.data["entries"]}
    assert "plain.txt" in names and all(n.isprintable() for n in names)


def test_workspace_hash_after_a_rollback_restores_a_file_a_command_removed(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # The incremental hash sum subtracted a term it had never added: the walk after the command
    # kept the removed file's memo entry, and settling the rollback took it for a counted one.
    ws = tmp_path / "ws"
    ws.mkdir()
    sb = make_sandbox(ws)
    journal_or_skip(sb)
    assert sb.call("write_file", path="a.txt", content="v").ok
    assert sb.call("write_file", path="b.txt", content="w").ok
    before = sb.snapshot("before")
    assert sb.call("run_command", argv=["rm", "a.txt"], timeout=10).ok
    assert sb.workspace_hash() != before.workspace_hash
    sb.rollback(before.id)
    assert (ws / "a.txt").read_text() == "v"
    assert sb.workspace_hash() == before.workspace_hash  # differed before the fix
    assert sb.workspace_hash(rescan=True) == before.workspace_hash


def test_an_enormous_integer_timeout_is_clamped_to_the_policy_not_raised(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # float(10**400) raised OverflowError out of Sandbox.call, which promises never to raise.
    ws = tmp_path / "ws"
    ws.mkdir()
    result = make_sandbox(ws, isolation="none").call("run_command", argv=["true"], timeout=10**400)
    assert result.ok and result.data["timeout"] == 30.0


def test_a_path_that_is_not_valid_utf8_text_is_refused_with_a_serialisable_reason(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # A lone surrogate (e.g. from json.loads('"\\udcff"')) was encoded with surrogateescape: the
    # file b'\xff' was written, and the result echoed the surrogate, which no JSON encoder takes.
    ws = tmp_path / "ws"
    ws.mkdir()
    sb = make_sandbox(ws)
    for tool, args in [("write_file", {"content": "x"}), ("read_file", {}), ("list_dir", {}), ("delete_file", {})]:
        result = sb.call(tool, path="d/\udcff", **args)
        assert result.status == "error" and "UTF-8" in (result.reason or ""), result
        result.model_dump_json()
    assert os.listdir(ws) == []


def test_rolling_back_a_deep_tree_costs_what_the_tree_holds_not_its_depth_squared(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch) -> None:
    # Rollback opened every parent from the root for every path: a command that made a chain of
    # 3000 directories (0.5 s) cost the rollback 4.5 million opens (~2 minutes), and restoring
    # such a chain the same. Counted in directory opens, not timed.
    ws = tmp_path / "ws"
    ws.mkdir()
    sb = make_sandbox(ws, change_tracking="walk")
    depth = 300
    chain = "/".join(["d"] * depth)
    (ws / chain).mkdir(parents=True)
    (ws / chain / "f").write_text("deep")
    deep = sb.snapshot("deep", rescan=True)
    (ws / "keep.txt").write_text("k")
    shutil.rmtree(ws / "d")
    empty = sb.snapshot("empty", rescan=True)
    opens = 0
    real_open = os.open

    def counting_open(*args: Any, **kwargs: Any) -> int:
        nonlocal opens
        opens += 1
        return real_open(*args, **kwargs)

    import harness_lab.sandbox._dirs as dirs_mod
    import harness_lab.sandbox.restore as restore_mod
    monkeypatch.setattr(restore_mod.os, "open", counting_open)
    assert dirs_mod.os is restore_mod.os
    sb.rollback(deep.id)  # restores the chain
    assert (ws / chain / "f").read_text() == "deep"
    restore_opens, opens = opens, 0
    sb.rollback(empty.id)  # removes it again
    assert not (ws / "d").exists() and (ws / "keep.txt").exists()
    remove_opens = opens
    monkeypatch.undo()
    # A full walk opens each directory once (~depth); quadratic was ~depth**2 / 2 = 45000.
    assert restore_opens < 6 * depth, restore_opens
    assert remove_opens < 6 * depth, remove_opens


def test_with_the_network_off_a_host_service_on_a_unix_socket_in_run_is_out_of_reach(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # A network namespace does not cover Unix sockets, which are reached by path, and a read-only
    # bind does not stop connect(): a world-writable service socket in /run (PostgreSQL, D-Bus,
    # journald) answered a command of a sandbox whose result said network "none".
    isolation_or_skip("bwrap")
    ws = tmp_path / "ws"
    ws.mkdir()
    path = f"/run/harness-lab-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
        os.chmod(path, 0o777)
        server.listen(1)
        probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); print('reached')"
        result = make_sandbox(ws, isolation="bwrap").call("run_command", argv=["python3", "-c", probe], timeout=10)
    finally:
        server.close()
        os.unlink(path)
    assert result.data["network"] == "none (private namespace)"
    assert "reached" not in (result.content or ""), result.content
    assert result.status == "error"


def test_list_dir_output_is_capped_like_read_file_and_run_command(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # read_file and run_command stop at quotas.output_bytes; list_dir returned every entry, so a
    # command that made a million files made one listing of megabytes (and a million entries).
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(200):
        (ws / f"file-{i:04d}.txt").write_text("")
    result = make_sandbox(ws, quotas=Quotas(output_bytes=1000)).call("list_dir", path=".")
    assert result.ok
    assert len((result.content or "").encode()) <= 1000 + 200  # the listing, then one note line
    assert result.data["truncated"] is True and result.data["total"] == 200
    assert len(result.data["entries"]) < 200
    assert "more entries" in (result.content or "").splitlines()[-1]


def test_read_file_cut_inside_a_utf8_character_is_still_text(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # The cap at output_bytes can fall inside a multi-byte character: the file was then reported
    # binary, with a replacement character at the end of its text.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("局限" * 10, encoding="utf-8")  # 3 bytes each
    result = make_sandbox(ws, quotas=Quotas(output_bytes=10)).call("read_file", path="notes.txt")
    assert result.ok and result.data["truncated"] is True
    assert result.data["binary"] is False and result.content == "局限局"


def test_under_unshare_a_command_cannot_read_the_command_lines_of_host_processes(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # unshare --pid without a proc of its own left the host's /proc mounted: a command listed
    # every host process and read its command line (world-readable), e.g. a key passed as a flag.
    isolation_or_skip("unshare")
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = f"--api-key=sk-test-{os.getpid()}"
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        probe = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
        result = make_sandbox(ws, isolation="unshare").call("run_command", argv=["sh", "-c", probe], timeout=10)
    finally:
        host.kill()
        host.wait()
    assert marker not in (result.content or "")
    assert "sh -c" in (result.content or "")  # its own processes are still there


def test_a_non_root_rollback_restores_into_and_removes_from_read_only_directories() -> None:
    # As a plain user (a lab on a laptop), rollback chmod'ed a directory back to 0o555 and then
    # could not write the files beneath it: PermissionError, the workspace left half restored.
    # Run as an unprivileged uid in a child process (root ignores permission bits).
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid for the check")
    base = Path(tempfile.mkdtemp(prefix="hl-nonroot-"))  # pytest's tmp_path lies under a 0o700 dir
    base.chmod(0o777)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            ws, ro = base / "ws", base / "ws" / "ro"
            ro.mkdir(parents=True)
            (ro / "f").write_text("v1")
            (ro / "gone" / "deep").mkdir(parents=True)
            ro.chmod(0o555)
            sb = Sandbox(ws, snapshot_dir=base / "snaps", policy=SandboxPolicy(change_tracking="walk"))
            before = sb.snapshot("before")
            ro.chmod(0o755)
            (ro / "f").write_text("v2")
            (ro / "extra").mkdir()
            (ro / "extra" / "x").write_text("x")
            (ro / "extra").chmod(0o555)
            (ro / "gone" / "deep").rmdir()
            ro.chmod(0o555)
            sb.rollback(before.id)
            ok = ((ro / "f").read_text() == "v1" and sorted(os.listdir(ro)) == ["f", "gone"]
                  and (ro / "gone" / "deep").is_dir() and ro.stat().st_mode & 0o777 == 0o555
                  and sb.workspace_hash(rescan=True) == before.workspace_hash)
            code = 0 if ok else 2
            sb.close()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    for d, _, _ in os.walk(base):
        os.chmod(d, 0o755)
    shutil.rmtree(base)
    assert os.waitstatus_to_exitcode(status) == 0
