"""Two runs side by side (a run and its fork, or a run before and after a harness change): where they
first differ, and there each run's decision, the context diff and the files' diffs, from
``harness_lab.timeline.compare``. Thin: the comparison is the runtime's; this draws it."""

from __future__ import annotations

from typing import Any

import ipywidgets as w

from ._panel import esc, redactor

__all__ = ["CompareView", "comparison_html"]

_PRE = "<pre style='white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0;max-height:30em;overflow:auto'>"


def comparison_html(cmp: Any, redact: Any) -> str:
    """A RunComparison as HTML: the summary line, the two decisions side by side, the diffs."""
    head = f"<div class='hl-compare-summary'><b>{esc(redact.text(cmp.summary()))}</b></div>"
    if cmp.first_difference is None:
        return f"<div class='hl-compare'>{head}</div>"
    n = cmp.first_difference
    side = "<td style='width:50%;vertical-align:top;padding:2px 6px;overflow-wrap:anywhere'>"
    decisions = (f"<table style='width:100%;table-layout:fixed'><tr><th style='text-align:left'>{esc(cmp.a)} at step {n}</th>"
                 f"<th style='text-align:left'>{esc(cmp.b)} at step {n}</th></tr>"
                 f"<tr>{side}{esc(redact.text(cmp.decision_diff[0] or '(no step)'))}</td>"
                 f"{side}{esc(redact.text(cmp.decision_diff[1] or '(no step)'))}</td></tr></table>")
    context = (f"<details class='hl-compare-context' open><summary>context diff ({len(cmp.context_diff.splitlines())} lines)"
               f"</summary>{_PRE}{esc(redact.text(cmp.context_diff))}</pre></details>" if cmp.context_diff
               else "<div>the context the proposer saw is the same</div>")
    files = "".join(f"<div>{esc(c.change)} <b>{esc(c.path)}</b></div>{_PRE}{esc(redact.text(c.diff))}</pre>"
                    for c in cmp.file_changes) or "<div>the files are the same</div>"
    return f"<div class='hl-compare'>{head}{decisions}{context}<div><b>files</b></div>{files}</div>"


class CompareView:
    """The comparison last made (``LabView.compare``), drawn once per call, not per step."""

    def __init__(self) -> None:
        self.html = w.HTML(layout=w.Layout(width="100%"))
        self.comparison: Any = None
        self.widget = self.html

    def show(self, run: Any, cmp: Any) -> None:
        self.comparison = cmp
        self.html.value = comparison_html(cmp, redactor(run))
