"""run_command containment: timeout, fork bomb, memory, output, network, environment, rlimits, attacks."""

from __future__ import annotations

import os
import re
import resource
import socket
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import SECRET, assert_no_process_left, build_world, isolation_or_skip, outside_state

from harness_lab.sandbox import Quotas, Sandbox

PY = "/usr/bin/python3"  # a system interpreter the dropped uid can execute (venvs may live in /root)


@pytest.fixture(autouse=True)
def _needs_isolation() -> None:
    isolation_or_skip()
    if not os.access(PY, os.X_OK):
        pytest.skip(f"needs {PY} (apt-get install python3)")




def _assert_nothing_left(sb: Sandbox) -> None:
    assert_no_process_left(sb.capabilities["uid_drop"])


def test_capabilities_say_what_is_applied(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    caps = sb.capabilities
    assert caps["isolation"] in ("bwrap", "unshare")
    assert caps["network_namespace"] is True and caps["pid_namespace"] is True
    assert isinstance(caps["uid_drop"], int) and caps["uid_drop"] > 0
    result = sb.call("run_command", argv=["id", "-u"])
    assert result.ok and result.content is not None
    assert int(result.content.strip()) == caps["uid_drop"]
    assert result.data["isolation"] == caps["isolation"]
    assert result.data["network"].startswith("none")


def test_cwd_is_workspace_and_writes_land_there(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    assert sb.call("write_file", path="in.txt", content="from tool").ok
    result = sb.call("run_command", argv=["sh", "-c", "pwd; cat in.txt; echo made > out.txt; echo more >> in.txt"])
    assert result.ok, result
    assert result.content is not None and result.content.splitlines()[:2] == [str(ws), "from tool"]
    assert (ws / "out.txt").read_text() == "made\n"
    assert (ws / "in.txt").read_text() == "from toolmore\n"
    assert result.exit_status == 0


def test_sleep_past_timeout_ends_within_timeout_plus_one(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    result = sb.call("run_command", argv=["sh", "-c", "sleep 30 & sleep 30"], timeout=1)
    # Events, not a wall-clock bound (a loaded host stretches any): the deadline fired (status timeout,
    # never before the timeout: a monotonic lower bound) and both sleeps are gone, so it cannot run on.
    assert result.status == "timeout" and result.retryable and result.data["elapsed"] >= 1.0
    _assert_nothing_left(sb)


def test_timeouts_by_tool_type_and_caller_cannot_extend(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws, timeouts={"default": 5, "query": 0.5, "install": 300})
    result = sb.call("run_command", argv=["sleep", "10"], tool_type="query", timeout=60)
    assert result.status == "timeout" and result.data["timeout"] == 0.5  # the query limit, not the caller's 60
    assert sb.call("run_command", argv=["true"], tool_type="nope").status == "error"
    assert sb.call("run_command", argv=["true"], tool_type="install").data["timeout"] == 300


def test_fork_bomb_is_stopped_and_leaves_nothing(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(max_processes=24), isolation=iso)
    result = sb.call("run_command", argv=["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 5"], timeout=1)
    assert result.status in ("timeout", "error")
    _assert_nothing_left(sb)


def test_process_limit_holds_even_though_parent_is_root(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(max_processes=12), isolation=iso)
    code = ("import os,time\nn=0\nkids=[]\n"
            "try:\n    for _ in range(100):\n        pid=os.fork()\n"
            "        if pid==0:\n            time.sleep(2); os._exit(0)\n        kids.append(pid); n+=1\n"
            "except OSError as e:\n    print('refused', e.errno)\nprint('forked', n)\n")
    result = sb.call("run_command", argv=[PY, "-c", code], timeout=10)
    assert result.content is not None and "refused 11" in result.content  # EAGAIN
    forked = int(result.content.split("forked")[1])
    assert forked < 12
    _assert_nothing_left(sb)


def test_memory_hog_is_stopped(ws: Path, make_sandbox: Any, iso: str) -> None:
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(memory_bytes=256 * 1024 * 1024), isolation=iso)
    result = sb.call("run_command", argv=[PY, "-c", "b = bytearray(1 << 30); print('allocated', len(b))"])
    assert result.status == "error" and result.exit_status not in (0, None)
    assert "allocated" not in (result.content or "")
    assert "MemoryError" in (result.content or "")


def test_endless_output_is_capped_and_killed(ws: Path, make_sandbox: Any, iso: str) -> None:
    cap = 256 * 1024
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(output_bytes=cap), isolation=iso)
    result = sb.call("run_command", argv=["yes", "spam"], timeout=20)
    assert result.status == "error" and "output exceeded" in (result.reason or "")  # killed at the cap, not the timeout
    assert result.data["truncated"] is True and len(result.content or "") == cap
    _assert_nothing_left(sb)


def test_default_output_cap_is_about_ten_mib(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws)
    assert sb.policy.quotas.output_bytes == 10 * 1024 * 1024
    result = sb.call("run_command", argv=["sh", "-c", "head -c 11000000 /dev/zero | tr '\\0' a"], timeout=20)
    assert result.status == "error" and len(result.content or "") == 10 * 1024 * 1024


def test_network_is_off(ws: Path, make_sandbox: Any, iso: str) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.3)
    port = server.getsockname()[1]
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    code = ("import socket,sys\nfor host in sys.argv[1:]:\n    try:\n"
            "        socket.create_connection((host, int(PORT)), timeout=2); print('CONNECTED', host)\n"
            "    except OSError as e:\n        print('failed', host, e.errno)\n").replace("PORT", str(port))
    try:
        result = sb.call("run_command", argv=[PY, "-c", code, "127.0.0.1", "1.1.1.1", "10.0.0.1"], timeout=10)
        assert result.ok and "CONNECTED" not in (result.content or "")
        assert (result.content or "").count("failed") == 3
        with pytest.raises(socket.timeout):
            server.accept()
    finally:
        server.close()


