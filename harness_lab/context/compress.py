"""Compression policy and the default summarizer; :func:`run_pass` runs one self-checked pass.

Policy (in code, :func:`compress_live`), run layer by layer in ``COMPRESSION_ORDER`` = L4, L5, L3, L2
until the context fits its target; L0 and L1 are never touched. L5 comes right after L4: a dropped
reference leaves its output in the ref store, while an L3 conclusion cannot be recovered.

1. *prune*: drop stale or superseded items of the layer that carry nothing protected;
2. *summarize* (not L5): hand the layer's unpinned items that arrived since the last pass, anomalies
   included, to the summarizer and replace them by one summary stamped with its rounds and sources
   (kept only if it is smaller). Earlier summaries are never re-summarized, so nothing degrades by
   repeated summarizing and a pass costs O(new items);
3. *drop*: remove the layer's unprotected items oldest first; an old summary carrying anomalies is
   unpacked into just those anomalies (pinned, verbatim).

"Protected" means L0/L1, pinned, or anomaly; failure reasons are made both pinned and anomalous
(:attr:`ContextItem.protected`).

Self-check. Every summary is checked against the items it replaces: an anomaly whose text is not in
the summary verbatim is a *loss*. Losses are reported (``CompressionReport.lost_*``: the self-check
fired) and repaired: the pass re-pins the lost item, keeping it in the view verbatim next to the
summary, so a faulty summarizer (the fault "summary drops an anomaly") is caught and cannot take the
anomaly out of the view. After the pass the whole before/after views are compared again
(``residual``, :mod:`~harness_lab.context.selfcheck`); that list stays empty unless the policy
itself is broken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import compress as _where  # (not to be read as this module's compression)
from operator import attrgetter
from typing import Any

from .anomaly import anomaly_lines
from .items import _LAYER_NAMES, COMPRESSION_SOURCE_PREFIX, ContextItem, Layer, view_order
from .record import ItemRecord
from .selfcheck import CompressionReport, find_losses

__all__ = [
    "COMPRESSION_ORDER",
    "PassResult",
    "Summarizer",
    "compress_live",
    "default_summarizer",
    "run_pass",
]

Summarizer = Callable[[list[ContextItem]], str]
COMPRESSION_ORDER: tuple[Layer, ...] = (Layer.L4, Layer.L5, Layer.L3, Layer.L2)
_NEVER_SUMMARIZED = frozenset({"resume", "feedback"})
_SEQ, _ROUND, _SOURCE, _ID = attrgetter("seq"), attrgetter("round"), attrgetter("source"), attrgetter("id")
_TOKENS, _ANOMALY, _SEGMENT = attrgetter("tokens"), attrgetter("anomaly"), attrgetter("segment")


def default_summarizer(items: list[ContextItem]) -> str:
    """Deterministic: one line per item (its first line; action -> first result line for an
    interaction), anomaly items whole and anomaly lines of other items verbatim."""
    out: list[str] = []
    for item in items:
        text = item.text
        if item.anomaly:
            out.append(f"- r{item.round} {item.source}: {text}")
            continue
        first, found = (_gist_short if len(text) <= _MEMO_CHARS else _gist)(text, item.role == "interaction")
        out.append(f"- r{item.round} {item.source}: {first}")
        if found:  # usually none
            out.extend(found)
    return "\n".join(out)


def _gist(text: str, interaction: bool) -> tuple[str, tuple[str, ...]]:
    """An item's line in the default summary (its first line; action -> first result line for an
    interaction) and its anomaly lines that line does not show already."""
    lines = [line for line in text.splitlines() if line.strip()]
    first = lines[0].strip() if lines else ""
    if interaction and len(lines) > 1:  # "> action" alone says little
        first = f"{first} -> {lines[1].strip()}"
    return first, tuple(line for line in anomaly_lines(text) if line.strip() not in first)


# Short texts recur (the same action and result, step after step): their gist is kept, bounded.
_MEMO_CHARS = 256
_gist_short = lru_cache(maxsize=1024)(_gist)


@dataclass
class PassResult:
    """Mutable tally of one pass, turned into a report by :func:`run_pass`."""

    summarized: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    repinned: list[str] = field(default_factory=list)
    lost_anomalies: list[str] = field(default_factory=list)
    lost_pinned: list[str] = field(default_factory=list)
    lost_failures: list[str] = field(default_factory=list)


# make_summary(layer, originals, summarizer_text) -> summary item (not yet in the view)
MakeSummary = Callable[[Layer, list[ContextItem], str], ContextItem]
# restamp(item, changes) -> new version of item, token count redone
Restamp = Callable[[ContextItem, dict[str, Any]], ContextItem]


def _total(live: Mapping[str, ContextItem]) -> int:
    return sum(map(_TOKENS, live.values()))  # (in C: a generator resumes once per item)


def _layer_items(live: Mapping[str, ContextItem], layer: Layer) -> list[ContextItem]:
    return sorted([i for i in live.values() if i.layer == layer], key=_SEQ)


# Each step of a pass takes the pass's running total of *live* and gives back the new one (instead of
# summing the view again: ~8 sums of it per pass).


def _prune(live: dict[str, ContextItem], layer: Layer, target: int, result: PassResult, total: int) -> int:
    for item in _layer_items(live, layer):
        if total <= target:
            return total
        if (item.freshness == "stale" or item.status == "superseded") and not item.protected:  # (cheap tests first)
            del live[item.id]
            total -= item.tokens
            result.dropped.append(item.id)
    return total


def _summarize(
    live: dict[str, ContextItem],
    layer: Layer,
    summarizer: Summarizer,
    make_summary: MakeSummary,
    restamp: Restamp,
    result: PassResult,
) -> int:
    """The members' change of the total (0: nothing summarized)."""
    # Earlier compression summaries stay as they are (each stamped with its own rounds); only what
    # arrived since is summarized, so a pass costs O(new items) and older exploration fades oldest
    # first in the drop step instead of being re-summarized again and again.
    group = [
        i
        for i in _layer_items(live, layer)
        if not i.pinned and i.role not in _NEVER_SUMMARIZED and not i.source.startswith(COMPRESSION_SOURCE_PREFIX)
    ]  # (the last test is is_compression_summary, inline: it is asked of every member)
    if not group:
        return 0
    summary = make_summary(layer, group, summarizer(group))
    # Self-check of this summary against what it replaces; every loss is reported and re-pinned.
    protected = [i for i in group if i.layer <= 1 or i.pinned or i.anomaly]  # i.protected, inline; usually none
    repinned: list[ContextItem] = []
    if protected:
        losses = find_losses(protected, [summary])
        result.lost_anomalies.extend(losses.anomalies)
        result.lost_pinned.extend(losses.pinned)
        result.lost_failures.extend(losses.failures)
        repinned = [restamp(i, {"layer": layer, "pinned": True}) for i in protected if i.text not in summary.text]
    old_tokens: int = sum(map(_TOKENS, group))
    new_tokens: int = summary.tokens + sum(map(_TOKENS, repinned))
    if new_tokens >= old_tokens:
        return 0  # no gain: keep the members as they are (nothing is lost that way either)
    for item in group:
        del live[item.id]
    live[summary.id] = summary
    for item in repinned:
        live[item.id] = item
    result.summarized.extend(map(_ID, group))
    result.created.append(summary.id)
    result.repinned.extend(i.id for i in repinned)
    return new_tokens - old_tokens  # the repinned were members: deleted, then put back


