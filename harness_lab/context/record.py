"""The item record behind the manager: the items in the view, what they still refer to, a running total.

Items are immutable; a change is a new version (:meth:`ItemRecord.restamp`) whose token count is
redone once, because the rendered header (layer, freshness, status) is part of what is counted.
``version`` increases with every change to the view so the manager can cache its frozen view.

Retention. ``archive`` holds the latest version of every item that can still matter: the view, what
a retained summary or conclusion carries (it unpacks into those) or covers when that is a summary or
conclusion itself, and the current keyed summaries, conclusions, feedback and resume notes (a later
one with the same key supersedes them). Any other item a retained summary or conclusion covers is
kept as a *stub* (``stubs``: id -> key, source): all :meth:`mark_stale` needs to make the summary
stale with it. Everything else left the view for good and is *retired* (:meth:`ItemRecord.retire`)
once the archive has grown by ``max(128, live)`` items since the last retirement, so memory and the
state stay bounded by the view, not by history.

Change log. Every archive write and retirement is noted until :meth:`ItemRecord.take_changes`, so a
checkpoint can store what changed since the previous one instead of the whole record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from ._versions import INIT_SET, REQUIRED, build, count, counted, patch, relayered, replace
from .items import _LAYER_NAMES, ContextItem, Layer, Role, view_order
from .tokens import approx_token_count

__all__ = ["BUILT_FROM_OTHERS", "ItemRecord"]

BUILT_FROM_OTHERS = frozenset({"summary", "conclusion"})
# Roles a later item with the same key supersedes (current_with_key callers): kept while current.
_SUPERSEDABLE = frozenset({"summary", "conclusion", "feedback", "resume"})
_tokens = attrgetter("tokens")
RETIRE_MIN = 128  # archive growth (items) that triggers a retirement pass; amortizes its O(archive)


class ItemRecord:
    """Latest version of every item (``archive``), the items in the view (``live``) and their total."""

    def __init__(self, counter: Callable[[str], int]) -> None:
        self.counter = counter
        self.live: dict[str, ContextItem] = {}
        self.archive: dict[str, ContextItem] = {}
        self.total = 0
        self.next = 1  # next item number: ids are c1, c2, ... in creation order
        self.segment = 0  # current subtask span; finish_subtask closes it
        self.version = 0
        self.retained = 0  # archive size after the last retirement pass (part of the state)
        self.retire_min = RETIRE_MIN
        self.stubs: dict[str, tuple[str | None, str]] = {}  # retired but covered: id -> (key, source)
        self._stubs_dirty = False
        self._stub_rows: list[list[Any]] | None = None  # stub_list(), kept until the stubs change
        # ids written since take_changes, first-write order -> the version the change log's reader
        # has (the archive's before that first write; None: new since)
        self._changed: dict[str, ContextItem | None] = {}
        self._retired: list[str] = []
        self._live_dirty = False
        # The view's membership change since then: the ids appended, in order, and (taken before the
        # first change that is not an append, such as a removal) the membership then; a step only appends.
        self._live_added: list[str] = []
        self._live_before: list[str] | None = None
        # Versions relayer() made (before, after), by id; the last take_changes' patches among them.
        self._relayered: dict[str, tuple[ContextItem, ContextItem]] = {}
        self.demoted: list[tuple[ContextItem, ContextItem]] = []
        # Whether a retirement pass could retire anything. Right after one the archive holds only what
        # it kept, and that stays kept until an item leaves the view, a version out of the view is
        # written (a status or key change, a restore), or a rewrite changes what an item covers or
        # carries: only those set this. New items in the view are kept. A checkpoint asks every few
        # steps, mostly with nothing to retire.
        self._retire_due = True

    def make(self, **fields: Any) -> ContextItem:
        """A new item (id, seq and segment filled in, tokens counted) that is not yet in the view."""
        n = self.next
        self.next += 1
        if not fields.keys() <= INIT_SET:
            raise TypeError(f"not fields of ContextItem: {sorted(set(fields) - INIT_SET)}")
        fields["id"], fields["tokens"] = f"c{n}", 0
        fields.setdefault("seq", n)
        fields.setdefault("segment", self.segment)
        if missing := REQUIRED - fields.keys():
            raise TypeError(f"missing fields of ContextItem: {sorted(missing)}")
        item = build(**fields)
        count(item, self.counter)
        return item

    def new(self, **fields: Any) -> ContextItem:
        """A new item, put in the view."""
        item = self.make(**fields)
        self.put(item)
        return item

    def add(self, layer: Layer, text: str, source: str, round: int, role: Role, anomaly: bool,
            key: str | None, ref_id: str | None = None) -> ContextItem:
        """``new(...)`` of an unpinned item with these fields, without the keyword dicts and calls
        (~9 -> ~1.5 µs): every step adds an interaction."""
        n = self.next
        self.next = n + 1
        item = counted(self.counter, f"c{n}", layer, text, source, round, n, role, anomaly, key, ref_id,
                       self.segment)
        # put(item) for an id never seen: not in the view, the archive or the change log
        item_id = item.id
        self.total += item.tokens
        self._live_dirty = True
        self.live[item_id] = item
        self._live_added.append(item_id)
        self._changed[item_id] = None
        self.archive[item_id] = item
        self.version += 1
        return item

    def restamp(self, item: ContextItem, **changes: Any) -> ContextItem:
        """A new version of *item* with *changes*, its token count redone."""
        item = replace(item, changes)
        count(item, self.counter)
        return item

    def relayer(self, item: ContextItem, layer: Layer) -> ContextItem:
        """``restamp(item, layer=layer)`` at half its cost (a step demotes one interaction). The header
        differs only in the layer's two-letter name, so it is patched, and with the default counter
        the count stays: the rendered text keeps its UTF-8 length. Any other counter counts again, as
        does an item this record has not counted (loaded out of the view: no header cached)."""
        if self.counter is not approx_token_count or not item._header:
            return self.restamp(item, layer=layer)
        new = relayered(item, layer, f"[{_LAYER_NAMES[layer]}{item._header[3:]}")
        self._relayered[item.id] = (item, new)  # all else shared: take_changes needs no field compare
        return new

    def demote(self, item: ContextItem, layer: Layer) -> None:
        """``put(relayer(item, layer))`` of *item*, the version in the view (a step demotes the interaction
        that left the window): with the default counter its count stays, so the total does, and the new
        version shares covers and carries, so no retirement becomes due."""
        if self.counter is not approx_token_count or not item._header:
            self.put(self.relayer(item, layer))
            return
        item_id = item.id
        new = relayered(item, layer, f"[{_LAYER_NAMES[layer]}{item._header[3:]}")
        self._relayered[item_id] = (item, new)
        self.live[item_id] = new
        if item_id not in self._changed:
            self._changed[item_id] = self.archive.get(item_id)
        self.archive[item_id] = new
        self.version += 1

    def put(self, item: ContextItem) -> None:
        """Put (a new version of) *item* in the view and the record."""
        item_id = item.id
        old = self.live.get(item_id)
        if old is None:
            self.total += item.tokens
            self._live_dirty = True
            self._live_added.append(item_id)
        else:
            self.total += item.tokens - old.tokens
            if item.covers is not old.covers or item.carries is not old.carries:  # (a version shares them)
                self._retire_due = True
        self.live[item_id] = item
        if item_id not in self._changed:  # _record(item), inline: a step puts twice
            self._changed[item_id] = self.archive.get(item_id)
        self.archive[item_id] = item
        self.version += 1

    def store(self, item: ContextItem) -> None:
        """Record a new version: in the view if the item is there, else only in the record."""
        if item.id in self.live:
            self.put(item)
        else:
            self._record(item)
            self._retire_due = True

    def remove(self, item_id: str) -> None:
        self._keep_live_before()
        self.total -= self.live.pop(item_id).tokens
        self._live_dirty = self._retire_due = True
        self.version += 1

    def replace_live(self, live: dict[str, ContextItem]) -> None:
        """Adopt the result of a compression pass (new and changed items are recorded too)."""
        self._keep_live_before()
        self.live = live
        archive = self.archive
        for item in live.values():
            if archive.get(item.id) is not item:
                self._record(item)
        self.total = sum(map(_tokens, live.values()))  # (in C: a generator resumes once per item)
        self._live_dirty = self._retire_due = True
        self.version += 1

    def _keep_live_before(self) -> None:
        """Called before the view's membership changes other than by an append: keep what it was."""
        if self._live_before is None:
            live = list(self.live)
            self._live_before = live[: len(live) - len(self._live_added)]

    def _record(self, item: ContextItem) -> None:
        if item.id not in self._changed:
            self._changed[item.id] = self.archive.get(item.id)
        self.archive[item.id] = item

    # -- retention and the change log -------------------------------------------------------------
    def maybe_retire(self) -> None:
        """Retire when the archive grew enough since the last pass (call between operations only:
        mid-operation, items just taken out of the view are not yet covered by what replaces them)."""
        grown = len(self.archive) - self.retained
        if grown >= self.retire_min and grown >= len(self.live):  # max() of the two, without its call
            self.retire()

    def retire(self) -> list[str]:
        """Drop every archived item that nothing retained refers to (see the module docstring)."""
        if self._live_before is not None:  # then unread until the next take: bounded in a run that takes none
            self._live_added = []
        if not self._retire_due:  # nothing could go (see __init__): the pass's outcome, without it
            self.retained = len(self.archive)
            return []
        archive = self.archive
        keep = set(self.live)
        # the view (kept as a whole) and the current keyed items outside it (key first: mostly None)
        keyed = [i for i in archive.values()
                 if i.key is not None and i.status == "current" and i.role in _SUPERSEDABLE and i.id not in keep]
        keep.update(i.id for i in keyed)
        # The walk follows covers and carries: items with neither (most) add nothing to it.
        todo = [i for items in (self.live.values(), keyed) for i in items if i.covers or i.carries]
        covered: set[str] = set()
        while todo:  # the closure; the order of the walk does not change it
            item = todo.pop()
            if item.covers:
                covered.update(item.covers)
                # A summary covers ~100 ids, mostly retired long ago: the few still archived, found in C.
                for ref in (archive.keys() & item.covers) - keep:
                    if archive[ref].role in BUILT_FROM_OTHERS:
                        keep.add(ref)
                        todo.append(archive[ref])
            for ref in item.carries:
                if ref not in keep and ref in archive:
                    keep.add(ref)
                    todo.append(archive[ref])
        stubs = self.stubs
        dirty = not stubs.keys() <= covered  # usually every stub is still covered: kept in place
        if dirty:
            stubs = {i: s for i, s in stubs.items() if i in covered}
        gone = [i for i in archive if i not in keep]
        take = archive.pop
        for item_id in gone:
            item = take(item_id)
            if item_id in covered:  # a retired item is never a stub already: a new one
                stubs[item_id] = (item.key, item.source)
                dirty = True
        # The change log's entries of retired items go (relayered: a shortcut only; a run that takes no change
        # log keeps none of them). Both hold what changed since the last take, mostly none of the retired:
        # walked, not popped once per retired item.
        for log in (self._changed, self._relayered):
            if log:
                for item_id in [i for i in log if i not in archive]:
                    del log[item_id]
        if dirty:
            self._stubs_dirty, self._stub_rows = True, None
        self.stubs = stubs
        self._retired.extend(gone)
        self.retained = len(archive)
        self._retire_due = False
        return gone

    def take_changes(self) -> tuple[list[ContextItem], list[dict[str, Any]], list[str],
                                    tuple[list[str] | None, list[str]] | None, list[list[Any]] | None]:
        """(items written, patches, ids retired, the view's membership change, stubs if they changed)
        since the last call; replayed on the previous state in this order they give the current one.
        The membership change is None (none), ``(None, ids appended)`` (the usual step), or the
        membership ``(before, after)``. A rewritten item whose text stayed (a demotion, a status or freshness
        change) comes as a patch: its id and the fields that changed, as :meth:`ContextItem.to_dict`
        spells them; an item with no change at all does not come."""
        archive, relayered_ = self.archive, self._relayered
        changed: list[ContextItem] = []
        patches: list[dict[str, Any]] = []
        self.demoted = demoted = []
        for item_id, before in self._changed.items():
            item = archive.get(item_id)
            if item is None:
                continue
            if before is None or (before.text is not item.text and before.text != item.text):
                changed.append(item)
            elif (pair := relayered_.get(item_id)) is not None and pair[0] is before and pair[1] is item:
                if before.layer != item.layer:  # patch(before, item), known: the layer alone changed
                    patches.append({"id": item_id, "layer": _LAYER_NAMES[item.layer]})
                    demoted.append(pair)
            elif (diff := patch(before, item)) is not None:
                patches.append(diff)
        retired = self._retired
        live = None if not self._live_dirty else (None, self._live_added) if self._live_before is None else (
            self._live_before, list(self.live))
        stubs = self.stub_list() if self._stubs_dirty else None
        self.forget_changes()
        return changed, patches, retired, live, stubs

    def forget_changes(self) -> None:
        """Start the change log afresh (the current record is what its reader has)."""
        self._changed, self._retired, self._live_dirty, self._stubs_dirty = {}, [], False, False
        self._relayered, self._live_added, self._live_before = {}, [], None

    def stub_list(self) -> list[list[Any]]:
        """``[[id, key, source], ...]``; the rows are shared between calls (a whole state holds ~100-150
        of them and they change only in a retirement pass): read them, do not change them."""
        if self._stub_rows is None:
            self._stub_rows = [[i, key, source] for i, (key, source) in self.stubs.items()]
        return list(self._stub_rows)

    def ordered(self) -> tuple[ContextItem, ...]:
        """Items in view order: the current resume note first, then by layer and position."""
        return view_order(self.live.values())

    def to_dict(self, *, raw_items: bool = False) -> dict[str, Any]:
        items = list(self.archive.values())
        return {
            "next": self.next,
            "segment": self.segment,
            "retained": self.retained,
            "live": list(self.live),
            "stubs": self.stub_list(),
            "items": items if raw_items else [item.to_dict() for item in items],
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """Fill an empty record from :meth:`to_dict` output, recounting the view's tokens with this
        counter. Items out of the view keep their stored count: every path that puts one back in
        the view makes a new version (restamp), which counts again."""
        self.next = int(data["next"])
        self.segment = int(data["segment"])
        self.retained = int(data.get("retained", 0))
        self.stubs = {str(i): (key, str(source)) for i, key, source in data.get("stubs", [])}
        self._stub_rows = None
        live = set(data["live"])
        for entry in data["items"]:
            item = ContextItem.from_dict(entry)  # a fresh object: counting it in place is safe
            if item.id in live:
                count(item, self.counter)
            self.archive[item.id] = item
        for item_id in data["live"]:
            self.put(self.archive[str(item_id)])
        self._retire_due = True
        self.forget_changes()  # a loaded state is the baseline, not a change
