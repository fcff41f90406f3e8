"""A harness whose own hard rlimits are lower than its quotas (issue 17, item 8): every command failed with
an unexplained "SubprocessError" (setrlimit above the hard limit, between fork and exec). Now the command
gets the hard limit instead and the result data names each clamped limit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _may_raise_hard_limits() -> bool:
    """Root with CAP_SYS_RESOURCE (bit 24 of CapEff); containers often drop it."""
    with open("/proc/self/status", encoding="ascii") as fh:
        eff = next(line.split()[1] for line in fh if line.startswith("CapEff:"))
    return os.geteuid() == 0 and bool(int(eff, 16) >> 24 & 1)

HARNESS = (
    "import json,sys\n"
    "from harness_lab.sandbox import Sandbox, SandboxPolicy\n"
    "ws,snaps,iso=sys.argv[1:4]\n"
    "with Sandbox(ws,policy=SandboxPolicy(isolation=iso),snapshot_dir=snaps) as sb:\n"
    " r=sb.call('run_command',argv=['sh','-c','ulimit -n'],timeout=20)\n"
    " print(json.dumps({'status':r.status,'reason':r.reason,'content':r.content,\n"
    "                   'clamped':r.data.get('rlimits_clamped')}))\n"
)


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_lower_hard_limit_than_the_quota_is_clamped_and_said(tmp_path: Path, isolation: str) -> None:
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("needs prlimit (util-linux) to start a harness under a lower hard limit")
    (tmp_path / "ws").mkdir()
    done = subprocess.run([prlimit, "--nofile=64:64", sys.executable, "-c", HARNESS, str(tmp_path / "ws"),
                           str(tmp_path / "snaps"), isolation], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok", out
    if _may_raise_hard_limits():  # a root harness with CAP_SYS_RESOURCE raises the limit: the quota holds
        assert out["content"].strip() == "256" and out["clamped"] is None, out
    else:
        assert out["content"].strip() == "64", out
        assert out["clamped"] == {"RLIMIT_NOFILE": {"quota": 256, "hard_limit": 64}}, out
