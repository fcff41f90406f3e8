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
  replaced in the view by an L5 reference + short summary; :meth:`read_ref` returns it unchanged;
* ``anomaly=None`` detects anomalies with :data:`~harness_lab.context.anomaly.ANOMALY_PATTERN`;
* compression never loses protected items (L0/L1, pinned, anomalies, failure reasons): a summary
  that drops one is caught by the self-check, reported, and the item is re-pinned verbatim;
  if protected content alone exceeds the budget the view says so (``view.over_budget``) rather than
  cut it;
* a summary with the key of an earlier one supersedes it visibly: both stay in the view, the earlier
  marked ``superseded by <id>``;
* :meth:`mark_stale` marks items (and summaries/conclusions built from them) stale;
  :meth:`reselect` takes stale items out of the view except L0/L1 and pinned ones; every item stays
  recorded in :meth:`state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from operator import attrgetter
from typing import Any

from .anomaly import is_anomalous
from .compress import (
    COMPRESSION_SOURCE_PREFIX,
    CompressionReport,
    Summarizer,
    compress_live,
    default_summarizer,
    find_losses,
)
from .items import ContextItem, ContextView, Layer, Role
from .refs import RefInfo, RefStore, describe_large_output
from .tokens import approx_token_count

__all__ = ["INTERACTION_WINDOW", "ContextManager"]

INTERACTION_WINDOW = 3  # interactions kept whole in L2 (seed 003, 3.2)
_STATE_VERSION = 1
_SUMMARIZABLE_ROLES = frozenset({"summary", "conclusion"})
_ORDER = attrgetter("layer", "seq")


class ContextManager:
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
        if budget_tokens <= 0 or output_cap_bytes <= 0:
            raise ValueError("budget_tokens and output_cap_bytes must be positive")
        if not 0 < low_water <= 1:
            raise ValueError("low_water must be in (0, 1]")
        self._budget = budget_tokens
        # Compression aims below the budget (hysteresis), so it runs every few steps, not every step.
        self.low_water = low_water
        self.output_cap_bytes = output_cap_bytes
        self.counter: Callable[[str], int] = counter or approx_token_count
        self.summarizer: Summarizer = summarizer or default_summarizer
        self.last_report: CompressionReport | None = None
        self._refs = RefStore()
        self._live: dict[str, ContextItem] = {}
        self._archive: dict[str, ContextItem] = {}  # latest version of every item ever made
        self._window: list[str] = []  # ids of the most recent interactions, oldest first
        self._next = 1
        self._segment = 0
        self._subtask: str | None = None
        self._total = 0
        self._view: ContextView | None = None

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
        ref_id = None
        if layer.compressible and self._too_large(text):
            info = self._refs.put(text, source=source, round=round)
            text, layer, ref_id = describe_large_output("", text, info), Layer.L5, info.ref_id
        return self._new(layer, text, source, round, pinned=pinned, anomaly=anomaly, key=key, ref_id=ref_id)

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
        flagged = is_anomalous(result) if anomaly is None else anomaly
        if self._too_large(result):
            info: RefInfo = self._refs.put(result, source=source, round=round)
            item = self._new(
                Layer.L5, describe_large_output(action, result, info), source, round,
                role="interaction", anomaly=flagged, ref_id=info.ref_id, key=key,
            )  # fmt: skip
        else:
            text = f"> {action}\n{result}"
            item = self._new(Layer.L2, text, source, round, role="interaction", anomaly=flagged, key=key)
        self._window.append(item.id)
        while len(self._window) > INTERACTION_WINDOW:
            old = self._live.get(self._window.pop(0))
            if old is not None and old.layer == Layer.L2:
                self._put(self._restamp(old, layer=Layer.L4))
        return item

    def add_feedback(self, round: int, text: str, *, source: str, key: str | None = None) -> ContextItem:
        """A failure reason from validation: pinned and an anomaly, so it reaches every later view.

        Feedback accumulates (each stays pinned) unless it has a *key*: a later feedback with the same
        key supersedes the earlier one, which stays visible but unpinned, so compression may fold it
        (use it for repeating warnings such as a budget alert).
        """
        item = self._new(Layer.L2, text, source, round, role="feedback", pinned=True, anomaly=True, key=key)
        earlier = self._current_with_key(key, exclude=item.id, roles=("feedback",))
        for old in earlier:  # no longer an open failure: let compression fold it
            self._store(self._restamp(old, pinned=False, anomaly=False))
        self._supersede(item, [self._archive[i.id] for i in earlier])
        return self._live[item.id]

    def begin_subtask(self, name: str, goal: str, *, round: int) -> ContextItem:
        """Open a subtask: its goal sits in L2 until :meth:`finish_subtask` collapses it."""
        self._subtask = name
        return self._new(Layer.L2, goal, f"subtask:{name}", round, role="subtask", key=f"subtask:{name}")

    def finish_subtask(self, name: str, conclusion: str, *, round: int) -> ContextItem:
        """Collapse the current subtask's process into one L3 conclusion (keep conclusion, drop process).

        The process is every unprotected L2/L4/L5 item added since the previous subtask ended;
        anomalies and pinned items of that span move to L3 verbatim; stored outputs it referenced
        are named in the conclusion so they stay fetchable.
        """
        process: list[ContextItem] = []
        refs: list[str] = []
        for item in list(self._live.values()):
            if item.segment != self._segment or item.layer not in (Layer.L2, Layer.L4, Layer.L5):
                continue
            if item.role == "resume":
                continue
            if item.protected:
                if item.layer != Layer.L5:
                    self._put(self._restamp(item, layer=Layer.L3))
                continue
            process.append(item)
            if item.ref_id:
                refs.append(item.ref_id)
            self._remove(item.id)
        self._window = [i for i in self._window if i in self._live]
        text = f"[round {round} conclusion of subtask {name}] {conclusion}"
        if refs:
            text += f"\n(stored outputs: {', '.join(refs)})"
        key = f"subtask:{name}"
        item = self._new(
            Layer.L3, text, key, round, role="conclusion", key=key, covers=tuple(i.id for i in process)
        )
        self._supersede(item, self._current_with_key(key, exclude=item.id))
        self._segment += 1
        self._subtask = None
        return self._live[item.id]

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
        stamped = f"[round {round} summary, from {source}] {text}"
        item = self._new(Layer.L3, stamped, source, round, role="summary", key=key)
        targets = self._current_with_key(key, exclude=item.id) if key else []
        if supersedes:
            for other in self._archive.values():
                hit = other.id == supersedes or (
                    other.key == supersedes and other.role in _SUMMARIZABLE_ROLES
                )
                if hit and other.id != item.id and other.status == "current" and other not in targets:
                    targets.append(other)
        self._supersede(item, targets)
        return self._live[item.id]

    def add_resume_note(self, text: str, *, round: int) -> ContextItem:
        """After a resume the view starts with this note (what was done, what is finished, where it
        stuck). An earlier resume note is marked superseded and unpinned."""
        item = self._new(Layer.L2, text, "resume", round, role="resume", pinned=True, key="resume")
        earlier = self._current_with_key("resume", exclude=item.id, roles=("resume",))
        for old in earlier:
            self._store(self._restamp(old, pinned=False))
        self._supersede(item, [self._archive[i.id] for i in earlier])
        return self._live[item.id]

    # ------------------------------------------------------------------ freshness

    def mark_stale(self, key_or_source: str) -> list[ContextItem]:
        """Mark items whose key or source matches (``source`` equal, or equal after its ``tool:``
        prefix, e.g. ``config.yaml`` matches ``read_file:config.yaml``) stale, along with summaries
        and conclusions built from them. Returns the stale versions of the items still in the view."""
        hit: set[str] = set()
        # One pass suffices: the record is in creation order and a summary only covers older items,
        # so staleness reaches summaries of summaries too.
        for item in self._archive.values():
            tail = item.source.split(":", 1)[-1]
            if key_or_source in (item.key, item.source, tail) or (
                item.role in _SUMMARIZABLE_ROLES and hit.intersection(item.covers)
            ):
                hit.add(item.id)
        marked: list[ContextItem] = []
        for item_id in sorted(hit, key=_id_number):
            item = self._archive[item_id]
            if item.freshness != "stale":
                item = self._restamp(item, freshness="stale")
                self._store(item)
            if item_id in self._live:
                marked.append(item)
        return marked

    def reselect(self) -> None:
        """Take stale items out of the view (L0/L1 and pinned ones stay, shown stale); all stay recorded."""
        for item in list(self._live.values()):
            if item.freshness == "stale" and item.layer.compressible and not item.pinned:
                self._remove(item.id)
                if item.source.startswith(COMPRESSION_SOURCE_PREFIX):
                    # A summary goes stale with any one of its sources; the fresh anomalies it
                    # carried did not, so they come back verbatim and pinned.
                    for carried in (self._archive[c] for c in item.carries):
                        if carried.freshness == "fresh":
                            self._put(self._restamp(carried, layer=item.layer, pinned=True))

    # ------------------------------------------------------------------ reading

    def read_ref(self, ref_id: str, start: int = 0, end: int | None = None) -> str:
        """Characters ``[start:end]`` of a stored large output, unchanged (Python slice semantics)."""
        return self._refs.read(ref_id, start, end)

    def ref_info(self, ref_id: str) -> RefInfo:
        return self._refs.info(ref_id)

    @property
    def budget_tokens(self) -> int:
        return self._budget

    @budget_tokens.setter
    def budget_tokens(self, value: int) -> None:
        """Changing the budget (e.g. a budget squeeze) takes effect at the next :meth:`view`."""
        if value <= 0:
            raise ValueError("budget_tokens must be positive")
        self._budget = value
        self._view = None

    @property
    def total_tokens(self) -> int:
        return self._total

    def item(self, item_id: str) -> ContextItem:
        """Any item ever added or made, in its latest version (in the view or not)."""
        return self._archive[item_id]

    def view(self) -> ContextView:
        """The frozen view; compresses first when the context is over budget."""
        if self._view is None:
            if self._total > self.budget_tokens:
                self._compress(self._low_water_target(), proactive=False)
            self._view = self._build_view()
        return self._view

    def compress(self, target_tokens: int | None = None) -> CompressionReport:
        """An explicit pass: L4 is summarized even if the context fits, then layers are compressed
        in policy order while over *target_tokens* (default: ``low_water`` x budget)."""
        return self._compress(target_tokens or self._low_water_target(), proactive=True)

    def self_check(self, before: ContextView, after: ContextView) -> list[str]:
        """Every anomaly, pinned fact or failure reason in *before* that *after* lost (empty = fine)."""
        return find_losses(before.items, after.items, self._archive.__getitem__).all()

    # ------------------------------------------------------------------ state

    def state(self) -> dict[str, Any]:
        """Everything, JSON-able; :meth:`from_state` rebuilds an identical manager."""
        return {
            "kind": "context_state",
            "version": _STATE_VERSION,
            "budget_tokens": self.budget_tokens,
            "output_cap_bytes": self.output_cap_bytes,
            "low_water": self.low_water,
            "next": self._next,
            "segment": self._segment,
            "subtask": self._subtask,
            "window": list(self._window),
            "live": list(self._live),
            "items": [item.to_dict() for item in self._archive.values()],
            "refs": self._refs.to_dict(),
        }

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any],
        counter: Callable[[str], int] | None = None,
        *,
        summarizer: Summarizer | None = None,
    ) -> ContextManager:
        """Rebuild from :meth:`state`; token counts are recomputed with *counter*."""
        if state.get("kind") != "context_state" or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a context state of version {_STATE_VERSION}")
        ctx = cls(
            int(state["budget_tokens"]),
            counter,
            int(state["output_cap_bytes"]),
            summarizer=summarizer,
            low_water=float(state["low_water"]),
        )
        ctx._next = int(state["next"])
        ctx._segment = int(state["segment"])
        ctx._subtask = state["subtask"]
        ctx._window = [str(i) for i in state["window"]]
        ctx._refs = RefStore.from_dict(state["refs"])
        for data in state["items"]:
            item = ContextItem.from_dict(data)
            ctx._archive[item.id] = ctx._restamp(item)
        for item_id in state["live"]:
            ctx._put(ctx._archive[str(item_id)])
        return ctx

    # ------------------------------------------------------------------ internals

    def _low_water_target(self) -> int:
        return max(1, int(self.budget_tokens * self.low_water))

    def _too_large(self, text: str) -> bool:
        # A str of n chars encodes to n..4n bytes; only encode when the answer is not obvious.
        if len(text) * 4 <= self.output_cap_bytes:
            return False
        return len(text) > self.output_cap_bytes or len(text.encode("utf-8")) > self.output_cap_bytes

    def _new(
        self,
        layer: Layer,
        text: str,
        source: str,
        round: int,
        *,
        role: Role = "note",
        pinned: bool = False,
        anomaly: bool = False,
        key: str | None = None,
        ref_id: str | None = None,
        covers: tuple[str, ...] = (),
        seq: int | None = None,
        carries: tuple[str, ...] = (),
    ) -> ContextItem:
        n = self._next
        self._next += 1
        item = ContextItem(
            id=f"c{n}", layer=layer, text=text, source=source, round=round, tokens=0,
            seq=n if seq is None else seq, role=role, pinned=pinned, anomaly=anomaly, key=key,
            ref_id=ref_id, covers=covers, carries=carries, segment=self._segment,
        )  # fmt: skip
        _set_tokens(item, self.counter(item.render()))
        self._put(item)
        return item

    def _restamp(self, item: ContextItem, **changes: Any) -> ContextItem:
        """A new version of *item* with *changes*, its token count redone (the header may differ)."""
        item = replace(item, **changes)
        _set_tokens(item, self.counter(item.render()))
        return item

    def _put(self, item: ContextItem) -> None:
        old = self._live.get(item.id)
        self._total += item.tokens - (old.tokens if old else 0)
        self._live[item.id] = item
        self._archive[item.id] = item
        self._view = None

    def _store(self, item: ContextItem) -> None:
        """Record a new version: in the view if the item is there, else only in the record."""
        if item.id in self._live:
            self._put(item)
        else:
            self._archive[item.id] = item

    def _remove(self, item_id: str) -> None:
        self._total -= self._live.pop(item_id).tokens
        self._view = None

    def _current_with_key(
        self, key: str | None, *, exclude: str, roles: tuple[str, ...] = ("summary", "conclusion")
    ) -> list[ContextItem]:
        if key is None:
            return []
        return [
            i for i in self._archive.values()
            if i.key == key and i.status == "current" and i.id != exclude and i.role in roles
        ]  # fmt: skip

    def _supersede(self, item: ContextItem, targets: list[ContextItem]) -> None:
        if not targets:
            return
        for old in targets:
            new = self._restamp(old, status="superseded", superseded_by=item.id)
            self._store(new)
        self._put(self._restamp(self._live[item.id], supersedes=",".join(t.id for t in targets)))

    def _make_summary(self, layer: Layer, group: list[ContextItem], body: str) -> ContextItem:
        rounds = sorted({i.round for i in group})
        sources = list(dict.fromkeys(i.source for i in group))
        shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
        span = f"round {rounds[0]}" if len(rounds) == 1 else f"rounds {rounds[0]}-{rounds[-1]}"
        text = f"[{span} summary, from {shown}]\n{body}"
        carries = tuple(i.id for i in group if i.anomaly and i.text in text)
        n = self._next
        self._next += 1
        item = ContextItem(
            id=f"c{n}", layer=layer, text=text, source=f"{COMPRESSION_SOURCE_PREFIX}{layer.name}",
            round=rounds[-1], tokens=0, seq=min(i.seq for i in group), role="summary",
            anomaly=bool(carries), covers=tuple(i.id for i in group), carries=carries,
            segment=max(i.segment for i in group),
        )  # fmt: skip
        _set_tokens(item, self.counter(item.render()))
        return item

    def _compress(self, target: int, *, proactive: bool) -> CompressionReport:
        before = self._build_view()
        live = dict(self._live)
        result = compress_live(
            live,
            target=target,
            archive=self._archive,
            summarizer=self.summarizer,
            make_summary=self._make_summary,
            restamp=lambda item, changes: self._restamp(item, **changes),
            proactive=proactive,
        )
        self._live = live
        self._archive.update(live)
        self._total = sum(i.tokens for i in live.values())
        self._view = None
        after = self._build_view()
        report = CompressionReport(
            tokens_before=before.total_tokens,
            tokens_after=after.total_tokens,
            budget_tokens=self.budget_tokens,
            target_tokens=target,
            summarized=tuple(result.summarized),
            dropped=tuple(result.dropped),
            created=tuple(result.created),
            repinned=tuple(result.repinned),
            lost_anomalies=tuple(result.lost_anomalies),
            lost_pinned=tuple(result.lost_pinned),
            lost_failures=tuple(result.lost_failures),
            residual=tuple(self.self_check(before, after)),
            over_budget=after.total_tokens > self.budget_tokens,
        )
        self.last_report = report
        return report

    def _build_view(self) -> ContextView:
        # Stable sort by (layer, seq); ties keep insertion order, which state() preserves.
        items = sorted(self._live.values(), key=_ORDER)
        resume = [i for i in items if i.role == "resume" and i.status == "current"]
        if resume:
            items = resume + [i for i in items if i not in resume]
        return ContextView(tuple(items), self._total, self.budget_tokens)


def _set_tokens(item: ContextItem, tokens: int) -> None:
    # Set once, right after the item is made and before anyone else holds it: the count depends on
    # the rendered header, which needs the finished item, and a second dataclass copy costs ~10 us.
    object.__setattr__(item, "tokens", tokens)


def _id_number(item_id: str) -> int:
    return int(item_id[1:])
