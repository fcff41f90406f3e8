"""A real browser: a lesson opened in JupyterLab, every cell run, saved with Ctrl+S: the file on disk is
byte-identical to the committed one (``git status`` stays clean), with the config `make lab` links
(``notebooks/jupyter_server_config.py``) in the server's Jupyter config dir.

The server and the chromium check: tests/browser/conftest.py.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"
LESSON = "01_finish_validation.ipynb"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]

pytestmark = pytest.mark.browser


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str, Path]:
    """The server (tests/browser/conftest.py) on a copy of the lesson, configured as `make lab` does."""
    config = tmp_path / "jupyter-config"  # the server's JUPYTER_CONFIG_DIR (conftest)
    config.mkdir()
    (config / "jupyter_server_config.py").symlink_to(NOTEBOOKS / "jupyter_server_config.py")
    base, token, root = request.getfixturevalue("jupyter_lab")
    for name in (LESSON, "nbval_sanitize.cfg"):
        shutil.copy(NOTEBOOKS / name, root / name)
    return base, token, root


def test_a_lesson_run_and_saved_in_the_lab_is_byte_identical(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, root = lab
    saved = root / LESSON
    before = saved.stat().st_mtime_ns
    # the lesson's kernel started before the page opens: the lab attaches to it and asks nothing
    session = json.dumps({"path": LESSON, "name": LESSON, "type": "notebook", "kernel": {"name": "python3"}})
    request = urllib.request.Request(f"{base}/api/sessions", data=session.encode(), method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 201
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(60_000)
            expect.set_options(timeout=60_000)  # a cold JupyterLab and kernel take seconds
            page.goto(f"{base}/lab/tree/{LESSON}?token={token}")
            # if the lab asks which kernel (it may, while it starts one): the lesson's, preselected
            page.add_locator_handler(page.locator(".jp-Dialog").filter(has_text="Select Kernel"),
                                     lambda dialog: dialog.get_by_role("button", name="Select").click())
            expect(page.locator(".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator").first
                   ).to_have_attribute("data-status", "idle")
            claims = page.locator(".jp-OutputArea-output", has_text="all claims hold")
            expect(claims).to_have_count(1)  # the stored output, rendered
            page.locator(".lm-MenuBar-itemLabel", has_text="Edit").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Clear Outputs of All Cells").first.click()
            expect(claims).to_have_count(0)  # what is saved below is this run's output, none of the stored
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            expect(claims).to_have_count(1, timeout=120_000)
            expect(page.locator(".jp-Notebook-ExecutionIndicator").first).to_have_attribute("data-status", "idle")
            dirty = page.locator(".lm-TabBar-tab.jp-mod-dirty")
            expect(dirty).to_have_count(1)  # the run changed the document: it needs saving
            page.locator(".jp-Notebook").first.click()
            page.keyboard.press("Control+s")
            expect(dirty).to_have_count(0)  # the server answered the save
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "lab-save-failure.png"), full_page=False)
            dialogs = page.locator(".jp-Dialog").all_inner_texts()
            if dialogs:
                pytest.fail(f"a dialog stood in the way: {dialogs}")
            raise
        finally:
            browser.close()
    assert saved.stat().st_mtime_ns != before, "the lab did not save the lesson"
    assert saved.read_bytes() == (NOTEBOOKS / LESSON).read_bytes()
