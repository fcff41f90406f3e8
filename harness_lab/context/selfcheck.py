"""The self-check: which anomalies, pinned facts and failure reasons a change lost.

An item is *kept* when an item with the same id and text is still there, or when its text appears
verbatim inside another item (e.g. a summary that quotes it). A compression summary stands for the
anomalies it carries, so unpacking it into those anomalies is not a loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from .items import ContextItem

__all__ = ["CompressionReport", "Losses", "find_losses"]


@dataclass(frozen=True, slots=True)
class Losses:
    """Protected content missing after a change, by kind; each entry names the item and its text."""

    anomalies: tuple[str, ...] = ()
    pinned: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()

    def all(self) -> list[str]:
        return [*self.failures, *self.anomalies, *self.pinned]

    def __bool__(self) -> bool:
        return bool(self.anomalies or self.pinned or self.failures)


def _describe(kind: str, item: ContextItem) -> str:
    text = item.text if len(item.text) <= 160 else item.text[:160] + "..."
    return f"{kind} {item.id} ({item.layer.name}, round {item.round}, from {item.source}) lost: {text!r}"


def find_losses(
    before: Iterable[ContextItem],
    after: Iterable[ContextItem],
    carried: Callable[[str], ContextItem | None] | None = None,
) -> Losses:
    """Every protected item of *before* whose text is in no item of *after* verbatim.

    A compression summary stands for the anomalies it carries: with *carried* (id -> item) each of
    those is checked instead of the summary's whole text, so unpacking a summary into its anomalies
    is not a loss. A summary whose carried items *carried* no longer knows (retired with a view
    taken long ago) is checked as itself.
    """
    by_id = {item.id: item.text for item in after}
    haystack: str | None = None
    anomalies: list[str] = []
    pinned: list[str] = []
    failures: list[str] = []
    units: list[ContextItem] = []
    for item in before:
        if item.carries and carried is not None and item.is_compression_summary:
            found = [carried(c) for c in item.carries]
            if all(c is not None for c in found):
                units.extend(c for c in found if c is not None)
                continue
        units.append(item)
    for item in units:
        # item.protected, inline (a pass checks every item of the view before it)
        if not (item.layer <= 1 or item.pinned or item.anomaly) or by_id.get(item.id) == item.text:
            continue
        if haystack is None:  # built only when something moved
            haystack = "\x00".join(by_id.values())
        if item.text in haystack:
            continue
        if item.role == "feedback":
            failures.append(_describe("failure reason", item))
        elif item.anomaly:
            anomalies.append(_describe("anomaly", item))
        else:
            pinned.append(_describe("pinned fact", item))
    return Losses(tuple(anomalies), tuple(pinned), tuple(failures))


@dataclass(frozen=True, slots=True)
class CompressionReport:
    """What one compression pass did, and what its self-check found.

    ``lost_*`` list what a summary dropped (the self-check fired; those items were re-pinned, ids in
    ``repinned``). ``residual`` compares the whole views before and after: it must be empty.
    """

    tokens_before: int
    tokens_after: int
    budget_tokens: int
    target_tokens: int
    summarized: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    created: tuple[str, ...] = ()
    repinned: tuple[str, ...] = ()
    lost_anomalies: tuple[str, ...] = ()
    lost_pinned: tuple[str, ...] = ()
    lost_failures: tuple[str, ...] = ()
    residual: tuple[str, ...] = ()
    over_budget: bool = False
    kind: Literal["compression_report"] = "compression_report"

    @property
    def fired(self) -> bool:
        """True when the self-check caught a summary losing protected content."""
        return bool(self.lost_anomalies or self.lost_pinned or self.lost_failures)

    @property
    def ok(self) -> bool:
        """Nothing protected is missing from the view after the pass."""
        return not self.residual

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "budget_tokens": self.budget_tokens,
            "target_tokens": self.target_tokens,
            "summarized": list(self.summarized),
            "dropped": list(self.dropped),
            "created": list(self.created),
            "repinned": list(self.repinned),
            "lost_anomalies": list(self.lost_anomalies),
            "lost_pinned": list(self.lost_pinned),
            "lost_failures": list(self.lost_failures),
            "residual": list(self.residual),
            "over_budget": self.over_budget,
        }
