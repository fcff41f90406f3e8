"""The frozen view a model sees at one step (:class:`ContextView`).

Kept apart from the item records (:mod:`~harness_lab.context.items`, which holds the order a view shows
items in, :func:`~harness_lab.context.items.view_order`): a view is built every step from the manager's
items and read, ordered and rendered only when someone asks. Import it from :mod:`harness_lab.context`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

from .items import ContextItem, Layer, view_order

__all__ = ["ContextView"]


class ContextView:
    """What a model sees at one step: items in order, their total and the budget. Immutable.

    The view is a snapshot of the items taken when it was made; it puts them in view order (the
    current resume note first, then by layer and position) only when someone reads ``items``: a
    proposer that does not read the view (a scripted one) does not pay for ordering it every step.
    """

    # total_tokens is a slot, not a property: the run reads it every step (a descriptor in C, no call)
    __slots__ = ("_items", "_unordered", "total_tokens", "_budget", "_tokens_left")
    kind: ClassVar[Literal["context_view"]] = "context_view"
    _items: tuple[ContextItem, ...]
    _unordered: tuple[ContextItem, ...] | None
    total_tokens: int
    _budget: int
    _tokens_left: int | None

    def __init__(self, items: Iterable[ContextItem], total_tokens: int, budget_tokens: int) -> None:
        _init = object.__setattr__
        _init(self, "_items", tuple(items))
        _init(self, "_unordered", None)
        _init(self, "total_tokens", total_tokens)
        _init(self, "_budget", budget_tokens)
        _init(self, "_tokens_left", None)

    @classmethod
    def unordered(cls, items: Iterable[ContextItem], total_tokens: int, budget_tokens: int) -> ContextView:
        """A view of *items* (taken now) that orders them on first read of ``items``."""
        view: Any = _ViewFill()  # what __init__ does, without its calls (see _ItemFill): a step makes one view
        view._items = ()
        view._unordered = tuple(items)
        view.total_tokens = total_tokens
        view._budget = budget_tokens
        view._tokens_left = None
        view.__class__ = cls
        made: ContextView = view
        return made

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ContextView is immutable: cannot set {name!r}")

    @property
    def items(self) -> tuple[ContextItem, ...]:
        if self._unordered is not None:
            object.__setattr__(self, "_items", view_order(self._unordered))
            object.__setattr__(self, "_unordered", None)
        return self._items

    @property
    def budget_tokens(self) -> int:
        return self._budget

    @property
    def tokens_left(self) -> int | None:
        """What is left of the run's token budget (None: the run has none): a model proposer caps its
        reply with it (``max_tokens``), so one answer cannot take the run past its budget."""
        return self._tokens_left

    def with_tokens_left(self, tokens: int) -> ContextView:
        """The same view, telling what is left of the run's token budget."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens_left: a whole number >= 0, got {tokens!r}")
        view: Any = _ViewFill()
        for name in ContextView.__slots__:
            setattr(view, name, getattr(self, name))
        view._tokens_left = tokens
        view.__class__ = ContextView
        made: ContextView = view
        return made

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ContextView):
            return NotImplemented
        return (self.items, self.total_tokens, self._budget) == (other.items, other.total_tokens, other._budget)

    def __hash__(self) -> int:
        return hash((self.items, self.total_tokens, self._budget))

    def __repr__(self) -> str:
        return f"ContextView(items={self.items!r}, total_tokens={self.total_tokens}, budget_tokens={self._budget})"

    @property
    def over_budget(self) -> bool:
        """True only when protected content alone (L0/L1, pinned, anomalies) exceeds the budget."""
        return self.total_tokens > self.budget_tokens

    def by_layer(self, layer: Layer) -> tuple[ContextItem, ...]:
        return tuple(item for item in self.items if item.layer == layer)

    def get(self, item_id: str) -> ContextItem | None:
        for item in self.items:
            if item.id == item_id:
                return item
        return None

    def render(self) -> str:
        """The text a model would see: each item's header line and text, in view order."""
        return "".join(item.render() for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "items": [item.to_dict() for item in self.items],
            "total_tokens": self.total_tokens,
            "budget_tokens": self.budget_tokens,
            "over_budget": self.over_budget,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextView:
        return cls(
            items=tuple(ContextItem.from_dict(d) for d in data["items"]),
            total_tokens=int(data["total_tokens"]),
            budget_tokens=int(data["budget_tokens"]),
        )


class _ViewFill:
    """ContextView's slot layout without its immutability (see _ItemFill)."""

    __slots__ = ContextView.__slots__