def test_environment_is_scrubbed(ws: Path, make_sandbox: Any, iso: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HL_TEST_API_KEY", "sk-should-never-leak")
    sb: Sandbox = make_sandbox(ws, isolation=iso)
    result = sb.call("run_command", argv=["env"])
    assert result.ok and "sk-should-never-leak" not in (result.content or "")
    names = {line.split("=", 1)[0] for line in (result.content or "").splitlines()}
    assert names <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TERM", "PWD", "SHLVL", "_"}


@pytest.mark.parametrize("isolation", ["auto", "unshare"])  # unshare: what a machine without bubblewrap gets
def test_cpu_file_size_and_open_file_limits(ws: Path, make_sandbox: Any, isolation: str) -> None:
    isolation_or_skip(isolation)
    sb: Sandbox = make_sandbox(ws, quotas=Quotas(cpu_seconds=1, file_size_bytes=1 << 20, open_files=16),
                               isolation=isolation)
    # CPU time, not wall time: on a busy machine a 1 s CPU limit can take many seconds of wall clock.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spin = sb.call("run_command", argv=[PY, "-c", "while True: pass"], timeout=10)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert spin.status == "error" and cpu < 3.0, f"the 1 s CPU limit let the command spin {cpu:.1f} s of CPU"
    assert spin.data.get("signal") in ("SIGXCPU", "SIGKILL") or (spin.exit_status or 0) > 128
    big = sb.call("run_command", argv=["sh", "-c", "head -c 3000000 /dev/zero > big.bin"])
    assert big.status == "error" and (ws / "big.bin").stat().st_size <= 1 << 20
    files = sb.call("run_command", argv=[PY, "-c", "[open('/dev/null') for _ in range(64)]"])
    assert files.status == "error" and "Too many open files" in (files.content or "")


def test_command_cannot_touch_outside_or_plant_escapes(tmp_path: Path, make_sandbox: Any) -> None:
    world = build_world(tmp_path)
    ws, outside = world["ws"], world["outside"]
    sb: Sandbox = make_sandbox(ws)
    before = outside_state(world)
    script = (f"echo pwned > {outside}/secret.txt; echo pwned > {outside}/new.txt; rm -f {outside}/secret.txt;"
              f"ln -s {outside}/secret.txt planted_link; ln {outside}/secret.txt planted_hard;"
              "mkfifo planted_fifo; ln -s /proc/self/root planted_magic; touch /etc/pwned; echo done")
    result = sb.call("run_command", argv=["sh", "-c", script])
    assert "done" in (result.content or "")
    assert outside_state(world) == before and not os.path.exists("/etc/pwned")
    planted = [n for n in ("planted_link", "planted_hard", "planted_fifo", "planted_magic")
               if os.path.lexists(ws / n)]  # the hard link fails: outside is not even visible in bwrap
    assert {"planted_link", "planted_fifo", "planted_magic"} <= set(planted)
    for name in planted:
        for tool in ("read_file", "write_file", "delete_file"):
            args = {"path": name, "content": "x"} if tool == "write_file" else {"path": name}
            got = sb.call(tool, **args)
            assert got.status in ("denied", "error") and SECRET not in (got.content or "")
    assert outside_state(world) == before


def test_read_only_mode_mounts_workspace_read_only(ws: Path, make_sandbox: Any) -> None:
    (ws / "a.txt").write_text("keep")
    sb: Sandbox = make_sandbox(ws, mode="read-only")
    if sb.capabilities["isolation"] != "bwrap":
        assert sb.call("run_command", argv=["true"]).status == "denied"
        return
    result = sb.call("run_command", argv=["sh", "-c", "cat a.txt; echo x > a.txt"])
    assert result.status == "error" and "keep" in (result.content or "")
    assert (ws / "a.txt").read_text() == "keep"


def test_bad_command_arguments_are_errors(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws)
    for args in ({"argv": []}, {"argv": "ls -l"}, {"argv": [1, 2]}, {"argv": ["ls"], "timeout": -1},
                 {"argv": ["ls"], "timeout": "5"}, {"argv": ["a\x00b"]}, {}, {"argv": ["ls"], "shell": True}):
        assert sb.call("run_command", **args).status == "error", args
    missing = sb.call("run_command", argv=["definitely-not-a-program-xyz"])
    assert missing.status == "error" and missing.exit_status == 127


def test_without_namespaces_the_sandbox_says_so_and_still_limits(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws, isolation="none", quotas=Quotas(max_processes=12))
    caps = sb.capabilities
    assert caps["isolation"] == "none" and caps["network_namespace"] is False
    assert any("network" in m for m in caps["missing"])
    ok = sb.call("run_command", argv=["id", "-u"])
    assert ok.ok and ok.data["network"] == "host" and ok.data["missing"] == caps["missing"]
    assert int((ok.content or "0").strip()) == caps["uid_drop"]
    res = sb.call("run_command", argv=["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 5"], timeout=1)
    assert res.status in ("timeout", "error")
    assert re.search(r"Cannot fork|fork: ", res.content or ""), res.content  # RLIMIT_NPROC stopped it
    _assert_nothing_left(sb)


def test_end_of_output_is_not_end_of_command(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws)
    for _ in range(10):  # coreutils close stdout before exiting: never mistaken for a kill
        res = sb.call("run_command", argv=["id", "-u"])
        assert res.ok and res.exit_status == 0, res
    res = sb.call("run_command", argv=["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout=1)
    assert res.status == "timeout" and res.data["elapsed"] >= 1.0  # waited for the process, not the closed output
    _assert_nothing_left(sb)


def test_files_added_behind_the_sandbox_back_are_writable_by_commands(ws: Path, make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(ws)
    assert sb.call("run_command", argv=["true"]).ok
    (ws / "late").mkdir()
    (ws / "late" / "by_root.txt").write_text("root wrote this")  # e.g. the runtime, as root
    res = sb.call("run_command", argv=["sh", "-c", "echo edited > late/by_root.txt && touch late/new"])
    assert res.ok, res
    assert (ws / "late" / "by_root.txt").read_text() == "edited\n"
