"""Loop gates, enforced outside the model (seed 003): budgets checked *before* a call,
an 80% token warning, a wall-clock limit, and convergence detection.

Convergence: the same tool with near-identical arguments ``repeat_limit`` (three) times in a row is
refused with a hint; if the proposer repeats it once more after the hint, the run stops (no progress). "In a row"
means consecutive decisions: a finish, a refused proposal or any other decision in between breaks
the streak (a rewrite after validation feedback is a new attempt, not a loop).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

from .clock import Clock
from .contract import Budget
from .events import StopReason
from .proposal import Proposal

__all__ = ["ConvergenceVerdict", "GatesMark", "LoopGates", "Spent"]

ConvergenceVerdict = Literal["ok", "hint", "stop"]


class Spent(Protocol):
    """What the gates read of the run's usage: a frozen :class:`Usage` or the run's live counters."""

    @property
    def decisions(self) -> int: ...
    @property
    def tool_calls(self) -> int: ...
    @property
    def tokens(self) -> int: ...


# recent fingerprints, hinted, warned, last decision number (see LoopGates.mark)
GatesMark = tuple[tuple[str, ...], bool, bool, int | None]


@dataclass
class LoopGates:
    budget: Budget
    clock: Clock
    started_at: float | None = None
    repeat_limit: int = 3
    similarity: float = 0.9
    warn_fraction: float = 0.8
    _recent: tuple[str, ...] = ()  # immutable: a mark() holds it as it was
    _hinted: bool = False
    _warned: bool = False
    _last_decision: int | None = None
    _elapsed: float = 0.0  # the largest elapsed() so far (see elapsed)

    def start(self) -> None:
        if self.started_at is None:
            self.started_at = self.clock.now()

    def elapsed(self) -> float:
        """Seconds since the run started; never less than before: a clock that steps back (a
        caller's own Clock) must not hand wall-clock budget back."""
        if self.started_at is None:
            return 0.0
        seen = self._elapsed = max(self._elapsed, self.clock.now() - self.started_at)
        return seen

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` the clock did not see (a simulated hang) as elapsed run time."""
        self.started_at = (self.clock.now() if self.started_at is None else self.started_at) - seconds

    def before_decision(self, usage: Spent) -> StopReason | None:
        b = self.budget
        if usage.decisions >= b.max_decisions:
            return StopReason(code="decision_budget", message=f"decision budget spent ({usage.decisions}/{b.max_decisions})")
        if b.max_tokens is not None and usage.tokens >= b.max_tokens:
            return StopReason(code="token_budget", message=f"token budget spent ({usage.tokens}/{b.max_tokens})")
        if b.wall_clock_seconds is not None and self.elapsed() >= b.wall_clock_seconds:
            return StopReason(code="wall_clock", message=f"wall-clock limit reached ({_secs(self.elapsed(), b.wall_clock_seconds)})")
        return None

    def before_tool_call(self, usage: Spent) -> StopReason | None:
        if usage.tool_calls >= self.budget.max_tool_calls:
            return StopReason(
                code="tool_budget",
                message=f"tool-call budget spent ({usage.tool_calls}/{self.budget.max_tool_calls}); call not made",
            )
        # Again here, not only before the decision: a slow proposer may have taken the run past it.
        limit = self.budget.wall_clock_seconds
        if limit is not None and (elapsed := self.elapsed()) >= limit:
            return StopReason(code="wall_clock", message=f"wall-clock limit reached ({_secs(elapsed, limit)}); call not made")
        return None

    def token_warning(self, usage: Spent) -> str | None:
        """Once, when token use first reaches the warning fraction of the budget."""
        limit = self.budget.max_tokens
        if limit is None or self._warned or usage.tokens < self.warn_fraction * limit:
            return None
        self._warned = True
        return f"budget warning: {usage.tokens}/{limit} tokens used ({usage.tokens / limit:.0%}); converge and finish"

    def convergence(self, proposal: Proposal, decision: int | None = None) -> ConvergenceVerdict:
        """Judge a tool-call proposal against the last ones (call before executing it).

        ``decision`` is the proposal's decision number; a gap since the last judged one means other
        decisions came in between, which breaks the streak."""
        if decision is not None:
            last = self._last_decision
            if last is not None and decision != last + 1:
                self._recent, self._hinted = (), False
            self._last_decision = decision
        key = proposal.canonical  # sorted-key JSON of the action, computed once per proposal
        limit = self.repeat_limit
        # Only the last repeat_limit - 1 calls are ever compared; at least the last one, so that with a
        # limit of 1 a call after the hint stops the run only if it repeats the hinted one.
        keep = limit - 1 if limit > 1 else 1
        same = 0
        recent, threshold = self._recent, self.similarity
        for earlier in recent[-keep:]:
            if earlier == key or _similar(earlier, key, threshold):
                same += 1
        self._recent = (*recent, key)[-keep:]
        if same < limit - 1:
            self._hinted = self._hinted and same > 0
            return "ok"
        if self._hinted and same:
            return "stop"
        self._hinted = True
        return "hint"

    def hint(self) -> str:
        """The reason a ``"hint"`` verdict refuses the call: the streak that reached the limit
        (every one of the last ``repeat_limit`` calls was the same)."""
        limit = self.repeat_limit
        if limit > 1:
            return f"repeated the same call {limit} times; change approach"
        return "reached the repeat limit (1 call in a row); change approach"

    def mark(self) -> GatesMark:
        """The gates as they are now, for :meth:`state` to spell later: a step marks them at its
        start (a tuple, not the state dict: most steps never need it), and a snapshot taken
        mid-step records them as they were before the in-flight proposal."""
        return (self._recent, self._hinted, self._warned, self._last_decision)

    def state(self, mark: GatesMark | None = None) -> dict[str, object]:
        recent, hinted, warned, last = self.mark() if mark is None else mark
        return {"recent": list(recent), "hinted": hinted, "warned": warned, "last_decision": last}

    def restore(self, state: dict[str, object]) -> None:
        recent = state.get("recent", [])
        self._recent = tuple(str(k) for k in recent) if isinstance(recent, list) else ()
        self._hinted = bool(state.get("hinted", False))
        self._warned = bool(state.get("warned", False))
        last = state.get("last_decision")
        self._last_decision = last if isinstance(last, int) else None


def _secs(elapsed: float, limit: float) -> str:
    # Enough digits that the elapsed time never prints below the limit it reached (0.041 as "0.0").
    return f"{elapsed:.6g}s/{limit:g}s"


@lru_cache(maxsize=256)
def _kind(fingerprint: str) -> object:
    # Fingerprints repeat (the last few are compared every step): parse each once.
    payload = json.loads(fingerprint)
    return payload.get("kind") if isinstance(payload, dict) else None


def _similar(a: str, b: str, threshold: float) -> bool:
    if a == b:
        return True
    if len(a) + len(b) <= _CACHED_CHARS:
        return _similar_cached(a, b, threshold)
    return _judge(a, b, threshold)


# A loop compares the same few fingerprint pairs step after step (the gate compares each call with the
# last repeat_limit - 1): their verdicts, pure functions of the two strings and the threshold, are kept.
# Only short pairs, so the cache holds at most ~256 x 4 KB.
_CACHED_CHARS = 4096


@lru_cache(maxsize=256)
def _similar_cached(a: str, b: str, threshold: float) -> bool:
    return _judge(a, b, threshold)


def _judge(a: str, b: str, threshold: float) -> bool:
    la, lb = len(a), len(b)
    if 2 * min(la, lb) < threshold * (la + lb):  # difflib's real_quick_ratio: lengths alone
        return False
    if _kind(a) != _kind(b):
        return False
    # A cheaper upper bound of ratio() than difflib's quick_ratio (~15 µs for two 50-char calls):
    # the matched characters are at most the longest common subsequence, which is the common prefix
    # plus the common suffix plus at most the multiset intersection of the two middles. Fingerprints
    # of one kind share their JSON frame, so the middles are short. Only when that bound reaches the
    # threshold does the full diff run.
    prefix = _common_run(a, b, min(la, lb))
    suffix = _common_run(a, b, min(la, lb) - prefix, from_end=True)
    middle_a, middle_b = a[prefix : la - suffix], b[prefix : lb - suffix]
    chars = set(middle_a).intersection(middle_b)
    shared = sum(map(min, map(middle_a.count, chars), map(middle_b.count, chars)))
    if 2 * (prefix + suffix + shared) < threshold * (la + lb):
        return False
    return difflib.SequenceMatcher(None, a, b).ratio() >= threshold


def _common_run(a: str, b: str, limit: int, *, from_end: bool = False) -> int:
    """Length of the common prefix (or suffix), at most *limit*, by bisection over slice comparisons
    (C speed, not a character loop)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if (a[-mid:] == b[-mid:]) if from_end else (a[:mid] == b[:mid]):
            low = mid
        else:
            high = mid - 1
    return low