def _drop(
    live: dict[str, ContextItem],
    layer: Layer,
    target: int,
    archive: Mapping[str, ContextItem],
    restamp: Restamp,
    result: PassResult,
    total: int,
) -> int:
    unpacked = False
    for item in _layer_items(live, layer):
        if total <= target:
            break
        if not item.protected:
            del live[item.id]
            total -= item.tokens
            result.dropped.append(item.id)
        elif item.is_compression_summary and not item.pinned:
            # Unpack: keep only the anomalies the summary carried, as pinned items of their own.
            carried = [restamp(archive[c], {"layer": layer, "pinned": True}) for c in item.carries]
            if sum(c.tokens for c in carried) >= item.tokens:
                continue
            del live[item.id]
            for c in carried:
                live[c.id] = c
            total += sum(c.tokens for c in carried) - item.tokens
            result.dropped.append(item.id)
            result.repinned.extend(c.id for c in carried)
            unpacked = True
    # An unpacked item that was in the view already is counted twice above (as the loop always
    # did); the next step starts from the true total.
    return _total(live) if unpacked else total


def compress_live(
    live: dict[str, ContextItem],
    *,
    target: int,
    archive: Mapping[str, ContextItem],
    summarizer: Summarizer,
    make_summary: MakeSummary,
    restamp: Restamp,
    proactive: bool = False,
) -> PassResult:
    """Shrink *live* (mutated in place) toward *target* tokens, layer by layer.

    ``proactive`` summarizes L4 even when the context already fits (an explicit ``compress()``
    at a milestone, as the seed advises, rather than waiting for the window to fill).
    """
    result = PassResult()
    total = _total(live)
    for layer in COMPRESSION_ORDER:
        fits = total <= target
        if fits and not (proactive and layer == Layer.L4):
            continue
        if not fits:
            total = _prune(live, layer, target, result, total)
        if layer != Layer.L5 and (proactive and layer == Layer.L4 or total > target):
            total += _summarize(live, layer, summarizer, make_summary, restamp, result)
        if total > target:
            total = _drop(live, layer, target, archive, restamp, result, total)
    return result


