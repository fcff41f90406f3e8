"""Two runs side by side: the first step where they differ, and what differs there.

``compare(a, b)`` walks both runs' steps (``run.at(n)``, so both need a store, live
or reopened with ``Run.open``) from the first step they do not share: a fork's timeline starts with its
source's rows up to the fork point, so a fork compared with its source compares from there. At a
step where either run decided nothing (its first row: a registration, or a fork's) only the workspace
files are compared; at every other step the context the proposer saw, the decision with the call it
was about, and the files after the step. The first step where one of them differs is ``first_difference``, with the context's unified
diff, both decisions and the file changes from ``a``'s files to ``b``'s. When every shared step agrees
but one run went on, the first step only that one has is the difference.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from .files import file_changes
from .records import FileChange, StepPoint, StepView

if TYPE_CHECKING:
    from ..loop.run import Run

__all__ = ["RunComparison", "compare"]

_Aspect = Literal["context", "decision", "files", "length"]


class RunComparison(BaseModel):
    """Where runs ``a`` and ``b`` first differ (``first_difference`` None: they agree on every step both
    have, and have the same steps)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["run_comparison"] = "run_comparison"
    a: str  # run ids
    b: str
    start: int  # the first step compared (a fork's fork point, else 0): the steps before it are shared rows
    compared: int  # how many points were compared
    first_difference: int | None
    differs: tuple[_Aspect, ...] = ()  # what differs there ("length": only one run has the step)
    context_diff: str = ""  # unified diff of the rendered context, a's to b's
    decision_diff: tuple[str | None, str | None] = (None, None)  # "verdict: call" of each run at that step
    file_changes: list[FileChange] = []  # a's files to b's after that step

    def summary(self) -> str:
        """One line: where the runs first differ and in what."""
        if self.first_difference is None:
            if not self.compared:
                return f"{self.a} and {self.b} share every step (the same rows)"
            return f"{self.a} and {self.b} agree on steps {self.start}..{self.start + self.compared - 1}"
        what = ", ".join(self.differs)
        said = f"; decisions: {self.decision_diff[0]!r} vs {self.decision_diff[1]!r}" if "decision" in self.differs else ""
        files = f"; {len(self.file_changes)} file(s) differ" if self.file_changes else ""
        return f"{self.a} and {self.b} first differ at step {self.first_difference} ({what}){said}{files}"


def compare(a: Run, b: Run) -> RunComparison:
    """The first step where ``a`` and ``b`` differ in context, decision or files (see the module)."""
    end_a, end_b = a.step_no, b.step_no
    last = min(end_a, end_b)
    views: dict[tuple[int, int], StepView] = {}

    def at(which: int, n: int, *, keep: bool = False) -> StepView:  # the steps the search read, read once
        view = views.pop((which, n), None) or (a if which == 0 else b).at(n)
        if keep:
            views[which, n] = view
        return view

    # A fork's timeline starts with its source's rows: the steps both read from the same row (the same
    # run's row, committed at the same time: two stores may hold runs of one id) are shared, and only
    # as a prefix, so the first step not shared is found by bisection: O(log n) steps read, not n.
    low, high = 0, last + 1
    while low < high:
        mid = (low + high) // 2
        if _row(at(0, mid, keep=True).point) == _row(at(1, mid, keep=True).point):
            low = mid + 1
        else:
            high = mid
    start = low
    base = {"a": a.run_id, "b": b.run_id, "start": start}
    for n in range(start, last + 1):
        view_a, view_b = at(0, n), at(1, n)
        differs: list[_Aspect] = []
        if view_a.decision is not None and view_b.decision is not None:  # a first row decides nothing: files only
            if _context(view_a) != _context(view_b):
                differs.append("context")
            if _decision_key(view_a) != _decision_key(view_b):
                differs.append("decision")
        if view_a.files != view_b.files:
            differs.append("files")
        if differs:
            return _found(base, n - start + 1, n, tuple(differs), view_a, view_b)
    if end_a != end_b:  # one went on: its next step is the difference
        n = last + 1
        longer = a if end_a > last else b
        view, ended = longer.at(n), at(1 if longer is a else 0, last)
        only_a, only_b = (view, None) if longer is a else (None, view)
        return _found(base, n - start + 1, n, ("length",), only_a, only_b, ended=ended)
    return RunComparison(**base, compared=last - start + 1, first_difference=None)


def _found(base: dict[str, object], compared: int, n: int, differs: tuple[_Aspect, ...],
           view_a: StepView | None, view_b: StepView | None, *, ended: StepView | None = None) -> RunComparison:
    """``ended``: the last step of the run that has no step ``n`` (its files stand; no context to diff)."""
    context_a, context_b = _context(view_a), _context(view_b)
    context_diff = "" if context_a == context_b or ended is not None else "".join(difflib.unified_diff(
        context_a.splitlines(keepends=True), context_b.splitlines(keepends=True),
        fromfile=f"{base['a']}@{n} context", tofile=f"{base['b']}@{n} context"))
    files_a, files_b = _files(view_a or ended), _files(view_b or ended)
    changes = file_changes(files_a, files_b, _bytes_of(view_a, view_b, ended)) if files_a != files_b else []
    return RunComparison.model_validate({
        **base, "compared": compared, "first_difference": n, "differs": differs, "context_diff": context_diff,
        "decision_diff": (_decision(view_a), _decision(view_b)), "file_changes": changes,
    })


def _row(point: StepPoint) -> tuple[str, int, float]:
    return point.run_id, point.step, point.at


def _files(view: StepView | None) -> dict[str, str]:
    return {} if view is None else view.files


def _context(view: StepView | None) -> str:
    return "" if view is None or view.context is None else view.context.render()


def _decision_key(view: StepView) -> tuple[str | None, str | None]:
    """The verdict and the exact call (its canonical JSON: a described call is cut at 60 characters)."""
    return (view.decision.verdict if view.decision is not None else None,
            view.proposal.canonical if view.proposal is not None else None)


def _decision(view: StepView | None) -> str | None:
    if view is None or view.decision is None:
        return None
    proposal = view.proposal
    call = proposal.describe() if proposal is not None else "(no proposal)"
    sha = f" [args {proposal.args_sha256[:12]}]" if proposal is not None and proposal.action is not None else ""
    return f"{view.decision.verdict}: {call}{sha}"


def _bytes_of(*views: StepView | None) -> Callable[[str], bytes | None]:
    def data(sha: str) -> bytes | None:
        for view in views:  # a file may be in either run's store
            reader = view._file_bytes if view is not None else None
            if reader is not None and (found := reader(sha)) is not None:
                return found
        return None

    return data
