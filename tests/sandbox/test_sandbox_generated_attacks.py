"""Generated attacks: hypothesis composes paths from escape-prone tokens and throws them at every tool.

The property is the definition of "no escape": whatever the path, the outside never changes, the
secret never appears in a result, the call returns within 2 s, and an ``ok`` result only ever names a
path that is lexically inside the workspace and goes through no symlink.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sbhelpers import RESOLUTIONS, SECRET, build_world, guarded, outside_state

from harness_lab.sandbox import Sandbox, SandboxPolicy

_TOKENS = ["..", ".", "", "sub", "inner.txt", "real.txt", "link_file", "link_rel", "link_dir", "link_dir_rel",
           "dangling", "loop1", "self_loop", "proc_root", "proc_cwd", "hard", "fifo", "devnull", "outside",
           "secret.txt", "ws-evil", "etc", "passwd", "up", "up2", "new.txt", "x" * 256, "\x00", "~", "-",
           "\udcff", "\ud800", "é", "a b", "\n", "*"]
_TOOLS = ["read_file", "write_file", "list_dir", "delete_file"]


def _paths(ws: str, outside: str) -> st.SearchStrategy[str]:
    rel = st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=6).map("/".join)
    prefix = st.sampled_from(["", "/", "./", ws + "/", ws + "-evil/", outside + "/", "/proc/self/cwd/", "//"])
    return st.builds(lambda p, r: p + r, prefix, rel)


def _legit(path: str, ws: str) -> bool:
    """Oracle, computed before the call: may a correct sandbox return ok for this path?"""
    rel = path[len(ws) + 1:] if path.startswith(ws + "/") else path
    if rel.startswith("/") or "\x00" in rel:
        return False
    try:
        os.fsencode(rel)
    except UnicodeEncodeError:
        return False  # not representable as a file name at all
    names = [n for n in rel.split("/") if n not in ("", ".")]
    if ".." in names or any(len(os.fsencode(n)) > 255 for n in names):
        return False
    here = ws
    for name in names:
        here = os.path.join(here, name)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return True  # the rest does not exist yet: only a create inside can succeed
        except NotADirectoryError:
            return False
        if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return False
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return False
    return True


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_generated_paths_never_escape(tmp_path_factory: pytest.TempPathFactory, resolution: str) -> None:
    base = tmp_path_factory.mktemp(f"gen-{resolution}")
    world = build_world(base)
    ws, outside = str(world["ws"]), str(world["outside"])
    sb = Sandbox(ws, policy=SandboxPolicy(path_resolution=resolution), snapshot_dir=base / "snaps")
    before = outside_state(world)
    counts = {"ok": 0, "refused": 0}

    @settings(max_examples=400, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(path=_paths(ws, outside), tool=st.sampled_from(_TOOLS))
    def attack(path: str, tool: str) -> None:
        args: dict[str, Any] = {"path": path}
        if tool == "write_file":
            args["content"] = "generated"
        legit = _legit(path, ws)
        result = guarded(lambda: sb.call(tool, **args))
        assert SECRET not in (result.content or "") and SECRET not in str(result.data)
        assert outside_state(world) == before, (tool, path)
        if result.ok:
            counts["ok"] += 1
            assert legit, (tool, path, result)
        else:
            counts["refused"] += 1
            assert result.status in ("denied", "error")

    try:
        attack()
    finally:
        sb.close()
    assert counts["refused"] > 100  # the generator really produced attacks
    assert os.path.islink(Path(ws) / "link_file")
