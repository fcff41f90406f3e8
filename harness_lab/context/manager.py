"""The context manager: one facade that every proposer's view comes from.

Typical use by the run loop::

    ctx = ContextManager(budget_tokens=4000)
    ctx.add(Layer.L0, tool_definitions, source="system", round=0)
    ctx.add(Layer.L1, task_and_criteria, source="task", round=0)
    ctx.add_interaction(3, "read_file config.yaml", text, source="read_file:config.yaml")
    view = ctx.view()            # compresses first if over budget; view.render() is the model's text

Behaviour worth knowing:

* the last 3 interactions stay whole in L2; older ones move to L4 (early exploration);
* a result (or any L2-L5 text) over ``output_cap_bytes`` UTF-8 bytes is stored in the ref store and
  replaced in the view by an L5 reference + short summary; :meth:`read_ref` returns it unchanged,
  after one line ``[stale: ref_007 ...]`` (since when, why) once its source was marked stale
  (:meth:`ref_text` gives the stored text alone);
* ``anomaly=None`` detects anomalies with :data:`~harness_lab.context.anomaly.ANOMALY_PATTERN`;
* compression never loses protected items (L0/L1, pinned, anomalies, failure reasons): a summary
  that drops one is caught by the self-check, reported, and the item is re-pinned verbatim;
  if protected content alone exceeds the budget the view says so (``view.over_budget``) rather than
  cut it;
* a summary with the key of an earlier one supersedes it visibly: both stay in the view, the earlier
  marked ``superseded by <id>``;
* :meth:`mark_stale` marks items (and summaries/conclusions built from them) stale;
  :meth:`reselect` takes stale items out of the view except L0/L1 and pinned ones; they stay recorded
  (:meth:`item`) while anything can still need them: items that left the view for good, and that no
  retained summary covers or carries, are retired once the record has grown by ``max(128, live)``
  items, so memory and :meth:`state` are bounded by the view, not by the run's length;
* :meth:`take_changes` gives what changed since it was last called (a checkpoint's change log);
  :func:`~harness_lab.context.changes.apply_changes` replays it onto a state;
* :meth:`view` compresses only when over budget, and then down to ``low_water`` x budget (0.8 by
  default) so that it does not compress again at the very next step;
* feedback stays pinned; a later feedback with the same ``key`` supersedes and releases it;
* token counts are computed once per item version (``item.tokens``), never per view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._checkpointing import STATE_VERSION, Checkpointing
from ._freshness import mark_stale, reselect
from ._inputs import (
    checked,
    require_callable,
    require_layer,
    require_positive_int,
    require_unit_fraction,
    utf8,
    utf8_or_none,
)
from ._keyed import close_subtask, feedback, resume_note, summary
from ._stored import StoredOutputs
from .anomaly import is_anomalous
from .compress import Summarizer, default_summarizer, run_pass
from .items import ContextItem, ContextView, Layer
from .record import ItemRecord
from .refs import RefInfo, RefStore, describe_large_output
from .selfcheck import CompressionReport, find_losses
from .tokens import approx_token_count

__all__ = ["INTERACTION_WINDOW", "ContextManager"]

INTERACTION_WINDOW = 3  # interactions kept whole in L2 (seed 003, 3.2)
_L2, _L4 = Layer.L2, Layer.L4  # a module lookup, not an enum class's (~90 ns each, every step)


class ContextManager(Checkpointing, StoredOutputs):
    """Layered context with a token budget, stored references and a self-checked compression."""

    def __init__(
        self,
        budget_tokens: int = 4000,
        counter: Callable[[str], int] | None = None,
        output_cap_bytes: int = 16_384,
        *,
        summarizer: Summarizer | None = None,
        low_water: float = 0.8,
    ) -> None:
        require_positive_int("budget_tokens", budget_tokens)
        require_positive_int("output_cap_bytes", output_cap_bytes)
        require_unit_fraction("low_water", low_water)
        require_callable("counter", counter)
        require_callable("summarizer", summarizer)
        self._budget = budget_tokens
        # Compression aims below the budget (hysteresis), so it runs every few steps, not every step.
        self.low_water = low_water
        self.output_cap_bytes = output_cap_bytes
        self.summarizer: Summarizer = summarizer or default_summarizer
        self.last_report: CompressionReport | None = None
        self._rec = ItemRecord(approx_token_count if counter is None or counter is approx_token_count
                               else checked(counter))
        self._refs = RefStore()
        self._window: list[str] = []  # ids of the most recent interactions, oldest first
        self._subtask: str | None = None
        self._view: ContextView | None = None
        self._view_version = self._view_budget = -1  # what the cached view was built for
        self._logged_scalars: tuple[Any, ...] | None = None  # as the change log last gave them (None: not yet)
        self._plain_ids = True  # every id and window entry plain (changes.plain_ids): the record makes c123

    @property
    def counter(self) -> Callable[[str], int]:
        """The token counter (``Callable[[str], int]``); counts are cached per item version."""
        return self._rec.counter

    # ------------------------------------------------------------------ adding

    def add(
        self,
        layer: Layer,
        text: str,
        *,
        source: str,
        round: int,
        pinned: bool = False,
        anomaly: bool = False,
        key: str | None = None,
    ) -> ContextItem:
        """Add one item; L2-L5 text over the output cap becomes an L5 reference."""
        require_layer(layer)
        self._rec.maybe_retire()
        text, source, key = utf8(text), utf8(source), utf8_or_none(key)
        ref_id = None
        if layer.compressible and self._too_large(text):
            info = self._refs.put(text, source=source, round=round, key=key)
            text, layer, ref_id = describe_large_output("", text, info), Layer.L5, info.ref_id
        return self._rec.new(layer=layer, text=text, source=source, round=round, pinned=pinned, anomaly=anomaly,
                             key=key, ref_id=ref_id)

    def add_interaction(
        self,
        round: int,
        action: str,
        result: str,
        *,
        source: str,
        anomaly: bool | None = None,
        key: str | None = None,
    ) -> ContextItem:
        """Record an action and its result; the last 3 stay whole in L2, older ones move to L4.

        *key* names the external state the result came from (e.g. a file path) for
        :meth:`mark_stale`; ``anomaly=None`` detects anomalies in *result*.
        """
        rec = self._rec
        rec.maybe_retire()
        if not (action.isascii() and result.isascii() and source.isascii()) or (key is not None and not key.isascii()):
            action, result, source, key = utf8(action), utf8(result), utf8(source), utf8_or_none(key)
        flagged = is_anomalous(result) if anomaly is None else anomaly
        if len(result) * 4 > self.output_cap_bytes and self._too_large(result):  # (its first test, inline)
            info: RefInfo = self._refs.put(result, source=source, round=round, key=key)
            item = rec.add(Layer.L5, describe_large_output(action, result, info), source, round,
                           "interaction", flagged, key, info.ref_id)
        else:
            item = rec.add(_L2, f"> {action}\n{result}", source, round, "interaction", flagged, key)
        window = self._window
        window.append(item.id)
        while len(window) > INTERACTION_WINDOW:
            old = rec.live.get(window.pop(0))
            if old is not None and old.layer == _L2:
                rec.put(rec.relayer(old, _L4))
        return item

    def add_feedback(self, round: int, text: str, *, source: str, key: str | None = None) -> ContextItem:
        """A failure reason from validation: pinned and an anomaly, so it reaches every later view.

        Feedback accumulates (each stays pinned) unless it has a *key*: a later feedback with the same
        key supersedes the earlier one, which stays visible but unpinned, so compression may fold it
        (use it for repeating warnings such as a budget alert).
        """
        self._rec.maybe_retire()
        return feedback(self._rec, round, utf8(text), utf8(source), utf8_or_none(key))

    def begin_subtask(self, name: str, goal: str, *, round: int) -> ContextItem:
        """Open a subtask: its goal sits in L2 until :meth:`finish_subtask` collapses it."""
        self._rec.maybe_retire()
        name, goal = utf8(name), utf8(goal)
        self._subtask = name
        return self._rec.new(layer=Layer.L2, text=goal, source=f"subtask:{name}", round=round, role="subtask",
                             key=f"subtask:{name}")

    def finish_subtask(self, name: str, conclusion: str, *, round: int) -> ContextItem:
        """Collapse the current subtask's process into one L3 conclusion (keep conclusion, drop process).

        The process is every unprotected L2/L4/L5 item added since the previous subtask ended;
        anomalies and pinned items of that span move to L3 verbatim; stored outputs it referenced
        are named in the conclusion so they stay fetchable.
        """
        self._rec.maybe_retire()
        item = close_subtask(self._rec, utf8(name), utf8(conclusion), round)
        self._window = [i for i in self._window if i in self._rec.live]
        self._subtask = None
        return item

    def summarize(
        self,
        text: str,
        *,
        round: int,
        source: str,
        key: str | None = None,
        supersedes: str | None = None,
    ) -> ContextItem:
        """An L3 summary stamped with round and source; it supersedes, visibly, the current summary
        with the same *key* and the item named by *supersedes* (an id or a key)."""
        self._rec.maybe_retire()
        return summary(self._rec, utf8(text), round, utf8(source), utf8_or_none(key), utf8_or_none(supersedes))

    def add_resume_note(self, text: str, *, round: int) -> ContextItem:
        """After a resume the view starts with this note (what was done, what is finished, where it
        stuck). An earlier resume note is marked superseded and unpinned."""
        self._rec.maybe_retire()
        return resume_note(self._rec, utf8(text), round)

    # ------------------------------------------------------------------ freshness

    def mark_stale(self, key_or_source: str) -> list[ContextItem]:
        """Mark items whose key or source matches (``source`` equal, or equal after its ``tool:``
        prefix, e.g. ``config.yaml`` matches ``read_file:config.yaml``) stale, along with summaries
        and conclusions built from them, and the stored outputs of those items or of that key or source
        (:meth:`read_ref` says so from then on). Returns the stale versions of the items still in the view."""
        key_or_source = utf8(key_or_source)
        refs: list[str] = []
        marked = mark_stale(self._rec, key_or_source, refs)
        last = next(reversed(self._rec.archive.values()), None)  # the latest item made: "after round N"
        self._refs.mark_stale(key_or_source, refs, None if last is None else last.round)
        return marked

    def reselect(self) -> None:
        """Take stale items out of the view (L0/L1 and pinned ones stay, shown stale); all stay recorded.

        A stale compression summary gives back the fresh anomalies it carried, verbatim and pinned.
        """
        reselect(self._rec)

    # ------------------------------------------------------------------ reading

    @property
    def budget_tokens(self) -> int:
        return self._budget

    @budget_tokens.setter
    def budget_tokens(self, value: int) -> None:
        """Changing the budget (e.g. a budget squeeze) takes effect at the next :meth:`view`."""
        require_positive_int("budget_tokens", value)
        self._budget = value

    @property
    def total_tokens(self) -> int:
        return self._rec.total

    def item(self, item_id: str) -> ContextItem:
        """An item in its latest version, in the view or still recorded (see retirement above)."""
        try:
            return self._rec.archive[item_id]
        except KeyError:
            raise KeyError(f"no context item {item_id!r}: never made, or retired after it left the view "
                           "(nothing retained refers to it)") from None

    def view(self) -> ContextView:
        """The frozen view; compresses first when the context is over budget."""
        rec, view = self._rec, self._view
        if view is None or self._view_version != rec.version or self._view_budget != self._budget:
            if rec.total > self._budget:
                self._compress(self._low_water_target(), proactive=False)
            self._view = view = ContextView.unordered(rec.live.values(), rec.total, self._budget)
            self._view_version, self._view_budget = rec.version, self._budget
        return view

    def compress(self, target_tokens: int | None = None) -> CompressionReport:
        """An explicit pass: L4 is summarized even if the context fits, then layers are compressed
        in policy order while over *target_tokens* (default: ``low_water`` x budget; 0: as far as the
        policy goes)."""
        if target_tokens is None:
            target_tokens = self._low_water_target()
        elif isinstance(target_tokens, bool) or not isinstance(target_tokens, int) or target_tokens < 0:
            raise ValueError(f"target_tokens must be a non-negative int, got {target_tokens!r}")
        return self._compress(target_tokens, proactive=True)

    def self_check(self, before: ContextView, after: ContextView) -> list[str]:
        """Every anomaly, pinned fact or failure reason in *before* that *after* lost (empty = fine).
        An item released since *before* (a feedback or resume note a later one with its key superseded) is
        no longer protected, so compression may fold it: that is not a loss."""
        latest = self._rec.archive.get
        still = [i for i in before.items if (now := latest(i.id)) is None or now.protected or not i.protected]
        return find_losses(still, after.items, latest).all()

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        counter: Callable[[str], int] | None = None,
        *,
        summarizer: Summarizer | None = None,
        ref_loader: Callable[[str], str | None] | None = None,
    ) -> ContextManager:
        """Rebuild from :meth:`state`; token counts are recomputed with *counter*. ``ref_loader``
        (sha256 -> text) fetches stored outputs the state names by sha256 only, when read."""
        if state.get("kind") != "context_state" or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a context state of version {STATE_VERSION}")
        ctx = cls(
            int(state["budget_tokens"]),
            counter,
            int(state["output_cap_bytes"]),
            summarizer=summarizer,
            low_water=float(state["low_water"]),
        )
        ctx._load(state, ref_loader)
        return ctx

    # ------------------------------------------------------------------ internals

    def _low_water_target(self) -> int:
        return max(1, int(self.budget_tokens * self.low_water))

    def _compress(self, target: int, *, proactive: bool) -> CompressionReport:
        report = run_pass(
            self._rec, target=target, budget=self._budget, summarizer=self.summarizer, proactive=proactive
        )
        self.last_report = report
        return report
