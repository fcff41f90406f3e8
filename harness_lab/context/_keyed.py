"""Items that supersede: feedback, summaries, subtask conclusions and resume notes, made on the record.

A later item with the key of a current one of its roles supersedes it *visibly*: both stay, the
earlier marked ``superseded by <id>``, the later ``supersedes <id>``. Feedback and resume notes are
pinned while current; the one a later one supersedes is released (unpinned) so compression may fold
it. :class:`ContextManager` inherits :class:`KeyedItems` (its methods are the manager's public API).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._inputs import text_arg, text_or_none_arg
from .items import ContextItem, Layer
from .record import ItemRecord

__all__ = ["KeyedItems", "close_subtask", "current_with_key", "feedback", "resume_note", "summary", "supersede"]

_SUMMARIZABLE_ROLES = frozenset({"summary", "conclusion"})


def current_with_key(rec: ItemRecord, key: str | None, *, exclude: str,
                     roles: Iterable[str] = ("summary", "conclusion")) -> list[ContextItem]:
    if key is None:
        return []
    wanted = frozenset(roles)
    return [
        i for i in rec.archive.values()
        if i.key == key and i.status == "current" and i.id != exclude and i.role in wanted
    ]  # fmt: skip


def supersede(rec: ItemRecord, item: ContextItem, targets: list[ContextItem]) -> ContextItem:
    """Mark *targets* superseded by *item* (both stay visible); returns the new *item*."""
    if not targets:
        return item
    for old in targets:
        rec.store(rec.restamp(old, status="superseded", superseded_by=item.id))
    new = rec.restamp(rec.archive[item.id], supersedes=",".join(t.id for t in targets))
    rec.store(new)
    return new


def feedback(rec: ItemRecord, round: int, text: str, source: str, key: str | None) -> ContextItem:
    """ContextManager.add_feedback on checked input."""
    item = rec.new(layer=Layer.L2, text=text, source=source, round=round, role="feedback", pinned=True,
                   anomaly=True, key=key)
    earlier = current_with_key(rec, key, exclude=item.id, roles=("feedback",))
    for old in earlier:  # no longer an open failure: let compression fold it
        rec.store(rec.restamp(old, pinned=False, anomaly=False))
    return supersede(rec, item, [rec.archive[i.id] for i in earlier])


def close_subtask(rec: ItemRecord, name: str, text: str, round: int,
                  summarize: Callable[[list[ContextItem]], str]) -> ContextItem:
    """ContextManager.finish_subtask on checked input (the caller keeps its window to the view). An empty
    *text* is replaced by *summarize* of the process (the harness's own conclusion of it)."""
    process: list[ContextItem] = []
    refs: list[str] = []
    for item in list(rec.live.values()):
        if item.segment != rec.segment or item.layer not in (Layer.L2, Layer.L4, Layer.L5):
            continue
        if item.role == "resume":
            continue
        if item.protected:
            if item.layer != Layer.L5:
                rec.put(rec.restamp(item, layer=Layer.L3))
            continue
        process.append(item)
        if item.ref_id:
            refs.append(item.ref_id)
        rec.remove(item.id)
    if not text.strip():
        text = summarize(process) if process else "(no process recorded)"
    text = f"{_stamp(name, round, process)} {text}"
    if refs:
        text += f"\n(stored outputs: {', '.join(refs)})"
    key = f"subtask:{name}"
    item = rec.new(layer=Layer.L3, text=text, source=key, round=round, role="conclusion", key=key,
                   covers=tuple(i.id for i in process))
    item = supersede(rec, item, current_with_key(rec, key, exclude=item.id))
    rec.segment += 1
    return item


def _stamp(name: str, round: int, process: list[ContextItem]) -> str:
    """``[round 9 conclusion of subtask s, from rounds 3-8 of step 3:read_evidence, ...]``: when, and
    from what, so a reader can find the process again (search_history, read_ref)."""
    if not process:
        return f"[round {round} conclusion of subtask {name}]"
    rounds = [i.round for i in process]
    first, last = min(rounds), max(rounds)
    span = f"round {first}" if first == last else f"rounds {first}-{last}"
    sources = list(dict.fromkeys(i.source for i in process))
    shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    return f"[round {round} conclusion of subtask {name}, from {span} of {shown}]"


def summary(rec: ItemRecord, text: str, round: int, source: str, key: str | None,
            supersedes: str | None) -> ContextItem:
    """ContextManager.summarize on checked input."""
    stamped = f"[round {round} summary, from {source}] {text}"
    item = rec.new(layer=Layer.L3, text=stamped, source=source, round=round, role="summary", key=key)
    targets = current_with_key(rec, key, exclude=item.id) if key else []
    if supersedes:
        for other in rec.archive.values():
            hit = other.id == supersedes or (
                other.key == supersedes and other.role in _SUMMARIZABLE_ROLES
            )
            if hit and other.id != item.id and other.status == "current" and other not in targets:
                targets.append(other)
    return supersede(rec, item, targets)


def resume_note(rec: ItemRecord, text: str, round: int) -> ContextItem:
    """ContextManager.add_resume_note on checked input."""
    item = rec.new(layer=Layer.L2, text=text, source="resume", round=round, role="resume", pinned=True,
                   key="resume")
    earlier = current_with_key(rec, "resume", exclude=item.id, roles=("resume",))
    for old in earlier:
        rec.store(rec.restamp(old, pinned=False))
    return supersede(rec, item, [rec.archive[i.id] for i in earlier])


class KeyedItems:
    """Feedback, subtasks, summaries and resume notes of a :class:`ContextManager` (its base class)."""

    _rec: ItemRecord  # set by ContextManager.__init__
    _window: list[str]
    _subtask: str | None

    def add_feedback(self, round: int, text: str, *, source: str, key: str | None = None) -> ContextItem:
        """A failure reason from validation: pinned and an anomaly, so it reaches every later view.

        Feedback accumulates (each stays pinned) unless it has a *key*: a later feedback with the same
        key supersedes the earlier one, which stays visible but unpinned, so compression may fold it
        (use it for repeating warnings such as a budget alert).
        """
        self._rec.maybe_retire()
        return feedback(self._rec, round, text_arg("text", text), text_arg("source", source),
                        text_or_none_arg("key", key))

    def begin_subtask(self, name: str, goal: str, *, round: int) -> ContextItem:
        """Open a subtask: its goal sits in L2 until :meth:`finish_subtask` collapses it with the items
        added since (its process)."""
        self._rec.maybe_retire()
        name, goal = text_arg("name", name), text_arg("goal", goal)
        self._subtask = name
        # A span of its own: what came before (exploration, an earlier subtask) is not its process.
        self._rec.segment += 1
        return self._rec.new(layer=Layer.L2, text=goal, source=f"subtask:{name}", round=round, role="subtask",
                             key=f"subtask:{name}")

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
        return summary(self._rec, text_arg("text", text), round, text_arg("source", source), text_or_none_arg("key", key),
                       text_or_none_arg("supersedes", supersedes))

    def add_resume_note(self, text: str, *, round: int) -> ContextItem:
        """After a resume the view starts with this note (what was done, what is finished, where it
        stuck). An earlier resume note is marked superseded and unpinned."""
        self._rec.maybe_retire()
        return resume_note(self._rec, text_arg("text", text), round)
