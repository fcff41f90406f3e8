"""Loop gates, enforced outside the model (seed 003): budgets checked *before* a call,
an 80% token warning, a wall-clock limit, and convergence detection.

Convergence: seed 003's "the same tool called three times in a row with nearly the same arguments". A
near-identical call ``repeat_limit`` (three) times in a row is refused with a hint; if the proposer
repeats it once more after the hint, the run stops (``no_progress``). "In a row" means consecutive
decisions: a finish, a refused proposal or any other decision in between breaks the streak (a rewrite
after validation feedback is a new attempt, not a loop).

What counts as near-identical:

* the same kind and the same *target*, the argument that says what the call acts on: the ``path`` of
  ``list_dir`` / ``read_file`` / ``write_file`` / ``delete_file`` (normalized, so ``./a.md`` is
  ``a.md``), the ``id`` of ``read_evidence``, the ``ref`` of ``read_ref``, the ``argv`` of
  ``run_command``; ``write_report`` (the contract's one report), ``think`` and the external effects
  have none, so their arguments alone decide;
* and every other argument the same or near-same: text near-same when its similarity (below) is at
  least ``similarity`` (0.9), so a rewrite of the same file that differs by a character counts;
  anything else (numbers such as ``read_ref``'s range or a timeout, switches) only when equal.

So different files, different evidence ids, different folders, different commands and another page of
a stored output are progress and never refused, however alike their spelling.

The result does not count. Seed 003 judges the call, and the gate judges it before it runs: the same
call again is caught whatever it returned, and a different call that happens to return what the last
one did (an empty listing of another folder, the same failing check after an edit elsewhere) is other
work, not a repeat.

Similarity of two texts is ``2 * M / (len(a) + len(b))`` with ``M`` the matched characters: the common
prefix, the common suffix, and what matches between the two middles left over (characters in matching
blocks of ``difflib.SequenceMatcher(autojunk=False)`` when both middles are short, whole lines when
not: a character diff is quadratic, seconds for two 5 KB texts, and difflib's default junk heuristic,
which makes it fast, rates two long texts made of few distinct characters as half alike when they differ
by one). Cheap bounds decide most pairs without a diff.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

from ..clock import Clock
from ..contract import Budget
from ..records.actions import FLAT_SIZE
from ..records.events import StopReason
from ..records.proposal import Proposal

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


# recent calls, hinted, warned, last decision number (see LoopGates.mark)
GatesMark = tuple[tuple["_Entry", ...], bool, bool, int | None]


@dataclass
class LoopGates:
    budget: Budget
    clock: Clock
    started_at: float | None = None
    repeat_limit: int = 3
    similarity: float = 0.9
    warn_fraction: float = 0.8
    # The last calls, each as its canonical JSON (what a checkpoint keeps as "recent") and split for
    # comparing. Immutable: a mark() holds them as they were.
    _recent: tuple[_Entry, ...] = ()
    _hinted: bool = False
    _warned: bool = False
    _last_decision: int | None = None
    _elapsed: float = 0.0  # the largest elapsed() so far (see elapsed)
    # A verdict depends only on the recent calls' texts, the call's text and the two settings (a call's
    # split is a function of its text), and a loop repeats a few such cases step after step: (id(recent),
    # text, repeat_limit, similarity) -> (recent, the repeats found, the recent calls after it). Equal
    # sequences of short texts are one tuple (_recent_of), so a loop's keys recur. Both bounded.
    _seen: dict[tuple[int, str, int, float], tuple[tuple[_Entry, ...], int, tuple[_Entry, ...]]] = \
        dataclasses.field(default_factory=dict, repr=False, compare=False)
    _recent_of: dict[tuple[str, ...], tuple[_Entry, ...]] = \
        dataclasses.field(default_factory=dict, repr=False, compare=False)

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
        text = proposal.canonical  # sorted-key JSON of the action, made once per proposal
        limit, recent = self.repeat_limit, self._recent
        key = (id(recent), text, limit, self.similarity)
        seen = self._seen.get(key)
        if seen is not None and seen[0] is recent:  # (the id is recent's own: the entry keeps it alive)
            _, same, self._recent = seen
        else:
            same, self._recent = self._judge(proposal, text, recent, limit)
            if len(text) + sum(len(t) for t, _ in recent) <= _CACHED_CHARS:  # short calls only (as _judge keeps)
                if len(self._seen) >= 64:
                    self._seen.clear()
                self._seen[key] = (recent, same, self._recent)
        if same < limit - 1:
            self._hinted = self._hinted and same > 0
            return "ok"
        if self._hinted and same:
            return "stop"
        self._hinted = True
        return "hint"

    def _judge(self, proposal: Proposal, text: str, recent: tuple[_Entry, ...],
               limit: int) -> tuple[int, tuple[_Entry, ...]]:
        """How many of the recent calls the proposal's (``text``) repeats, and the recent calls with it."""
        action = proposal.action
        # its JSON form: a flat action's fields are that already (all plain str; see flat)
        call = _call(action.__dict__ if type(action) in FLAT_SIZE else proposal.action_json)
        # Only the last repeat_limit - 1 calls are ever compared; at least the last one, so that with a
        # limit of 1 a call after the hint stops the run only if it repeats the hinted one.
        keep = limit - 1 if limit > 1 else 1
        same = 0
        for earlier_text, earlier in recent[-keep:]:
            if earlier_text == text or (
                    call is not None and earlier is not None
                    and earlier[0] == call[0] and earlier[1] == call[1]  # kind and target: most calls differ here
                    and _near(earlier_text, text, earlier, call, self.similarity)):
                same += 1
        after = (*recent, (text, call))[-keep:]
        texts = tuple(t for t, _ in after)
        if sum(map(len, texts)) > _CACHED_CHARS:  # long calls (a file's text) are not kept
            return same, after
        if len(self._recent_of) >= 64:
            self._recent_of.clear()
        return same, self._recent_of.setdefault(texts, after)

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
        return {"recent": [text for text, _ in recent], "hinted": hinted, "warned": warned, "last_decision": last}

    def restore(self, state: dict[str, object]) -> None:
        recent = state.get("recent", [])
        texts = [str(k) for k in recent] if isinstance(recent, list) else []
        self._recent = tuple((text, _call_of_text(text)) for text in texts)
        self._hinted = bool(state.get("hinted", False))
        self._warned = bool(state.get("warned", False))
        last = state.get("last_decision")
        self._last_decision = last if isinstance(last, int) else None


