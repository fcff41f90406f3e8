"""A run that records, while it runs, what the proposer saw at each step and what each step left in the
workspace: what ``Run.at(n)`` must give back from the store afterwards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_lab import Run
from harness_lab.context import ContextView
from harness_lab.proposers import ScriptedProposer


@dataclass
class Seen:
    """What the live run showed, by step: the view the proposer was given, the decision, the files."""

    views: dict[int, tuple[str, int, int, int | None]] = field(default_factory=dict)
    decisions: dict[int, str] = field(default_factory=dict)
    files: dict[int, dict[str, str]] = field(default_factory=dict)
    run: Run | None = None


def shown(view: ContextView) -> tuple[str, int, int, int | None]:
    """A view as a model reads it: the rendered text, its tokens, the budget and the tokens left."""
    return view.render(), view.total_tokens, view.budget_tokens, view.tokens_left


class RecordingProposer(ScriptedProposer):
    """A scripted proposer (so a resume rebuilds it from the spec) that writes down every view it is given,
    under the step the run is taking."""

    def __init__(self, actions: list[Any], seen: Seen, then: str = "repeat_last") -> None:
        super().__init__(actions, then=then)  # type: ignore[arg-type]
        self.seen = seen

    def propose(self, view: ContextView) -> object:
        assert self.seen.run is not None
        self.seen.views[self.seen.run.step_no] = shown(view)
        return super().propose(view)


def workspace_files(run: Run) -> dict[str, str]:
    run.sandbox.workspace_hash(rescan=True)
    return {p: e[1] for p, e in run.sandbox.manifest().items() if e[0] == "f"}


def note_step(seen: Seen, run: Run, record: Any) -> None:
    seen.decisions[record.step] = record.decision.verdict
    seen.files[record.step] = workspace_files(run)
