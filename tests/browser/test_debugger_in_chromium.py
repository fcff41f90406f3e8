"""The dashboard as a debugger in a real browser: what a new user failed to do in 16 actions and three
dead ends, in at most 6: open missing_limitations, run to end (EXHAUSTED), select step 3 on the
timeline, read the report text at that step, fork from there with a fresh budget, edit the report, run
to end: REVIEW_READY. Screenshots at 1280x800 and 1920x1080 go to test-artifacts/, and the context
panel's text column is checked visible and wide (>= 40% of the viewport) and unclipped in both.

The JupyterLab server and the chromium check: tests/browser/conftest.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
NOTEBOOK = "debug_missing_limitations.ipynb"
LIMITATIONS = "\n\n## Limitations\nOnly two evidence notes were read; the comparison stays narrow.\n"
SOURCE = """\
import tempfile
from pathlib import Path
from harness_lab import InMemoryStore, Run
from harness_lab.widgets import LabView

run = Run.from_scenario("missing_limitations", workspace=Path(tempfile.mkdtemp()) / "ws", store=InMemoryStore())
view = LabView(run)
view"""

pytestmark = pytest.mark.browser


def _notebook() -> dict[str, Any]:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "debug", "metadata": {}, "outputs": [],
                       "source": SOURCE}],
            "metadata": {"kernelspec": {"display_name": "Python 3 (harness-lab)", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _context_column(page: Any, root: Any, width: int) -> None:
    """The context panel's text column is on screen, at least 40% of the viewport wide, and its text
    wraps inside it (nothing cut at the column's edge)."""
    column = root.locator(".hl-panel-context td.hl-ctx-text-col").first
    column.scroll_into_view_if_needed()
    box = column.bounding_box()
    assert box is not None and box["width"] >= 0.4 * width, (box, width)
    clipped = column.evaluate("td => td.scrollWidth > td.clientWidth + 1")
    assert not clipped


def test_a_new_user_debugs_missing_limitations_to_review_ready_in_six_actions(jupyter_lab, run_all_in_chromium):
    from playwright.sync_api import expect, sync_playwright

    _base, _token, root = jupyter_lab
    (root / NOTEBOOK).write_text(json.dumps(_notebook()), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    actions = 0

    def act(what: Any) -> None:  # one user action: a click, a pick, a fill
        nonlocal actions
        actions += 1
        what()

    with sync_playwright() as pw:
        page = run_all_in_chromium(pw, NOTEBOOK, {"width": 1280, "height": 800})
        try:
            dash = page.locator(".hl-labview").first
            expect(dash.locator(".hl-current-state").first).to_have_text("CREATED")

            # 1. run to end: EXHAUSTED, as the new user saw it
            act(lambda: dash.locator("button.hl-run-to-end").first.click())
            expect(dash.locator(".hl-current-state").first).to_have_text("EXHAUSTED")
            # 2. select step 3 on the timeline
            act(lambda: dash.locator(".hl-timeline-picker select").first.select_option(index=3))
            expect(dash.locator(".hl-step-header").first).to_contain_text("step 3: 3 · write_report")
            # ... and read the report text at that step (reading is not an action)
            expect(dash.locator(".hl-file-view").first).to_contain_text("# Report: two harness designs")
            expect(dash.locator(".hl-file-view").first).not_to_contain_text("## Limitations")
            report = dash.locator(".hl-file-view pre.hl-file-text").first.inner_text()
            # 3. fork from there with a fresh budget
            act(lambda: dash.locator("button.hl-fork-fresh").first.click())
            fork = dash.locator(".hl-labview").first  # the fork's own dashboard, below
            expect(fork.locator(".hl-status").first).to_contain_text("missing_limitations-fork")
            editor = fork.locator(".hl-edit-text textarea").first
            expect(editor).to_have_value(report.rstrip("\n"))
            # 4. edit the report: its text as text, not escaped JSON; 5. apply the edit
            act(lambda: editor.fill(report.rstrip("\n") + LIMITATIONS))
            act(lambda: fork.locator("button.hl-approve-as-edited").first.click())
            expect(fork.locator(".hl-pending").first).to_contain_text("Limitations")
            # 6. run to end
            act(lambda: fork.locator("button.hl-run-to-end").first.click())
            expect(fork.locator(".hl-current-state").first).to_have_text("REVIEW_READY")
            expect(dash.locator(".hl-current-state").first).to_have_text("EXHAUSTED")  # the source untouched
            assert actions <= 6, actions

            for width, height in ((1280, 800), (1920, 1080)):
                page.set_viewport_size({"width": width, "height": height})
                _context_column(page, dash, width)
                page.screenshot(path=str(ARTIFACTS / f"debugger-{width}x{height}.png"), full_page=False)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "debugger-chromium-failure.png"), full_page=False)
            raise
    for size in ("1280x800", "1920x1080"):
        assert (ARTIFACTS / f"debugger-{size}.png").stat().st_size > 10_000
