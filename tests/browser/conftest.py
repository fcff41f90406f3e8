"""A JupyterLab server for the browser tests: on 127.0.0.1 with a token, over an empty folder the
test fills (a copy of a lesson, a notebook it writes), so no repository notebook is saved over.

Skipped where /usr/bin/chromium is absent (install it with ``apt-get install chromium``); with
HARNESS_LAB_REQUIRE_BROWSER=1 (set by .ci/run) a missing chromium fails instead.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium) to run the browser test"
    if os.environ.get("HARNESS_LAB_REQUIRE_BROWSER") == "1":
        pytest.fail(message + " (HARNESS_LAB_REQUIRE_BROWSER=1: this run must not skip it)")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def jupyter_lab(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(base URL, token, the folder it serves); the server stops after the test."""
    _require_chromium()
    root = tmp_path / "nb"
    root.mkdir()
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "JUPYTER_PLATFORM_DIRS": "1",
           "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config")}
    args = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip", "127.0.0.1", f"--port={port}",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:
        args.append("--allow-root")
    log = (tmp_path / "jupyter.log").open("w")
    server = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyter.log").read_text()[-3000:])
                time.sleep(0.3)
        yield base, token, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def run_all_in_chromium(jupyter_lab: tuple[str, str, Path]) -> Callable[[Any, str, dict[str, int]], Any]:
    """``run_all(pw, notebook, viewport)``: a page in Debian's chromium (closed with the playwright
    context) on ``notebook`` in the server's folder, the kernel attached (its name shown and its status
    idle) before every cell is run from the Run menu; returns the page."""
    base, token, _root = jupyter_lab

    def run_all(pw: Any, notebook: str, viewport: dict[str, int]) -> Any:
        from playwright.sync_api import expect

        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=viewport)
        page.set_default_timeout(60_000)
        expect.set_options(timeout=60_000)  # a cold JupyterLab and kernel take seconds, not milliseconds
        page.goto(f"{base}/lab/tree/{notebook}?token={token}")
        expect(page.locator(".jp-NotebookPanel-toolbar .jp-KernelName, .jp-NotebookPanel-toolbar "
                            "[data-jp-item-name='kernelName']").first).to_contain_text("harness-lab")
        expect(page.locator(".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator").first
               ).to_have_attribute("data-status", "idle")
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        return page

    return run_all
