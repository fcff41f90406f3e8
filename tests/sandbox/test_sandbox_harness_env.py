"""A command never sees the harness's environment (issue 17, item 4): a harness started as an unprivileged
user (``setpriv`` to 65534) with a secret in its environment runs a command that reads
``/proc/<harness pid>/environ`` and walks every ``/proc/*/environ`` for the secret. Without a pid namespace
(isolation none) the command runs as the same user, so only the harness being non-dumpable keeps it out;
with bwrap the harness is not even in the command's /proc. As root (unshare, and the uid drop) likewise.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import harness_lab
from harness_lab.sandbox.command import detect_isolation

SECRET_NAME = "HL_PROBE_API_KEY"
NOBODY = 65534

# The command: what it can learn of the harness (pid argv[1]) and of any process holding the secret.
PROBE = (
    "import os,sys\n"
    "name=b'HL_PROBE_API_'+b'KEY='\n"  # split: the probe's own command line must not hold the needle
    "try:\n"
    " data=open('/proc/%s/environ'%sys.argv[1],'rb').read();harness='readable' if name in data else 'other process'\n"
    "except FileNotFoundError: harness='absent'\n"
    "except PermissionError: harness='denied'\n"
    "found=[]\n"
    "for p in os.listdir('/proc'):\n"
    " if p.isdigit():\n"
    "  try:\n"
    "   if name in open('/proc/%s/environ'%p,'rb').read(): found.append(p)\n"
    "  except OSError: pass\n"
    "print('harness=%s found=%s'%(harness,','.join(found)))\n"
)

HARNESS = (
    "import json,os,sys\n"
    "from harness_lab.sandbox import Sandbox, SandboxPolicy\n"
    "ws,snaps,iso,probe=sys.argv[1:5]\n"
    "with Sandbox(ws,policy=SandboxPolicy(isolation=iso),snapshot_dir=snaps) as sb:\n"
    " r=sb.call('run_command',argv=[sys.executable,'-I','-S','-c',probe,str(os.getpid())],timeout=20)\n"
    " print(json.dumps({'status':r.status,'content':r.content,'isolation':r.data.get('isolation'),'uid':os.getuid()}))\n"
)


@pytest.fixture
def shared_dirs() -> Iterator[tuple[Path, Path]]:
    """A workspace and snapshot folder the unprivileged harness owns (pytest's tmp_path is root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="hl-env-probe-"))
    base.chmod(0o755)
    ws, snaps = base / "ws", base / "snaps"
    for d in (ws, snaps):
        d.mkdir()
        os.chown(d, NOBODY, NOBODY)
    yield ws, snaps
    shutil.rmtree(base, ignore_errors=True)


def _python() -> str:
    """An interpreter the unprivileged user can start (the venv's may link into root's home) and that can
    load this checkout's packages; the harness starts its command wrappers with the same one."""
    if _runs_as_nobody(sys.executable):
        return sys.executable
    system = "/usr/bin/python3"
    if os.path.exists(system) and _runs_as_nobody(system) and subprocess.run(
            [system, "-c", f"import sys;sys.exit(sys.version_info[:2]!={tuple(sys.version_info[:2])})"]).returncode == 0:
        return system
    pytest.skip("no Python interpreter of this version that an unprivileged user may execute")


def _runs_as_nobody(python: str) -> bool:
    # exec as the user itself: the harness execs sys.executable again for its command wrapper
    code = "import os,sys;os.execv(sys.executable,[sys.executable,'-c','0'])"
    return subprocess.run([*_DROP, python, "-c", code], capture_output=True, cwd="/").returncode == 0


_DROP = [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def _harness(ws: Path, snaps: Path, isolation: str, *, as_nobody: bool) -> dict[str, str]:
    packages = [*site.getsitepackages(), str(Path(harness_lab.__file__).resolve().parents[1])]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), SECRET_NAME: "sk-secret-the-command-must-not-see",
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", "PYTHONPATH": os.pathsep.join(packages)}
    argv = [*(_DROP if as_nobody else []), _python(), "-c", HARNESS, str(ws), str(snaps), isolation, PROBE]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    out: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _needs_root_and_setpriv() -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to start the harness as another, unprivileged user")


def test_a_non_root_harness_without_a_namespace_hides_its_environment(shared_dirs: tuple[Path, Path]) -> None:
    _needs_root_and_setpriv()
    out = _harness(*shared_dirs, "none", as_nobody=True)
    assert out["uid"] == NOBODY and out["isolation"] == "none" and out["status"] == "ok", out
    # The command runs as the harness's own user and sees its pid, but not its environment.
    assert out["content"].strip() == "harness=denied found=", out


def test_a_non_root_harness_under_bwrap_is_not_in_the_commands_proc(shared_dirs: tuple[Path, Path]) -> None:
    _needs_root_and_setpriv()
    packages = [*site.getsitepackages(), str(Path(harness_lab.__file__).resolve().parents[1])]
    probe = subprocess.run([*_DROP, _python(), "-c", "import os;from harness_lab.sandbox.command import detect_isolation as d;"
                            "print(dict(d('bwrap',os.geteuid()))['kind'])"], capture_output=True, text=True, cwd="/",
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join(packages)})
    if probe.stdout.strip() != "bwrap":
        pytest.skip("bubblewrap cannot make namespaces as an unprivileged user here (no user namespaces)")
    out = _harness(*shared_dirs, "bwrap", as_nobody=True)
    assert out["isolation"] == "bwrap" and out["status"] == "ok", out
    harness, found = out["content"].strip().split()
    assert harness in ("harness=absent", "harness=other process") and found == "found=", out


@pytest.mark.parametrize("isolation", ["bwrap", "unshare", "none"])
def test_a_root_harness_keeps_its_environment_from_commands(shared_dirs: tuple[Path, Path], isolation: str) -> None:
    _needs_root_and_setpriv()
    if dict(detect_isolation(isolation, 0))["kind"] != isolation:
        pytest.skip(f"{isolation} cannot make namespaces here")
    out = _harness(*shared_dirs, isolation, as_nobody=False)
    assert out["isolation"] == isolation and out["status"] == "ok", out
    harness, found = out["content"].strip().split()
    # A namespace hides the harness's pid; without one the command (dropped to its own uid) is denied.
    expected = ("harness=denied",) if isolation == "none" else ("harness=absent", "harness=other process")
    assert harness in expected and found == "found=", out
