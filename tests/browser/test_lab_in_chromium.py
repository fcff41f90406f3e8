"""A real browser: JupyterLab on 127.0.0.1 with a token, lesson 4 run in Debian's chromium, and the
rendered widget's Step and Approve buttons clicked.

The server and the chromium check: tests/browser/conftest.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
LESSON = "04_gates_faults.ipynb"

pytestmark = pytest.mark.browser


@pytest.fixture
def lab(jupyter_lab: tuple[str, str, Path]) -> tuple[str, str]:
    """The server (tests/browser/conftest.py) on a copy of the lesson."""
    base, token, root = jupyter_lab
    shutil.copy(REPO / "notebooks" / LESSON, root / LESSON)
    return base, token


def test_lesson_4_runs_in_chromium_and_the_widget_answers_clicks(lab, run_all_in_chromium):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        page = run_all_in_chromium(pw, LESSON, {"width": 1400, "height": 1000})
        try:
            expect(page.locator(".jp-OutputArea-output", has_text="all claims hold")).to_have_count(1, timeout=120_000)

            try_it = page.locator(".hl-labview").filter(has_text="try-it").last
            expect(try_it.locator(".hl-current-state")).to_have_text("CREATED")
            expect(try_it.locator("button.hl-approve")).to_be_disabled()
            try_it.locator("button.hl-step").click()
            expect(try_it.locator(".hl-current-state")).to_have_text("WAITING_FOR_HUMAN")
            expect(try_it.locator(".hl-pending")).to_contain_text("waiting for a human: push needs approval")
            expect(try_it.locator("button.hl-approve")).to_be_enabled()
            try_it.locator("button.hl-approve").click()
            expect(try_it.locator(".hl-current-state")).to_have_text("RUNNING")
            expect(try_it.locator(".hl-trace")).to_contain_text("approved by human")
            expect(try_it.locator(".hl-status")).to_contain_text("try-it: RUNNING after step 2")
            try_it.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "lesson4-chromium.png"), full_page=False)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "lesson4-chromium-failure.png"), full_page=False)
            raise
    assert (ARTIFACTS / "lesson4-chromium.png").stat().st_size > 10_000