def _secs(elapsed: float, limit: float) -> str:
    # Enough digits that the elapsed time never prints below the limit it reached (0.041 as "0.0").
    return f"{elapsed:.6g}s/{limit:g}s"


# The argument that says what a call acts on, per kind (see the module docstring); kinds not named have none.
_TARGETS: dict[str, str] = {
    "list_dir": "path", "read_file": "path", "write_file": "path", "delete_file": "path",
    "read_evidence": "id", "read_ref": "ref", "run_command": "argv",
}

# (kind, target, the call's JSON-native arguments, kind and target included)
_Call = tuple[str, object, Mapping[str, Any]]
# a call as kept: its canonical JSON and its split (None: not an action)
_Entry = tuple[str, _Call | None]


def _call(values: Mapping[str, Any] | None) -> _Call | None:
    """A call split for comparing, from its JSON form (``Proposal.action_json``, or a kept fingerprint
    parsed again after a restore: both give the same split)."""
    if values is None or type(kind := values.get("kind")) is not str:
        return None
    field = _TARGETS.get(kind)
    if field is None:
        return (kind, None, values)
    target = values.get(field)
    if field == "path" and type(target) is str:
        target = _normal_path(target)
    return (kind, target, values)


def _call_of_text(text: str) -> _Call | None:
    try:
        values = json.loads(text)
    except ValueError:
        return None
    return _call(values) if isinstance(values, dict) else None


@lru_cache(maxsize=1024)
def _normal_path(path: str) -> str:
    # "./src/a.py", "src//a.py" and "src/a.py" name one file (the sandbox decides what a path may reach).
    return posixpath.normpath(path)


def _near(text_a: str, text_b: str, a: _Call, b: _Call, threshold: float) -> bool:
    """Near-identical calls of one kind and target (the caller compared those): every other argument
    the same or near-same. ``text_a`` and ``text_b`` are the calls' canonical JSON: a loop compares the
    same few pairs step after step, whose verdicts are kept (short pairs only, as in _similar)."""
    if len(text_a) + len(text_b) > _CACHED_CHARS:
        return _near_arguments(a, b, threshold)
    key = (text_a, text_b, threshold)
    verdict = _NEAR_SEEN.get(key)
    if verdict is None:
        if len(_NEAR_SEEN) >= 256:
            _NEAR_SEEN.clear()
        verdict = _NEAR_SEEN[key] = _near_arguments(a, b, threshold)
    return verdict


