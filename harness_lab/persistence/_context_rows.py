"""The context part of a run's checkpoint rows, and what it remembers from one row to the next.

A row holds the context whole every ``FULL_EVERY`` steps (see :mod:`harness_lab.persistence.checkpoint`) and its
change log in between (:meth:`ContextManager.take_changes <harness_lab.context.ContextManager.take_changes>`);
a fork's first row holds none but names the checkpoint it restored (``context_from``). Each item
version is dumped and redacted once: a whole state reuses the texts written before, derives those of
items only re-layered since, and the stubs' JSON while they are unchanged. Large outputs go to the
store's blobs once, by sha256.

Item texts of :data:`SHARED_MIN` bytes or more (the pinned system, goal and acceptance items, summaries)
go into the same blobs once, keyed by the sha256 of their redacted JSON (schema 9): a row names such an
item as ``{"kind":"context_item","id":...,"$sha256":...}`` (:data:`~harness_lab.store.fold.SHARED`), so the whole states every
``FULL_EVERY`` steps stop repeating them (a loop's whole state: 19 KB -> 8 KB). Readers get the item back
(:mod:`harness_lab.persistence._stored_context`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any, NamedTuple

from pydantic_core import to_json

from ..context import ContextItem, ContextManager, Layer
from ..context.items import compact_json
from ..records.redaction import Redactor
from ..store import Store
from ..store.fold import SHARED

__all__ = ["SHARED_MIN", "ContextRow", "ContextRows"]

# An item text this long is stored once, by sha256 (a name costs ~100 B; interactions, ~200 B, stay inline)
SHARED_MIN = 512

# A layer's name by dict lookup, as context.items spells it (Enum.name is a slow descriptor)
_LAYER_NAMES = {layer: layer.name for layer in Layer}


class ContextRows:
    """The context of each checkpoint row of one run (see the module docstring)."""

    def __init__(self, store: Store, redact: Redactor, *, context_from: str | None) -> None:
        self.store, self._redact = store, redact
        self._ctx: object = None  # the context object the change log follows (a restore replaces it)
        self._base: int | None = None  # step of the last whole context state written
        self._since = 0  # bytes of change logs written since then
        self._blobs: set[str] = set()  # sha256 of the outputs (and item texts) known to be stored
        self._verbatim: list[str] = []
        self._item_texts: dict[str, tuple[ContextItem, str]] = {}  # item id -> (version, redacted JSON)
        self._shas: dict[str, tuple[str, str]] = {}  # item id -> (its text, that text's sha256)
        self._stubs: tuple[list[list[Any]], str, bool] | None = None  # the last whole state's (see _stubs_text)
        self._demoted: list[tuple[ContextItem, ContextItem]] = []  # (before, after) since the last whole state
        # The checkpoint ("run@step") the rows' context stands for until their first whole state (None after
        # it). An attribute, not a property: a checkpoint reads it every step.
        self.context_from = context_from

    def adopt(self, ctx: ContextManager, loaded: Mapping[str, str]) -> None:
        """The run's context was just read from the store (a fork): its items' stored texts by id,
        already redacted, which a later whole state reuses instead of dumping them again."""
        state = ctx.state(ref_texts=False, raw_items=True)
        self._item_texts = {i.id: (i, loaded[i.id]) for i in state["items"] if i.id in loaded}
        self._blobs = {entry["sha256"] for entry in state["refs"]["refs"]}  # in the store it came from

    def forget(self) -> None:
        """A row was not written: the next one holds the whole state."""
        self._ctx = None

    def written(self, ctx: ContextManager, step: int, base: int | None, text: str | None,
                blobs: list[tuple[str, str]]) -> None:
        """Row ``step`` is committed with this context ``text`` and these ``blobs``."""
        if base == step:
            self._base, self._since = step, 0
        elif text is not None:
            self._since += len(text)
        if blobs:
            self._blobs.update(sha for sha, _ in blobs)
            # Unchanged by redaction: the store's copy can stand in for the one in memory.
            ctx.release_ref_texts(self._verbatim)

    def take(self, ctx: ContextManager, step: int, *, full_every: int,
             full_bytes: int) -> tuple[ContextRow | None, list[tuple[str, str]], int | None]:
        """The context of row ``step`` (a whole state every ``full_every`` steps, or once the change logs
        since reach ``full_bytes``; a change log otherwise) to redact, its new blobs, its base step.
        After a failed write call :meth:`forget`: the change log may be half taken."""
        if self.context_from is not None and self._base is None:
            # A fork's first row: its context is the source checkpoint's, stored already (redacted under
            # this very contract). Name it; the change logs of the next rows build on it.
            ctx.discard_changes()
            self._ctx = ctx
            return None, [], step
        whole = (ctx is not self._ctx or self._base is None or step - self._base >= full_every
                 or self._since >= full_bytes)
        base: int | None
        if whole:
            self.context_from = None
            # Retire first: up to max(128, view) items that left the view for good wait for the next
            # retirement pass; a whole state without them is what every restore and fork reads back.
            ctx.retire()
            data = ctx.state(ref_texts=False, raw_items=True)
            ctx.discard_changes()
            self._ctx, base = ctx, step
            ctx.attach_ref_loader(self.store.blob)
            items: list[ContextItem] = data.pop("items")
            # the head, its stubs (most of it) spliced in as the last whole state had them
            stubs, ref_store = data.pop("stubs"), data.pop("refs")
            refs = ref_store["refs"]
            rest, tail = _dumps(data)[:-1], f',"refs":{_dumps(ref_store)}}}'
            stubs_text, known = self._stubs_text(stubs)
            head = f'{rest},"stubs":{stubs_text}{tail}'
            # Stubs found clean already need no new check: their ',"stubs":[...]' is whole pieces between
            # ',"' (see Redactor.clean), so the rest's pieces are what they are in the whole head.
            check = f"{rest}{tail}" if known else head
        else:
            head, items, refs = ctx.take_changes_json(_dumps)
            check, base = head, self._base
            if demoted := ctx.demoted_versions():  # their texts are derived for the next whole state
                self._demoted += demoted
        blobs: list[tuple[str, str]] = []
        self._verbatim = []
        for entry in refs:  # (a change log names new outputs only when there are some)
            if entry["sha256"] not in self._blobs:
                text = ctx.ref_text(entry["ref_id"])  # as stored (read_ref notes a stale one)
                blobs.append((entry["sha256"], redacted := self._redact.text(text)))
                if redacted == text:
                    self._verbatim.append(entry["sha256"])
        cache = self._item_texts
        missing, raw = [], [check]
        # The items demoted since the last whole state, by id: (the version whose text was written, the
        # latest), a chain of demotions joined. Only those still in a whole state get a text derived (a
        # change log's items are new or rewritten: never derived).
        pending: dict[str, tuple[ContextItem, ContextItem]] = {}
        if whole:
            for before, after in self._demoted:
                first = pending.get(after.id)
                pending[after.id] = (first[0] if first is not None and first[1] is before else before, after)
            self._demoted = []
        for i in items:
            if (hit := cache.get(i.id)) is None or hit[0] is not i:
                if whole and hit is not None and (derived := _derived(hit, i, pending.get(i.id))) is not None:
                    cache[i.id] = (i, derived)  # otherwise demoted since its text was written (by this step)
                else:
                    missing.append(i)
                    raw.append(compact_json(i) or _dumps(i.to_dict(compact=True)))
        return ContextRow(items, missing, raw, whole, head), blobs, base

    def _stubs_text(self, stubs: list[list[Any]]) -> tuple[str, bool]:
        """The JSON of a whole state's stubs, and whether it is known clean. Unchanged since the last
        whole state (3 in 4 of them) it is not dumped (~14 µs for ~150 stubs) or checked again: the
        record shares its stub rows until they change and then makes all of them anew (ItemRecord.stub_list),
        so the first and last rows tell (the last list is held: its rows' ids cannot be reused)."""
        last = self._stubs
        if last is not None and len(stubs) == len(last[0]) and (
                not stubs or (stubs[0] is last[0][0] and stubs[-1] is last[0][-1])):
            return last[1], last[2]
        text = _dumps(stubs)
        self._stubs = (stubs, text, known := self._redact.clean(f'stubs":{text}'))
        return text, known

    def text(self, row: ContextRow, clean: bool) -> tuple[str, list[tuple[str, str]]]:
        """The JSON of a context state or change log, and the item texts it names by sha256 that the store
        must gain (see SHARED_MIN); each item version is dumped and redacted once (a whole state reuses the
        texts of the change logs, and of an item demoted since, that text with its new layer: see
        _relayered). Redacting item by item finds what one pass over the whole text finds: no pattern can
        span the ``},{`` between two items."""
        items, missing = row.items, row.missing
        if clean:
            head, raw = row.head, row.raw[1:]
        else:
            redact = self._redact
            head, raw = redact(row.head), [redact(t) for t in row.raw[1:]]
        cache = self._item_texts
        for item, text in zip(missing, raw, strict=True):
            cache[item.id] = (item, text)
        if row.whole and len(cache) > len(items):  # forget retired items (every item has its entry)
            self._item_texts = cache = {i.id: cache[i.id] for i in items}
            self._shas = {i: hit for i, hit in self._shas.items() if i in cache}
            texts = [text for _, text in cache.values()]
        elif len(missing) == len(items):  # every item new (a change log's usual): the texts just made
            texts = raw
        else:
            texts = [cache[i.id][1] for i in items]
        shared: list[tuple[str, str]] = []
        if texts and max(map(len, texts)) >= SHARED_MIN:
            texts = [self._named(item.id, text, shared) if len(text) >= SHARED_MIN else text
                     for item, text in zip(items, texts, strict=True)]
        return f'{head[:-1]},"items":[{",".join(texts)}]}}', shared

    def _named(self, item_id: str, text: str, shared: list[tuple[str, str]]) -> str:
        """The name of item ``item_id`` whose redacted text is ``text`` (stored once, by sha256: the
        store gains it with this row, unless an earlier row of this object wrote it)."""
        hit = self._shas.get(item_id)
        if hit is not None and hit[0] is text:
            sha = hit[1]
        else:
            sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            self._shas[item_id] = (text, sha)
        if sha not in self._blobs:
            shared.append((sha, text))
        name = f'"{item_id}"' if item_id.isalnum() else _dumps(item_id)
        return f'{{"kind":"context_item","id":{name},"{SHARED}":"{sha}"}}'


def _dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept: what ``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)`` gives, at a third of its cost (a float may be spelled differently, e.g.
    ``1e16`` for ``1e+16``: it parses to the same value)."""
    return to_json(value, inf_nan_mode="constants").decode()


# Every field of an item version but its layer (what a demotion keeps).
_all_but_layer = attrgetter(*(f.name for f in fields(ContextItem) if f.init and f.name != "layer"))


def _relayered(hit: tuple[ContextItem, str], new: ContextItem) -> str | None:
    """The redacted text of ``new`` from the cached one of an older version (``hit``) when the two
    differ in their layer alone, else None."""
    old, text = hit
    return _relayer_text(text, old, new) if _all_but_layer(old) == _all_but_layer(new) else None


def _derived(hit: tuple[ContextItem, str], new: ContextItem,
             demoted: tuple[ContextItem, ContextItem] | None) -> str | None:
    """The redacted text of ``new`` from the cached one of an older version (``hit``): known to differ in
    the layer alone when they are the ends of its demotions (``demoted``), else compared."""
    if demoted is not None and demoted[0] is hit[0] and demoted[1] is new:
        return _relayer_text(hit[1], hit[0], new)
    return _relayered(hit, new)


def _relayer_text(text: str, old: ContextItem, new: ContextItem) -> str | None:
    """The redacted text of ``new`` from ``text``, that of ``old``, which differs from it in the layer
    alone (None if ``text`` does not start as expected). to_dict(compact=True) leads with kind, id,
    layer, so the text differs in the layer's name only; and redaction does not see it: no match can
    touch the ``layer":"L4"`` between two ``,"`` (see Redactor.clean), so the rest is redacted alike."""
    item_id = old.id
    head = f'{{"kind":"context_item","id":"{item_id}","layer":"' if item_id.isalnum() else (
        f'{{"kind":"context_item","id":{_dumps(item_id)},"layer":"')  # (no escape in a c123)
    was = _LAYER_NAMES[old.layer]
    if not (text.startswith(head) and text.startswith(f'{was}"', len(head))):
        return None
    return f"{head}{_LAYER_NAMES[new.layer]}{text[len(head) + len(was):]}"


class ContextRow(NamedTuple):
    """A row's context before redaction: the items in it, the versions not written before, the
    texts to check (the head, less what is known clean, then one per new version), and the head.
    (A named tuple: every row makes one, at a third of a frozen dataclass's cost.)"""

    items: list[ContextItem]
    missing: list[ContextItem]
    raw: list[str]
    whole: bool
    head: str


