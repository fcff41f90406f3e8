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
* a subtask (:meth:`begin_subtask` .. :meth:`finish_subtask`) closes into one L3 conclusion stamped
  with its round and the rounds and sources of its process; anomalies of the span move to L3 verbatim;
  the close is a compression of its own (then L4 is summarized, as at any milestone), self-checked:
  ``last_report`` lists what it folded and any protected item lost;
* :meth:`search_history` ranks what left the view (and every stored output) by relevance, with ids
  :meth:`read_ref` opens (see :mod:`~harness_lab.context.retrieval`);
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
from ._freshness import Freshness
from ._inputs import (
    checked,
    interaction_texts,
    require_callable,
    require_layer,
    require_non_negative_int,
    require_positive_int,
    require_unit_fraction,
    text_arg,
    text_or_none_arg,
)
from ._keyed import KeyedItems, close_subtask
from ._stored import StoredOutputs
from ._view import ContextView
from .anomaly import is_anomalous
from .compress import Summarizer, default_summarizer, run_pass
from .items import ContextItem, Layer
from .record import ItemRecord
from .refs import RefInfo, RefStore, describe_large_output
from .retrieval import HistoryDoc, HistoryHit, HistoryIndex
from .selfcheck import CompressionReport, find_losses
from .tokens import approx_token_count

__all__ = ["INTERACTION_WINDOW", "ContextManager"]

INTERACTION_WINDOW = 3  # interactions kept whole in L2 (seed 003, 3.2)
_L2, _L4 = Layer.L2, Layer.L4  # a module lookup, not an enum class's (~90 ns each, every step)


class ContextManager(Checkpointing, StoredOutputs, Freshness, KeyedItems):
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
        self._history: tuple[tuple[int, int, int, int], HistoryIndex] | None = None  # built by a search

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
        text, source, key = text_arg("text", text), text_arg("source", source), text_or_none_arg("key", key)
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
        if len(rec.archive) - rec.retained >= rec.retire_min:  # maybe_retire's first test, inline (every step)
            rec.maybe_retire()
        try:  # str.isascii, not action.isascii: it also refuses bytes, and a wrong type costs nothing until seen
            plain = (str.isascii(action) and str.isascii(result) and str.isascii(source)
                     and (key is None or str.isascii(key)))
        except TypeError:
            plain = False
        if not plain:  # rare: non-ASCII text to repair, or a wrong type to refuse by name
            action, result, source, key = interaction_texts(action, result, source, key)
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
                rec.demote(old, _L4)
        return item

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
        else:
            require_non_negative_int("target_tokens", target_tokens)
        return self._compress(target_tokens, proactive=True)

    def self_check(self, before: ContextView, after: ContextView) -> list[str]:
        """Every anomaly, pinned fact or failure reason in *before* that *after* lost (empty = fine).
        An item released since *before* (a feedback or resume note a later one with its key superseded) is
        no longer protected, so compression may fold it: that is not a loss."""
        latest = self._rec.archive.get
        still = [i for i in before.items if (now := latest(i.id)) is None or now.protected or not i.protected]
        return find_losses(still, after.items, latest).all()

    # ------------------------------------------------------------------ the subtask cycle

    @property
    def current_subtask(self) -> str | None:
        """The name of the open subtask (None: none is open)."""
        return self._subtask

    def finish_subtask(self, name: str, conclusion: str = "", *, round: int) -> ContextItem:
        """Close the current subtask: its process collapses into one L3 conclusion (keep the conclusion,
        drop the process), and L4 is summarized as at any milestone, not only when over budget.

        The process is every unprotected L2/L4/L5 item added since the previous subtask ended; anomalies
        and pinned items of that span move to L3 verbatim; stored outputs it referenced are named in
        the conclusion so they stay fetchable. An empty *conclusion* is the summarizer's digest of the
        process. The close is self-checked like a compression pass: ``last_report`` (``created``: the
        conclusion first; ``residual``: anything protected the view lost, which must stay empty).
        """
        self._rec.maybe_retire()
        name, conclusion = text_arg("name", name), text_arg("conclusion", conclusion)
        rec = self._rec
        before, tokens_before = rec.ordered(), rec.total
        item = close_subtask(rec, name, conclusion, round, self.summarizer)
        self._window = [i for i in self._window if i in rec.live]
        self._subtask = None
        folded = self._compress(self._low_water_target(), proactive=True)
        after = rec.ordered()
        # The whole close (collapse and pass) against the view before it: the self-check of seed 003 3.3.
        latest = rec.archive.get
        still = [i for i in before if (now := latest(i.id)) is None or now.protected or not i.protected]
        residual = find_losses(still, after, latest)
        self.last_report = CompressionReport(
            tokens_before=tokens_before, tokens_after=rec.total, budget_tokens=self._budget,
            target_tokens=folded.target_tokens, summarized=(*item.covers, *folded.summarized),
            dropped=folded.dropped, created=(item.id, *folded.created), repinned=folded.repinned,
            lost_anomalies=folded.lost_anomalies, lost_pinned=folded.lost_pinned,
            lost_failures=folded.lost_failures, residual=tuple(residual.all()), over_budget=rec.total > self._budget,
        )  # fmt: skip
        return rec.archive[item.id]

    def search_history(self, query: str, k: int = 5) -> list[HistoryHit]:
        """Stored history ranked by relevance to *query* (BM25; see :mod:`~harness_lab.context.retrieval`):
        items no longer in the view whole (summarized, dropped, a closed subtask's process, superseded) and
        every stored output. Each hit's id opens with :meth:`read_ref`."""
        query = text_arg("query", query)
        if not query.strip():
            raise ValueError("query: empty; name what to look for (words of the item or output)")
        require_positive_int("k", k)
        return self._history_index().search(query, k)

    def _history_index(self) -> HistoryIndex:
        rec, refs = self._rec, self._refs
        stamp = (rec.version, rec.next, len(rec.archive), len(refs))
        if self._history is not None and self._history[0] == stamp:
            return self._history[1]
        live = rec.live
        why: dict[str, str] = {}
        for holder in live.values():
            for covered in holder.covers:
                why[covered] = "subtask process" if holder.role == "conclusion" else "summarized"
        docs = [HistoryDoc(i.id, i.source, i.round, i.text,
                           "superseded" if i.status == "superseded" else why.get(i.id, "dropped"))
                for i in rec.archive.values() if i.id not in live]
        docs += [HistoryDoc(info.ref_id, info.source, info.round, refs.text(info.ref_id), "stored output")
                 for info in (refs.info(r) for r in refs.ids())]
        index = HistoryIndex(docs)
        self._history = (stamp, index)
        return index

    def _archived_text(self, item_id: str) -> str | None:
        item = self._rec.archive.get(item_id)
        return None if item is None else item.text

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
