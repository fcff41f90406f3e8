"""Attack suite for the file tools, organised by escape class; every attack on every tool, both resolvers.

An escape is: any outside file read (the secret appears in a result), changed or created, or a call
that hangs. Each class asserts the exact refusal status; the table is crossed with all four file
tools and both path-resolution mechanisms (openat2 and the O_NOFOLLOW walk).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import SECRET, guarded, outside_state

from harness_lab.sandbox import Sandbox

FILE_TOOLS = ["read_file", "write_file", "list_dir", "delete_file"]


def _args(tool: str, path: Any) -> dict[str, Any]:
    return {"path": path, "content": "pwned"} if tool == "write_file" else {"path": path}


def _attacks(world: dict[str, Path]) -> dict[str, list[Any]]:
    ws, outside, evil = str(world["ws"]), str(world["outside"]), str(world["evil"])
    return {
        "dotdot": ["..", "../outside/secret.txt", "sub/../../outside/secret.txt", "./../ws-evil/secret.txt",
                   "sub/..", "a/b/../../../outside/secret.txt", f"{ws}/../outside/secret.txt",
                   "..//..//etc/passwd", "sub/./../../outside", "../" * 40 + "etc/passwd"],
        "absolute_outside": ["/etc/passwd", f"{outside}/secret.txt", outside, "/", "//etc//passwd",
                             "/proc/self/environ", "/proc/self/root/etc/passwd", "/dev/null", "/tmp"],
        "sibling_prefix": [f"{ws}-evil/secret.txt", evil, f"{ws}-evil", f"{ws}x/secret.txt",
                           f"{ws}/../ws-evil/secret.txt"],
        "symlink_file": ["link_file", "link_rel", "inside_link", "./link_file", "sub/../link_file"],
        "symlink_dir": ["link_dir", "link_dir_rel", "link_dir/", "link_dir/.", "sub/up2"],
        "symlink_middle": ["link_dir/secret.txt", "link_dir_rel/secret.txt", "sub/up/sub/inner.txt",
                           "sub/up2/secret.txt", "link_dir/new.txt", "proc_root/etc/passwd"],
        "symlink_dangling": ["dangling", "dangling/child", "./dangling"],
        "symlink_loop": ["loop1", "loop2", "self_loop", "loop1/x", "self_loop/self_loop"],
        "magic_link": ["proc_root", "proc_cwd", "proc_fd", "proc_cwd/real.txt", "proc_root/tmp"],
        "hard_link": ["hard", "./hard"],
        "special_file": ["fifo", "devnull", "./fifo"],
        "over_long": ["a" * 256, "a/" * 2100 + "b", ("x" * 250 + "/") * 20, "b" * 5000],
        "nul_byte": ["real.txt\x00", "a\x00/../../etc/passwd", "\x00"],
    }


# Classes whose every attempt must come back "denied" (not merely "error") on every tool.
_STRICT = {"dotdot", "absolute_outside", "sibling_prefix", "symlink_file", "symlink_dangling",
           "symlink_loop", "magic_link", "over_long", "nul_byte"}


def _assert_no_escape(result: Any, world: dict[str, Path], before: list[Any]) -> None:
    assert result.status != "ok", result
    assert SECRET not in (result.content or "")
    assert SECRET not in str(result.data)
    assert outside_state(world) == before


@pytest.mark.parametrize("tool", FILE_TOOLS)
@pytest.mark.parametrize("escape_class", [
    "dotdot", "absolute_outside", "sibling_prefix", "symlink_file", "symlink_dir", "symlink_middle",
    "symlink_dangling", "symlink_loop", "magic_link", "hard_link", "special_file", "over_long", "nul_byte",
])
def test_every_attack_is_refused(world: dict[str, Path], make_sandbox: Any, resolution: str,
                                 tool: str, escape_class: str) -> None:
    if escape_class == "special_file" and not (world["ws"] / "devnull").exists():
        pytest.skip("device node needs root to create (run as root, as CI does)")
    sb: Sandbox = make_sandbox(world["ws"], path_resolution=resolution)
    before = outside_state(world)
    for path in _attacks(world)[escape_class]:
        result = guarded(lambda p=path: sb.call(tool, **_args(tool, p)))
        _assert_no_escape(result, world, before)
        if escape_class in _STRICT or tool in ("read_file", "write_file"):
            assert result.status == "denied", (path, result)
        assert sb.last_auto_snapshot is None, "a refused call must not be acted on, not even snapshotted"
    # the traps are still in place: nothing was deleted by a refused delete
    assert os.path.islink(world["ws"] / "link_file") and os.path.exists(world["ws"] / "hard")


@pytest.mark.parametrize("tool", FILE_TOOLS)
def test_fifo_never_blocks(world: dict[str, Path], make_sandbox: Any, resolution: str, tool: str) -> None:
    sb: Sandbox = make_sandbox(world["ws"], path_resolution=resolution)
    result = guarded(lambda: sb.call(tool, **_args(tool, "fifo")))
    assert result.status == ("error" if tool == "list_dir" else "denied")
    assert "special" in (result.reason or "") or tool == "list_dir"


def test_hard_link_rule_is_stated_and_outside_file_untouched(world: dict[str, Path], make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(world["ws"])
    for tool in ("read_file", "write_file", "delete_file"):
        result = sb.call(tool, **_args(tool, "hard"))
        assert result.status == "denied"
        assert "hard links" in (result.reason or "")
    assert (world["outside"] / "secret.txt").read_text() == SECRET
    assert os.stat(world["outside"] / "secret.txt").st_nlink == 2


def test_legitimate_paths_still_work(world: dict[str, Path], make_sandbox: Any, resolution: str) -> None:
    sb: Sandbox = make_sandbox(world["ws"], path_resolution=resolution)
    assert sb.capabilities["path_resolution"] == resolution
    assert sb.call("read_file", path="real.txt").content == "inside"
    assert sb.call("read_file", path=f"{world['ws']}/sub/inner.txt").content == "inner"
    assert sb.call("read_file", path="./sub//inner.txt").content == "inner"
    assert sb.call("write_file", path="new/deep/file.txt", content="x").ok
    assert (world["ws"] / "new" / "deep" / "file.txt").read_text() == "x"
    listing = sb.call("list_dir", path=".")
    assert listing.ok and "link_dir@" in (listing.content or "") and "sub/" in (listing.content or "")
    assert sb.call("delete_file", path="new/deep/file.txt").ok
    assert sb.call("read_file", path="missing.txt").status == "error"


def test_symlink_swap_race_never_escapes(world: dict[str, Path], make_sandbox: Any, resolution: str) -> None:
    """A thread flips ws/flip between a real directory and a symlink to outside while we read through it."""
    ws = world["ws"]
    sb: Sandbox = make_sandbox(ws, path_resolution=resolution)
    real, link, flip = ws / "flip_real", ws / "flip_link", ws / "flip"
    real.mkdir()
    (real / "secret.txt").write_text("harmless")
    os.symlink(world["outside"], link)
    stop = threading.Event()

    def flipper() -> None:
        tmp = ws / "flip_tmp"
        while not stop.is_set():
            for src in (real, link):
                try:
                    if src == real:
                        os.symlink("flip_real", tmp)  # an inside symlink is also refused
                        os.replace(tmp, flip)
                        os.replace(flip, ws / "flip_hold")
                        os.rename(real, flip)
                        os.rename(flip, real)
                        os.replace(ws / "flip_hold", flip)
                    else:
                        os.symlink(str(world["outside"]), tmp)
                        os.replace(tmp, flip)
                except OSError:
                    pass

    t = threading.Thread(target=flipper, daemon=True)
    t.start()
    before = outside_state(world)
    try:
        for i in range(300):
            tool = FILE_TOOLS[i % 4]
            result = guarded(lambda tool=tool: sb.call(tool, **_args(tool, "flip/secret.txt")))
            assert SECRET not in (result.content or "")
            if tool != "read_file":
                assert outside_state(world) == before
    finally:
        stop.set()
        t.join(2)
    assert outside_state(world) == before


def test_bad_inputs_are_errors_not_exceptions(world: dict[str, Path], make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(world["ws"])
    for path in (None, 123, b"real.txt", ["real.txt"], {"p": 1}):
        for tool in FILE_TOOLS:
            if tool == "list_dir" and path is None:
                continue
            result = sb.call(tool, **_args(tool, path))
            assert result.status == "error", (tool, path, result)
    assert sb.call("write_file", path="a.txt", content=b"bytes").status == "error"
    assert sb.call("write_file", path="a.txt").status == "error"
    assert sb.call("read_file", path="real.txt", mode="rb").status == "error"
    assert sb.call("format_disk").status == "error"
    assert sb.call("read_file", path="").status == "error"
    assert sb.call("write_file", path=".", content="x").status == "error"
    assert sb.call("write_file", path="u.txt", content="\ud800 unpaired").status == "error"
    assert sb.call("write_file", path="\ud800.txt", content="x").status in ("error", "denied")
    assert sb.call("read_file", path="\udcff").status in ("error", "denied")


def test_denied_by_policy(world: dict[str, Path], make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(world["ws"], mode="read-only")
    assert sb.call("read_file", path="real.txt").ok
    for tool in ("write_file", "delete_file"):
        result = sb.call(tool, **_args(tool, "real.txt"))
        assert result.status == "denied" and "read-only" in (result.reason or "")
    assert (world["ws"] / "real.txt").read_text() == "inside"
    sb2: Sandbox = make_sandbox(world["ws"], allowed_tools=frozenset({"read_file"}))
    assert sb2.call("list_dir").status == "denied"


def test_calls_are_fast(world: dict[str, Path], make_sandbox: Any) -> None:
    sb: Sandbox = make_sandbox(world["ws"])
    start = time.process_time()  # CPU time of this process: a loaded machine does not inflate it
    for _ in range(200):
        assert sb.call("read_file", path="sub/inner.txt").ok
    assert time.process_time() - start < 2.0