def make_summary(rec: ItemRecord, layer: Layer, group: list[ContextItem], body: str) -> ContextItem:
    """The summary item for *group*: stamped with its rounds and sources, placed where its oldest
    member was, carrying (and so protecting) the anomalies it quotes verbatim."""
    # (map over attrgetters: the walks over a group of ~50 items run in C)
    rounds = list(map(_ROUND, group))
    first, last = min(rounds), max(rounds)
    sources = list(dict.fromkeys(map(_SOURCE, group)))
    shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    span = f"round {first}" if first == last else f"rounds {first}-{last}"
    text = f"[{span} summary, from {shown}]\n{body}"
    carries = tuple(i.id for i in _where(group, map(_ANOMALY, group)) if i.text in text)
    return rec.make(
        layer=layer, text=text, source=f"{COMPRESSION_SOURCE_PREFIX}{_LAYER_NAMES[layer]}", round=last,
        seq=min(map(_SEQ, group)), role="summary", anomaly=bool(carries),
        covers=tuple(map(_ID, group)), carries=carries, segment=max(map(_SEGMENT, group)),
    )  # fmt: skip


def run_pass(
    rec: ItemRecord, *, target: int, budget: int, summarizer: Summarizer, proactive: bool
) -> CompressionReport:
    """One compression pass over *rec*, self-checked end to end; the record adopts the result."""
    before, tokens_before = tuple(rec.live.values()), rec.total
    live = dict(rec.live)
    result = compress_live(
        live,
        target=target,
        archive=rec.archive,
        summarizer=summarizer,
        make_summary=lambda layer, group, body: make_summary(rec, layer, group, body),
        restamp=lambda item, changes: rec.restamp(item, **changes),
        proactive=proactive,
    )
    rec.replace_live(live)
    after = rec.ordered()
    # The order of *before* only orders the losses found (usually none): put in view order then.
    residual = find_losses(before, after, rec.archive.get)
    if residual:
        residual = find_losses(view_order(before), after, rec.archive.get)
    return CompressionReport(
        tokens_before=tokens_before,
        tokens_after=rec.total,
        budget_tokens=budget,
        target_tokens=target,
        summarized=tuple(result.summarized),
        dropped=tuple(result.dropped),
        created=tuple(result.created),
        repinned=tuple(result.repinned),
        lost_anomalies=tuple(result.lost_anomalies),
        lost_pinned=tuple(result.lost_pinned),
        lost_failures=tuple(result.lost_failures),
        residual=tuple(residual.all()),
        over_budget=rec.total > budget,
    )
