"""A bind mount inside the workspace of a folder (and of a file) outside it, on the same file system, so
``st_dev`` is the same on both sides (issue 17, item 8): the walk resolution let it through; it now
compares mount ids, and openat2 (RESOLVE_NO_XDEV) refuses it too. Made for real, as root, in a private
mount namespace (an ``unshare -m`` child), so nothing reaches the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, subprocess, sys, tempfile
from harness_lab.sandbox import Sandbox, SandboxPolicy
from harness_lab.sandbox.boundary import openat2_available
base = tempfile.mkdtemp(prefix="hl-bind-")
ws, out = base + "/ws", base + "/outside"
os.makedirs(ws + "/inner"); os.makedirs(out)
with open(out + "/secret.txt", "w") as fh: fh.write("SECRET")
with open(ws + "/report.md", "w") as fh: fh.write("mine")
subprocess.run(["mount", "--bind", out, ws + "/inner"], check=True)
subprocess.run(["mount", "--bind", out + "/secret.txt", ws + "/report.md"], check=True)
assert os.stat(ws + "/inner").st_dev == os.stat(ws).st_dev  # the case st_dev cannot tell
modes = ["walk"] + (["openat2"] if openat2_available(os.open(ws, os.O_RDONLY)) else [])
res = {}
for mode in modes:
    sb = Sandbox(ws, policy=SandboxPolicy(path_resolution=mode), snapshot_dir=base + "/snaps-" + mode)
    for tool, path in [("read_file", "inner/secret.txt"), ("list_dir", "inner"), ("read_file", "report.md"),
                       ("write_file", "inner/new.txt")]:
        args = {"path": path, "content": "x"} if tool == "write_file" else {"path": path}
        r = sb.call(tool, **args)
        res[f"{mode} {tool} {path}"] = [r.status, r.reason or "", r.content or ""]
    sb.close()
res["outside"] = sorted(os.listdir(out))
print(json.dumps(res))
"""


def test_a_same_device_bind_mount_in_the_workspace_is_refused() -> None:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare to make a bind mount in a private mount namespace")
    done = subprocess.run([unshare, "-m", "--propagation", "private", sys.executable, "-c", PROBE],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and "mount" in done.stderr and "permission denied" in done.stderr.lower():
        pytest.skip(f"cannot mount here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    res = json.loads(done.stdout.strip().splitlines()[-1])
    assert res.pop("outside") == ["secret.txt"]  # nothing was written through the mount
    assert any(k.startswith("walk ") for k in res)
    for key, (status, reason, content) in res.items():
        assert status == "denied", (key, status, reason)
        assert "SECRET" not in content and "secret.txt" not in content
        assert "mount" in reason, (key, reason)
