"""Validator verdicts check by check, and the acceptance receipt once accepted."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import ipywidgets as w

from ._panel import Panel, esc, html_table, newer, redactor

__all__ = ["CHECKS", "VerdictPanel", "check_rows", "last_verdict"]

# The report contract's checks in the order the validator runs them, with the failure codes of each.
CHECKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("report exists", ("report_missing",)),
    ("report is non-empty text", ("report_empty", "report_not_text")),
    ("required sections present and non-empty", ("section_missing", "section_empty")),
    ("citation markers well formed", ("citation_malformed",)),
    ("cited ids are known evidence", ("citation_unknown",)),
    ("cited ids were read in this run", ("citation_not_read",)),
    ("enough distinct citations", ("too_few_citations",)),
)
_GATING = {"report_missing", "report_empty", "report_not_text"}  # later checks need a readable report


def check_rows(verdict: Any) -> list[tuple[str, str, str]]:
    """(check, pass / FAIL / not checked, messages) for every check of the report contract; for the
    functional or goal layer's verdict, its own checks and failures."""
    if verdict.kind == "layer_verdict":
        rows = [(f"{verdict.layer}: {c.name}", "pass" if c.status == "passed" else "FAIL", c.reason or "")
                for c in verdict.checks]
        rows += [(f"{verdict.layer}: {e.code}", "FAIL", e.message) for e in verdict.errors
                 if not e.code.startswith("check_")]
        return rows or [(verdict.layer, "pass" if verdict.accepted else "FAIL", "; ".join(verdict.reasons))]
    failed = {e.code for e in verdict.errors}
    stopped = False
    rows = []
    for name, codes in CHECKS:
        messages = "; ".join(e.message for e in verdict.errors if e.code in codes)
        outcome = "not checked" if stopped else "FAIL" if failed & set(codes) else "pass"
        stopped = stopped or bool(failed & set(codes) & _GATING)
        rows.append((name, outcome, messages))
    return rows


def last_verdict(run: Any) -> tuple[int, Any] | None:
    """(step, verdict) of the most recent step that validated an artifact, or None."""
    for record in reversed(run.records):
        if record.verdict is not None:
            return record.step, record.verdict
    return None


def _not_accepted(record: Any) -> str:
    """Why a step whose structural checks passed did not end in REVIEW_READY (e.g. the artifact
    changed behind the validator), from the step's own state change; "" when it was accepted."""
    if not record.verdict.accepted or record.state_after.value in ("REVIEW_READY", "VALIDATING"):
        return ""
    reasons = [e.reason for e in record.events if e.kind == "state_changed" and e.before.value == "VALIDATING"]
    return reasons[-1] if reasons else f"the run went on {record.state_after.value}"


def _after_restore(restored: Any, step: int, verdict: Any, no_receipt: bool) -> str:
    """The header once the run was rolled back (or restored) after the verdict it would show."""
    how = "rolled back to" if restored.source.startswith("snapshot ") else "restored from"
    outcome = "was accepted" if verdict.accepted else "failed"
    gone = " and its receipt went with it" if verdict.accepted and no_receipt else ""
    return (f"<div class='hl-rolled-back'><b>{how} {esc(restored.source)} after step {restored.step}</b> "
            f"(run {esc(restored.state.value)}): no artifact validated since. The structural check of step "
            f"{step} {outcome} before that{gone}; its checks:</div>")


class VerdictPanel(Panel):
    name = "verdicts"
    title = "Verdicts and receipt"

    def __init__(self) -> None:
        super().__init__()
        self.html = w.HTML()
        self.widget = self.html
        self._checked = 0
        self._last: tuple[int, Any] | None = None
        self._refused = ""  # why a finish whose checks passed was still not accepted, if it was not
        self._records: Any = None
        # A rollback after the verdict shown (a Restored event): the run is no longer where it was judged.
        self._events: Any = None
        self._seen = 0
        self._restored: Any = None

    def key(self, run: Any) -> Hashable:
        # Scan only the records numbered after the last one read for a newer verdict (a stored run
        # trims its list: the verdict shown is kept here).
        if run.records is not self._records:
            self._records, self._checked, self._last, self._refused = run.records, 0, None, ""
        for record in newer(run.records, self._checked, "step"):
            if record.verdict is not None:
                self._last = (record.step, record.verdict)
                self._refused = _not_accepted(record)
                self._restored = None
            self._checked = record.step
        if run.events is not self._events:
            self._events, self._seen = run.events, 0
        for event in newer(run.events, self._seen, "seq"):
            # at or after the verdict's step: within its step a restore is the repair's answer to it
            if event.kind == "restored" and self._last is not None and event.step >= self._last[0]:
                self._restored = event
            self._seen = event.seq
        return (self._last[0] if self._last else None, run.receipt, run.validation,
                self._restored.seq if self._restored is not None else None)

    def draw(self, run: Any) -> None:
        parts = ["<div class='hl-verdicts'>"]
        if not run.validation:
            parts.append("<div><b>validation is off</b>: a finish is accepted unchecked</div>")
        if self._last is None:
            parts.append("<div><i>no artifact validated yet</i></div>")
        else:
            step, verdict = self._last
            verdict = redactor(run).model(verdict)  # a message or a cited id quotes the report as written
            if self._restored is not None:  # what the verdict judged was rolled back: not the run's now
                parts.append(_after_restore(self._restored, step, verdict, run.receipt is None))
            else:
                outcome = "accepted" if verdict.accepted else "rejected"
                parts.append(f"<div>step {step}: structural check <b class='hl-verdict'>{outcome}</b>; "
                             f"cited: {esc(', '.join(verdict.cited) or 'none')}</div>")
                if self._refused:
                    parts.append(f"<div class='hl-not-accepted'><b>finish not accepted</b>: {esc(self._refused)}</div>")
            parts.append(html_table(("check", "result", "why"), check_rows(verdict), cls="hl-checks"))
        r = run.receipt
        if r is not None:
            rows = [("artifact", r.artifact_path), ("artifact sha256", r.artifact_sha256),
                    ("contract version", r.contract_version), ("accepted at step", r.step),
                    ("structural", r.structural), ("semantic", r.semantic)]
            rows += [(f"evidence {k}", v) for k, v in sorted(r.evidence_sha256.items())]
            parts.append("<div><b>receipt</b> (a hash identifies content; it does not prove it true)</div>")
            parts.append(html_table(("field", "value"), rows, cls="hl-receipt"))
        parts.append("</div>")
        self.html.value = "".join(parts)