_NEAR_SEEN: dict[tuple[str, str, float], bool] = {}


def _near_arguments(a: _Call, b: _Call, threshold: float) -> bool:
    left, right = a[2], b[2]
    if len(left) != len(right):
        return False
    field = _TARGETS.get(a[0])
    for name, value in left.items():
        if name == "kind" or name == field:
            continue
        if name not in right or not _near_value(value, right[name], threshold):
            return False
    return True


def _near_value(a: object, b: object, threshold: float) -> bool:
    if a == b:
        return True
    if type(a) is str and type(b) is str:
        return _similar(a, b, threshold)
    if isinstance(a, dict) and isinstance(b, dict):  # an external effect's arguments, one by one
        return a.keys() == b.keys() and all(_near_value(v, b[k], threshold) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_near_value(x, y, threshold) for x, y in zip(a, b, strict=True))
    return False  # numbers, switches, null: only when equal


def text_similarity(a: str, b: str) -> float:
    """How alike two texts are, from 0 to 1 (see the module docstring): the definition itself, with no
    shortcut. The gate's verdict is ``text_similarity(a, b) >= threshold``, mostly reached by cheaper bounds."""
    if not a and not b:
        return 1.0
    prefix, suffix = _ends(a, b)
    matched = prefix + suffix + _middle_matches(a[prefix : len(a) - suffix], b[prefix : len(b) - suffix])
    return 2 * matched / (len(a) + len(b))


def _similar(a: str, b: str, threshold: float) -> bool:
    """``text_similarity(a, b) >= threshold``, by cheap bounds first."""
    if a == b:
        return True
    if len(a) + len(b) <= _CACHED_CHARS:
        return _similar_cached(a, b, threshold)
    return _judge(a, b, threshold)


# A loop compares the same few text pairs step after step (the gate compares each call with the last
# repeat_limit - 1): their verdicts, pure functions of the two strings and the threshold, are kept.
# Only short pairs, so the cache holds at most ~256 x 4 KB.
_CACHED_CHARS = 4096
# Middles of at most this many characters each are diffed by character, longer ones by line: a
# character diff is quadratic (~1 ms for two unrelated 200-character middles, seconds at 5 KB).
_CHAR_DIFF = 200


@lru_cache(maxsize=256)
def _similar_cached(a: str, b: str, threshold: float) -> bool:
    return _judge(a, b, threshold)


def _judge(a: str, b: str, threshold: float) -> bool:
    la, lb = len(a), len(b)
    total = threshold * (la + lb)
    if 2 * min(la, lb) < total:  # lengths alone: at most the shorter text matches
        return False
    prefix, suffix = _ends(a, b)
    if 2 * (prefix + suffix) >= total:  # the ends alone match enough
        return True
    # At most the multiset intersection of the middles' characters matches (matched characters are
    # equal characters at distinct positions of both); only when that bound reaches the threshold
    # does a diff run.
    middle_a, middle_b = a[prefix : la - suffix], b[prefix : lb - suffix]
    chars = set(middle_a).intersection(middle_b)
    shared = sum(map(min, map(middle_a.count, chars), map(middle_b.count, chars)))
    if 2 * (prefix + suffix + shared) < total:
        return False
    return 2 * (prefix + suffix + _middle_matches(middle_a, middle_b)) >= total


def _ends(a: str, b: str) -> tuple[int, int]:
    """The common prefix and the common suffix of what is left after it (the two never overlap)."""
    shorter = min(len(a), len(b))
    prefix = _common_run(a, b, shorter)
    return prefix, _common_run(a, b, shorter - prefix, from_end=True)


def _middle_matches(a: str, b: str) -> int:
    """Characters matched between two middles: by character diff when both are short, else whole lines."""
    if not a or not b:
        return 0
    if len(a) <= _CHAR_DIFF and len(b) <= _CHAR_DIFF:
        blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        return sum(block.size for block in blocks)
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    blocks = difflib.SequenceMatcher(None, lines_a, lines_b, autojunk=False).get_matching_blocks()
    return sum(len(line) for block in blocks for line in lines_a[block.a : block.a + block.size])


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
