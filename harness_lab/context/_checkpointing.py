"""The checkpoint side of the context manager: its whole state, its change log, retirement on demand.

:class:`ContextManager` inherits these methods (they are its public API); they read the manager's
fields declared below and change none of what the view holds. A restore is
:meth:`ContextManager.from_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._change_log import RecordChanges, log_dict, usual_json
from .changes import SCALARS, plain_ids
from .items import ContextItem
from .record import ItemRecord
from .refs import RefStore

__all__ = ["STATE_VERSION", "Checkpointing"]

STATE_VERSION = 1


class Checkpointing:
    """What a checkpoint asks of a :class:`ContextManager` (its base class; not used on its own)."""

    # the manager's fields these methods read (ContextManager.__init__ sets them)
    _rec: ItemRecord
    _refs: RefStore
    _budget: int
    output_cap_bytes: int
    low_water: float
    _subtask: str | None
    _window: list[str]
    _logged_scalars: tuple[Any, ...] | None  # as the change log last gave them (None: not yet)
    _plain_ids: bool  # every id and window entry plain (changes.plain_ids): the record makes c123

    def state(self, *, ref_texts: bool = True, raw_items: bool = False) -> dict[str, Any]:
        """Everything, JSON-able; :meth:`from_state` rebuilds an identical manager. ``ref_texts=False``
        names stored outputs by sha256 instead of carrying their texts (a store keeps them once);
        ``raw_items=True`` leaves ``items`` as :class:`ContextItem` objects (``to_dict`` each to
        serialise; a checkpoint reuses the text of an item version it wrote before)."""
        return {
            "kind": "context_state",
            "version": STATE_VERSION,
            "budget_tokens": self._budget,
            "output_cap_bytes": self.output_cap_bytes,
            "low_water": self.low_water,
            "subtask": self._subtask,
            "window": list(self._window),
            **self._rec.to_dict(raw_items=raw_items),
            "refs": self._refs.to_dict(texts=ref_texts),
            **({"stale_refs": dict(self._refs.stale)} if self._refs.stale else {}),
        }

    def _load(self, state: Mapping[str, Any], ref_loader: Callable[[str], str | None] | None) -> None:
        """Fill this new manager (made with the settings of *state*, a :meth:`state`) from *state*."""
        self._subtask = state["subtask"]
        self._window = [str(i) for i in state["window"]]
        self._refs = RefStore.from_dict(state["refs"], ref_loader)
        self._refs.stale = {str(r): str(note) for r, note in state.get("stale_refs", {}).items()}
        self._rec.load(state)
        self._plain_ids = plain_ids([*self._rec.archive, *self._window])

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
        values = self._scalar_values()
        head = usual_json(changes, values, self._logged_scalars, self._plain_ids, self._refs)
        if head is None:
            out = self._log(changes, True)
            items = out.pop("items")
            return dumps(out), items, out.get("refs", [])
        self._logged_scalars = values
        return head, changes[0], []

    def _log(self, changes: RecordChanges, raw_items: bool) -> dict[str, Any]:
        """take_changes' dict of the record's changes."""
        values = self._scalar_values()
        out = log_dict(self._rec, self._refs, changes, raw_items, values, self._logged_scalars)
        self._logged_scalars = values
        return out

    def demoted_versions(self) -> list[tuple[ContextItem, ContextItem]]:
        """The (before, after) versions of the items that the last :meth:`take_changes` patched in their
        layer alone, made so by a demotion out of the interaction window (every other field shared): a
        checkpoint derives the new version's text from the old one's."""
        return self._rec.demoted

    def retire(self) -> list[str]:
        """Retire now what would be retired at the next pass (items that left the view for good and
        that nothing retained refers to; see :class:`ContextManager`); the retired ids. A checkpoint calls
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
