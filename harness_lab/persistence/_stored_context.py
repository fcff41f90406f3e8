"""A checkpoint's context state read back from the store: one whole state plus the change logs after it.

Besides the state, :func:`stored_context` hands back the stored JSON text of every item (as the
checkpointer wrote it: dumped once, redacted). A fork's first checkpoint row holds the whole state
again; with these texts it writes each item as it is already stored instead of dumping and
redacting every item a second time (the bulk of that row's cost).

Since schema 9 a row may name a long item by the sha256 of its text (``{"kind":"context_item","id":...,
"$sha256":...}``, see :data:`harness_lab.store.fold.SHARED`): the item is read back from the store's
blobs before the change logs are replayed, so every reader gets the states as they were written whole.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json

from ..context.changes import replay
from ..store import Store
from ..store.fold import SHARED

__all__ = ["item_texts", "stored_context"]


def stored_context(store: Store, run_id: str, step: int, base: int | None, text: str | None, *,
                   texts: bool = True, source: str | None = None) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The context state at ``step`` and (``texts``) the stored text of most of its items, by id:
    the whole state of row ``base`` with the change logs of the rows after it replayed (at most
    FULL_EVERY rows, whatever the history's length). Items a change log rewrote have no text here.
    ``source`` (a fork's checkpoint field ``context_from``): the base row holds no state of its own but
    stands for the context of that checkpoint ("run@step"), read the same way: a fork of a fork of
    ... is followed back however long the chain (iteratively; a chain that comes back on itself is an error)."""
    layers: list[tuple[list[Any], str | None]] = []  # change logs to replay on the state found, outermost first
    seen: set[str] = set()
    while True:
        if base is None or base == step:
            if text is None:
                if source is None:
                    if layers:
                        raise ValueError(f"the context that a row stands for ({layers[-1][1]}) is empty")
                    return None, {}
                run_id, step, base, text, source = _follow(store, source, seen)
                continue
            state: dict[str, Any] = _loads(text)
            shared = _named_items(store, text, state)
            found = {**item_texts(text, state), **shared} if texts else {}
            break
        if text is None:
            if layers:
                raise ValueError(f"the context that a row stands for ({layers[-1][1]}) is empty")
            return None, {}
        rows = store.contexts(run_id, base, step)
        if not rows or rows[0][0] != base or rows[-1][0] != step or len(rows) != step - base + 1:
            raise ValueError(f"the context rows {base}..{step} are incomplete")
        if any(c is None for _, c in rows[1:]) or (rows[0][1] is None and source is None):
            raise ValueError(f"a context row between steps {base} and {step} is empty")
        logs = [_loads(c or "null") for _, c in rows[1:]]
        for (_, c), log in zip(rows[1:], logs, strict=True):
            _named_items(store, c or "", log)
        layers.append((logs, source))
        if rows[0][1] is None:  # the base row stands for another checkpoint's context: read that one
            run_id, step, base, text, source = _follow(store, source, seen)
            continue
        state = _loads(rows[0][1])
        shared = _named_items(store, rows[0][1], state)
        found = {**item_texts(rows[0][1], state), **shared} if texts else {}
        break
    for changes, _ in reversed(layers):
        state, before = replay(state, changes)
        if found:  # a rewritten or retired item's stored text is not its text now: keep an item's text
            kept = set(map(id, state["items"]))  # only while its dict is the one the base state held
            found = {i: t for i, t in found.items() if (d := before.get(i)) is not None and id(d) in kept}
    return state, found


def _follow(store: Store, source: str | None,
            seen: set[str]) -> tuple[str, int, int | None, str | None, str | None]:
    """The row of the checkpoint a fork's base row stands for: its run, step, base, context and source."""
    from .checkpoint_record import Checkpoint

    run_id, _, step = (source or "").rpartition("@")
    if not run_id or not step.isdigit():
        raise ValueError(f"a base row stands for {source!r}, not a checkpoint '<run>@<step>'")
    if source in seen:
        raise ValueError(f"the chain of forked contexts comes back to {source!r}")
    seen.add(source or "")
    row = store.step(run_id, int(step))
    checkpoint = Checkpoint.from_row(row)
    return run_id, row.step, checkpoint.context_base, row.context, checkpoint.context_from


