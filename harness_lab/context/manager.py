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

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .anomaly import is_anomalous
from .changes import CHANGES_VERSION, SCALARS, plain_ids, usual_log_json
from .compress import Summarizer, default_summarizer, run_pass
from .items import ContextItem, ContextView, Layer
from .record import ItemRecord
from .refs import RefInfo, RefStore, _entry, describe_large_output
from .selfcheck import CompressionReport, find_losses
from .tokens import approx_token_count

__all__ = ["INTERACTION_WINDOW", "ContextManager"]

INTERACTION_WINDOW = 3  # interactions kept whole in L2 (seed 003, 3.2)
_STATE_VERSION = 1
_SUMMARIZABLE_ROLES = frozenset({"summary", "conclusion"})
_L2, _L4 = Layer.L2, Layer.L4  # a module lookup, not an enum class's (~90 ns each, every step)


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
        _require_positive_int("budget_tokens", budget_tokens)
        _require_positive_int("output_cap_bytes", output_cap_bytes)
        if not 0 < low_water <= 1:
            raise ValueError("low_water must be in (0, 1]")
        self._budget = budget_tokens
        # Compression aims below the budget (hysteresis), so it runs every few steps, not every step.
        self.low_water = low_water
        self.output_cap_bytes = output_cap_bytes
        self.summarizer: Summarizer = summarizer or default_summarizer
        self.last_report: CompressionReport | None = None
        self._rec = ItemRecord(approx_token_count if counter is None or counter is approx_token_count
                               else _checked(counter))
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
        self._rec.maybe_retire()
        text, source, key = _utf8(text), _utf8(source), _utf8_or_none(key)
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
        rec = self._rec
        rec.maybe_retire()
        if not (action.isascii() and result.isascii() and source.isascii()) or (key is not None and not key.isascii()):
            action, result, source, key = _utf8(action), _utf8(result), _utf8(source), _utf8_or_none(key)
        flagged = is_anomalous(result) if anomaly is None else anomaly
        if len(result) * 4 > self.output_cap_bytes and self._too_large(result):  # (its first test, inline)
            info: RefInfo = self._refs.put(result, source=source, round=round)
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
        text, source, key = _utf8(text), _utf8(source), _utf8_or_none(key)
        item = self._new(Layer.L2, text, source, round, role="feedback", pinned=True, anomaly=True, key=key)
        earlier = self._rec.current_with_key(key, exclude=item.id, roles=("feedback",))
        for old in earlier:  # no longer an open failure: let compression fold it
            self._rec.store(self._rec.restamp(old, pinned=False, anomaly=False))
        return self._rec.supersede(item, [self._rec.archive[i.id] for i in earlier])

    def begin_subtask(self, name: str, goal: str, *, round: int) -> ContextItem:
        """Open a subtask: its goal sits in L2 until :meth:`finish_subtask` collapses it."""
        self._rec.maybe_retire()
        name, goal = _utf8(name), _utf8(goal)
        self._subtask = name
        return self._new(Layer.L2, goal, f"subtask:{name}", round, role="subtask", key=f"subtask:{name}")

    def finish_subtask(self, name: str, conclusion: str, *, round: int) -> ContextItem:
        """Collapse the current subtask's process into one L3 conclusion (keep conclusion, drop process).

        The process is every unprotected L2/L4/L5 item added since the previous subtask ended;
        anomalies and pinned items of that span move to L3 verbatim; stored outputs it referenced
        are named in the conclusion so they stay fetchable.
        """
        self._rec.maybe_retire()
        name, conclusion = _utf8(name), _utf8(conclusion)
        process: list[ContextItem] = []
        refs: list[str] = []
        for item in list(self._rec.live.values()):
            if item.segment != self._rec.segment or item.layer not in (Layer.L2, Layer.L4, Layer.L5):
                continue
            if item.role == "resume":
                continue
            if item.protected:
                if item.layer != Layer.L5:
                    self._rec.put(self._rec.restamp(item, layer=Layer.L3))
                continue
            process.append(item)
            if item.ref_id:
                refs.append(item.ref_id)
            self._rec.remove(item.id)
        self._window = [i for i in self._window if i in self._rec.live]
        text = f"[round {round} conclusion of subtask {name}] {conclusion}"
        if refs:
            text += f"\n(stored outputs: {', '.join(refs)})"
        key = f"subtask:{name}"
        item = self._new(
            Layer.L3, text, key, round, role="conclusion", key=key, covers=tuple(i.id for i in process)
        )
        item = self._rec.supersede(item, self._rec.current_with_key(key, exclude=item.id))
        self._rec.segment += 1
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
        text, source, key, supersedes = _utf8(text), _utf8(source), _utf8_or_none(key), _utf8_or_none(supersedes)
        stamped = f"[round {round} summary, from {source}] {text}"
        item = self._new(Layer.L3, stamped, source, round, role="summary", key=key)
        targets = self._rec.current_with_key(key, exclude=item.id) if key else []
        if supersedes:
            for other in self._rec.archive.values():
                hit = other.id == supersedes or (
                    other.key == supersedes and other.role in _SUMMARIZABLE_ROLES
                )
                if hit and other.id != item.id and other.status == "current" and other not in targets:
                    targets.append(other)
        return self._rec.supersede(item, targets)

    def add_resume_note(self, text: str, *, round: int) -> ContextItem:
        """After a resume the view starts with this note (what was done, what is finished, where it
        stuck). An earlier resume note is marked superseded and unpinned."""
        self._rec.maybe_retire()
        text = _utf8(text)
        item = self._new(Layer.L2, text, "resume", round, role="resume", pinned=True, key="resume")
        earlier = self._rec.current_with_key("resume", exclude=item.id, roles=("resume",))
        for old in earlier:
            self._rec.store(self._rec.restamp(old, pinned=False))
        return self._rec.supersede(item, [self._rec.archive[i.id] for i in earlier])

    # ------------------------------------------------------------------ freshness

    def mark_stale(self, key_or_source: str) -> list[ContextItem]:
        """Mark items whose key or source matches (``source`` equal, or equal after its ``tool:``
        prefix, e.g. ``config.yaml`` matches ``read_file:config.yaml``) stale, along with summaries
        and conclusions built from them, and the stored outputs of those items or of that source
        (:meth:`read_ref` says so from then on). Returns the stale versions of the items still in the view."""
        key_or_source = _utf8(key_or_source)
        refs: list[str] = []
        marked = self._rec.mark_stale(key_or_source, refs)
        # by source too: the item that showed an output may be retired by now
        refs += [r for r, source in self._refs.sources() if key_or_source in (source, source.split(":", 1)[-1])]
        if refs:
            last = next(reversed(self._rec.archive.values()), None)
            for ref_id in refs:
                info = self._refs.info(ref_id)
                since = info.round if last is None else max(info.round, last.round)
                self._refs.mark_stale(ref_id, (
                    f"[stale: {ref_id} (stored in round {info.round}, from {info.source!r}) was marked stale after "
                    f"round {since} by an outside change ({key_or_source!r}); its source may no longer match "
                    "this text: re-read it before relying on it]"))
        return marked

    def reselect(self) -> None:
        """Take stale items out of the view (L0/L1 and pinned ones stay, shown stale); all stay recorded.

        A stale compression summary gives back the fresh anomalies it carried, verbatim and pinned.
        """
        self._rec.reselect()

    # ------------------------------------------------------------------ reading

    def read_ref(self, ref_id: str, start: int = 0, end: int | None = None) -> str:
        """Characters ``[start:end]`` of a stored large output, unchanged (Python slice semantics); if
        its source was marked stale (:meth:`mark_stale`), after a first line that says so."""
        text = self._refs.read(ref_id, start, end)
        note = self._refs.stale.get(ref_id)
        return text if note is None else f"{note}\n{text}"

    def ref_text(self, ref_id: str) -> str:
        """The whole stored output exactly as stored, stale or not (a checkpoint's blob holds this)."""
        return self._refs.read(ref_id)

    def ref_info(self, ref_id: str) -> RefInfo:
        return self._refs.info(ref_id)

    @property
    def budget_tokens(self) -> int:
        return self._budget

    @budget_tokens.setter
    def budget_tokens(self, value: int) -> None:
        """Changing the budget (e.g. a budget squeeze) takes effect at the next :meth:`view`."""
        _require_positive_int("budget_tokens", value)
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
        """Every anomaly, pinned fact or failure reason in *before* that *after* lost (empty = fine)."""
        return find_losses(before.items, after.items, self._rec.archive.get).all()

    # ------------------------------------------------------------------ state

    def state(self, *, ref_texts: bool = True, raw_items: bool = False) -> dict[str, Any]:
        """Everything, JSON-able; :meth:`from_state` rebuilds an identical manager. ``ref_texts=False``
        names stored outputs by sha256 instead of carrying their texts (a store keeps them once);
        ``raw_items=True`` leaves ``items`` as :class:`ContextItem` objects (``to_dict`` each to
        serialise; a checkpoint reuses the text of an item version it wrote before)."""
        return {
            "kind": "context_state",
            "version": _STATE_VERSION,
            "budget_tokens": self.budget_tokens,
            "output_cap_bytes": self.output_cap_bytes,
            "low_water": self.low_water,
            "subtask": self._subtask,
            "window": list(self._window),
            **self._rec.to_dict(raw_items=raw_items),
            "refs": self._refs.to_dict(texts=ref_texts),
            **({"stale_refs": dict(self._refs.stale)} if self._refs.stale else {}),
        }

    def take_changes(self, *, raw_items: bool = False) -> dict[str, Any]:
        """What changed since the last call (or since the manager was made or loaded), JSON-able
        (``raw_items`` as in :meth:`state`); new stored outputs are named by sha256 (read their texts
        with :meth:`read_ref`). Only what changed is there: ``items`` (new or rewritten texts) always,
        ``patches`` (the changed fields of other rewritten items), ``retired``, ``live`` or ``live_delta``,
        ``stubs``, ``refs`` and each scalar of :data:`~harness_lab.context.changes.SCALARS` only when
        they say something (all scalars in the first log after a state was written or loaded)."""
        return self._log(self._rec.take_changes(), raw_items)

    def take_changes_json(self, dumps: Callable[[Any], str]) -> tuple[str, list[ContextItem], list[dict[str, Any]]]:
        """:meth:`take_changes` (``raw_items=True``) as a checkpoint row holds it: the compact JSON of all
        but its ``items`` (``dumps`` of that dict, byte for byte), the items, and the ``refs`` entries
        (empty when none). The usual step's log (new items, layer patches, ids added to the view, window
        and next) is spelled from its pieces, without the dict and the generic dump."""
        changes = self._rec.take_changes()
        _, patches, retired, live, stubs = changes
        values, logged = self._scalar_values(), self._logged_scalars
        usual = not (retired or stubs is not None or logged is None or not self._plain_ids or self._refs.has_new()
                     or self._refs.stale_changed
                     or values[:4] != logged[:4] or values[6:] != logged[6:] or (live is not None and live[0] is not None))
        for p in patches if usual else ():
            if len(p) != 2 or "layer" not in p:
                usual = False
                break
        if not usual:
            out = self._log(changes, True)
            items = out.pop("items")
            return dumps(out), items, out.get("refs", [])
        assert logged is not None  # (for mypy: usual implies it)
        self._logged_scalars = values
        head = usual_log_json(patches, None if live is None else live[1], values[4] if values[4] != logged[4] else None,
                              values[5] if values[5] != logged[5] else None)
        return head, changes[0], []

    def _log(self, changes: tuple[list[ContextItem], list[dict[str, Any]], list[str],
                                  tuple[list[str] | None, list[str]] | None, list[list[Any]] | None],
             raw_items: bool) -> dict[str, Any]:
        """take_changes' dict of the record's changes."""
        rec = self._rec
        items, patches, retired, live, stubs = changes
        out: dict[str, Any] = {"kind": "context_changes", "version": CHANGES_VERSION,
                               "items": items if raw_items else [i.to_dict() for i in items]}
        if patches:
            out["patches"] = patches
        if retired:
            out["retired"] = retired
        if live is not None:
            before, after = live
            if before is None:  # ids appended only (the record knows): live_delta's usual case
                out["live_delta"] = {"add": after}
            elif (delta := rec.live_delta(before, after)) is not None:
                out["live_delta"] = delta
            else:
                out["live"] = after
        if stubs is not None:
            out["stubs"] = stubs
        if self._refs.has_new():
            out["refs"] = [_entry(info, None) for info, _ in self._refs.take_new()]
        if self._refs.stale_changed:
            out["stale_refs"] = dict(self._refs.stale)
            self._refs.stale_changed = False
        values, logged = self._scalar_values(), self._logged_scalars
        if logged is None:
            out.update(zip(SCALARS, values, strict=True))
        elif values[:4] == logged[:4] and values[6:] == logged[6:]:  # the usual step: at most these two
            if values[4] != logged[4]:
                out["window"] = values[4]
            if values[5] != logged[5]:
                out["next"] = values[5]
        else:
            for key, value, was in zip(SCALARS, values, logged, strict=False):  # (all of length 8)
                if value != was:
                    out[key] = value
        self._logged_scalars = values
        return out

    def demoted_versions(self) -> list[tuple[ContextItem, ContextItem]]:
        """The (before, after) versions of the items that the last :meth:`take_changes` patched in their
        layer alone, made so by a demotion out of the interaction window (every other field shared): a
        checkpoint derives the new version's text from the old one's."""
        return self._rec.demoted

    def retire(self) -> list[str]:
        """Retire now what would be retired at the next pass (items that left the view for good and
        that nothing retained refers to; see the class notes); the retired ids. A checkpoint calls
        this before writing a whole state, so the state holds only what a restore can need."""
        return self._rec.retire()

    def discard_changes(self) -> None:
        """Start a new change log here (after the whole state was written)."""
        self._rec.forget_changes()
        self._refs.take_new()
        self._refs.stale_changed = False
        self._logged_scalars = None

    def state_scalars(self) -> dict[str, Any]:
        return dict(zip(SCALARS, self._scalar_values(), strict=True))

    def _scalar_values(self) -> tuple[Any, ...]:
        rec = self._rec  # in the order of SCALARS (take_changes knows window and next by position)
        return (self._budget, self.output_cap_bytes, self.low_water, self._subtask, list(self._window),
                rec.next, rec.segment, rec.retained)

    def attach_ref_loader(self, loader: Callable[[str], str | None]) -> None:
        """Where stored outputs not in memory are read from (sha256 -> text; a store's blobs)."""
        self._refs.loader = loader

    def release_ref_texts(self, sha256s: Iterable[str]) -> None:
        """Drop these stored outputs' texts from memory (only when a ref loader can fetch them again)."""
        self._refs.release_texts(sha256s)

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
        if state.get("kind") != "context_state" or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a context state of version {_STATE_VERSION}")
        ctx = cls(
            int(state["budget_tokens"]),
            counter,
            int(state["output_cap_bytes"]),
            summarizer=summarizer,
            low_water=float(state["low_water"]),
        )
        ctx._subtask = state["subtask"]
        ctx._window = [str(i) for i in state["window"]]
        ctx._refs = RefStore.from_dict(state["refs"], ref_loader)
        ctx._refs.stale = {str(r): str(note) for r, note in state.get("stale_refs", {}).items()}
        ctx._rec.load(state)
        ctx._plain_ids = plain_ids([*ctx._rec.archive, *ctx._window])
        return ctx

    # ------------------------------------------------------------------ internals

    def _low_water_target(self) -> int:
        return max(1, int(self.budget_tokens * self.low_water))

    def _too_large(self, text: str) -> bool:
        # A str of n chars encodes to n..4n bytes; only encode when the answer is not obvious.
        if len(text) * 4 <= self.output_cap_bytes:
            return False
        return len(text) > self.output_cap_bytes or len(text.encode("utf-8")) > self.output_cap_bytes

    def _new(self, layer: Layer, text: str, source: str, round: int, **fields: Any) -> ContextItem:
        return self._rec.new(layer=layer, text=text, source=source, round=round, **fields)

    def _compress(self, target: int, *, proactive: bool) -> CompressionReport:
        report = run_pass(
            self._rec, target=target, budget=self._budget, summarizer=self.summarizer, proactive=proactive
        )
        self.last_report = report
        return report


def _require_positive_int(name: str, value: object) -> None:
    # bool is an int, and a float or str compared fine but made fractional budgets and caps
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _checked(counter: Callable[[str], int]) -> Callable[[str], int]:
    """*counter*, refusing what is not a token count: a negative or missing count would make the
    total (and the run's token budget, which spends it) meaningless, silently."""
    name = getattr(counter, "__qualname__", None) or type(counter).__name__

    def count(text: str) -> int:
        n = counter(text)
        try:
            ok = not isinstance(n, bool) and operator.index(n) >= 0  # an int, or an int-like (numpy)
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"token counter {name} returned {n!r} for a text of {len(text)} chars; "
                             "a counter must return a non-negative int")
        return operator.index(n)

    count.__wrapped__ = counter  # type: ignore[attr-defined]
    return count


_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> str:
    """*text* with each lone surrogate (a non-UTF-8 byte in a file name that os.listdir decoded, say)
    as U+FFFD: such a str cannot be encoded, counted, stored or shown to a model."""
    return text if text.isascii() or _SURROGATE.search(text) is None else _SURROGATE.sub("\ufffd", text)


def _utf8_or_none(text: str | None) -> str | None:
    return None if text is None else _utf8(text)