_NAMED = f'"{SHARED}":'  # unescaped, only as a key: inside a JSON string its quotes are escaped


def _named_items(store: Store, text: str, data: Any) -> dict[str, str]:
    """Replace, in the ``items`` of ``data`` (``text`` parsed), each item named by sha256 by the item its
    blob holds; their texts by id. A missing or mismatched blob is a ``ValueError`` naming item and sha."""
    if _NAMED not in text or not isinstance(data, dict) or not isinstance(items := data.get("items"), list):
        return {}
    found: dict[str, str] = {}
    named = [(n, entry, entry.get(SHARED)) for n, entry in enumerate(items)
             if isinstance(entry, dict) and entry.get(SHARED) is not None]
    blobs = store.blob_texts({sha for _, _, sha in named if isinstance(sha, str)})  # one read for the row's items
    for n, entry, sha in named:
        item_id = entry.get("id")
        blob = blobs.get(sha) if isinstance(sha, str) else None
        if blob is None:
            raise ValueError(f"a context row names item {item_id!r} by sha256 {str(sha)[:12]}, which the "
                             "store's blobs do not hold")
        item = _loads(blob)
        if not isinstance(item, dict) or item.get("id") != item_id or SHARED in item:
            raise ValueError(f"the blob {str(sha)[:12]} a context row names for item {item_id!r} is not that item")
        items[n] = item
        found[str(item_id)] = blob
    return found


def _loads(text: str) -> Any:
    """``json.loads``, by pydantic's parser where it can (~1.6x faster on a whole context state;
    caching only keys saves ~10% more: most values are ids and texts seen once).
    It refuses only what no row holds (an escaped lone surrogate: such text cannot be stored as
    UTF-8); json.loads then has the last word, so the result never differs."""
    try:
        return from_json(text, cache_strings="keys")
    except ValueError:
        return json.loads(text)


def item_texts(text: str, state: dict[str, Any]) -> dict[str, str]:
    """The JSON text of each item of a stored whole state (``text``, parsed: ``state``), by id;
    empty when the text is not in the checkpointer's shape (then the items are dumped again).

    The checkpointer writes a whole state as ``{...,"items":[{"kind":"context_item",...},...]}``.
    Inside a JSON string every quote is escaped, so the unescaped ``"items":[`` and
    ``},{"kind":"context_item",`` occur only as structure: the last ``"items":[`` is the array
    (an item holds no ``items`` key) and each separator is an item boundary. The count and the
    id at the head of every piece prove the split; anything else gives up."""
    items = state.get("items")
    at = text.rfind(_ITEMS)
    if not isinstance(items, list) or at < 0 or not text.endswith("]}"):
        return {}
    body = text[at + len(_ITEMS):-2]
    if not items:
        return {}
    pieces = body.split(_BETWEEN)
    if len(pieces) != len(items) or not pieces[0].startswith(_FIRST):
        return {}
    try:
        ids = [entry["id"] for entry in items]
    except (KeyError, TypeError):
        return {}
    if not all(isinstance(i, str) for i in ids):
        return {}
    plain = "".join(ids)  # one check for all: an id json.dumps would escape is not worth a slower path
    if not (plain.isascii() and plain.isprintable() and '"' not in plain and "\\" not in plain):
        return {}
    heads = [f'"id":"{i}",' for i in ids]
    heads[0] = _FIRST + heads[0]
    if not all(map(str.startswith, pieces, heads)):
        return {}
    # The separators took the tail of each item but the last, and the head of each but the first.
    texts = [_FIRST + p + "}" for p in pieces]
    texts[0] = pieces[0] + "}"
    texts[-1] = texts[-1][:-1] if len(pieces) > 1 else pieces[0]
    return dict(zip(ids, texts, strict=True))


_ITEMS = '"items":['
_KIND = '"kind":"context_item",'
_FIRST = "{" + _KIND
_BETWEEN = "}," + _FIRST
