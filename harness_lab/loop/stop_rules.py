"""The contract's ``stop.success`` and ``stop.failure`` read once, as one typed rule every layer uses.

Seed 000's contract writes them as text ("all verification checks pass", "same root cause failed twice";
"同一根因连续失败两次"); :func:`parse_failure` and :func:`parse_success` turn such text, or the
structured forms ``{same_root_cause: 2}`` and ``{all_checks_pass: true}``, into a :class:`SameRootCause`
and an :class:`AllChecksPass`. Text it cannot read is a one-line ValueError (the contract file's
ConfigError names the field). :attr:`Stop.rules <harness_lab.contract.Stop.rules>` gives the pair.

Who reads the failure rule, each counting its own attempts with the same :meth:`SameRootCause.fires`:

* a bare :class:`~harness_lab.loop.run.Run`: an attempt is a failed finish of an artifact that differs from
  the last failed one's (a finish repeated on unchanged bytes is no new attempt: the budget and the
  convergence gate answer that, as in seed 004's table); when the rule fires the run stops BLOCKED with
  stop code :data:`SAME_ROOT_CAUSE`;
* :class:`~harness_lab.loop.repair.RepairPolicy`: the same attempts; when the rule fires retrying cannot fix the
  cause, so the policy rolls back at once (the retry cap still bounds different causes);
* :class:`~harness_lab.loop.scheduler.ExternalLoop`: an attempt is a round that ended on a failure.

The *root cause* of a failed verification is defined here only (:func:`root_cause`): the sorted set of
its failed check codes, e.g. ``"check failed: citations_missing,section_missing"``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Imports nothing of harness_lab: the contract parses its stop fields with this module.

__all__ = ["SAME_ROOT_CAUSE", "AllChecksPass", "FailedAttempts", "SameRootCause", "parse_failure", "parse_success",
           "root_cause"]

SAME_ROOT_CAUSE = "same_root_cause"  # the stop code of a run the failure rule stopped


@dataclass(frozen=True)
class SameRootCause:
    """Stop once the same root cause has failed ``times`` attempts in a row."""

    times: int = 2

    def fires(self, causes: Sequence[str]) -> bool:
        """True when the last ``times`` attempts (oldest first) all failed on the same root cause."""
        last = causes[-self.times:]
        return len(last) == self.times and len(set(last)) == 1

    def describe(self) -> str:
        return f"same root cause failed {_count_words(self.times)} in a row"


@dataclass(frozen=True)
class AllChecksPass:
    """Success is every verification check passing (the run reaches REVIEW_READY with a receipt)."""

    def describe(self) -> str:
        return "all verification checks pass"


class _Failure(Protocol):
    @property
    def code(self) -> str: ...


class _Verdict(Protocol):  # a ReportVerdict (harness_lab.validation), which imports the contract
    @property
    def accepted(self) -> bool: ...
    @property
    def errors(self) -> Sequence[_Failure]: ...


def root_cause(verdict: _Verdict) -> str | None:
    """The root cause of a failed verification (None for an accepted one): its failed check codes."""
    if verdict.accepted:
        return None
    return "check failed: " + ",".join(sorted({e.code for e in verdict.errors}))


_KEPT = 16  # causes remembered: more than any rule a contract plausibly names


@dataclass
class FailedAttempts:
    """A run's failed finishes, one root cause per attempt, oldest first: a finish counts as a new attempt
    when the artifact's bytes differ from the last failed finish's (the Run keeps it; the repair policy
    reads it; a checkpoint holds it under the run state's ``attempts``)."""

    causes: list[str] = field(default_factory=list)
    artifact_sha256: str | None = None  # of the artifact at the last failed finish

    def add(self, cause: str, artifact_sha256: str) -> bool:
        """Record a failed finish; False when it repeats the last one's bytes (no new attempt)."""
        if self.causes and artifact_sha256 == self.artifact_sha256:
            return False
        self.causes = [*self.causes[-(_KEPT - 1):], cause]
        self.artifact_sha256 = artifact_sha256
        return True

    def state(self) -> dict[str, Any] | None:
        return {"causes": list(self.causes), "artifact_sha256": self.artifact_sha256} if self.causes else None

    @classmethod
    def from_state(cls, state: object) -> FailedAttempts:
        if state is None:
            return cls()
        if not isinstance(state, dict) or not isinstance(causes := state.get("causes"), list) \
                or not all(isinstance(c, str) for c in causes) \
                or not isinstance(sha := state.get("artifact_sha256"), (str, type(None))):
            raise ValueError("the run state's attempts are not a list of root causes and an artifact sha256")
        return cls(causes=list(causes[-_KEPT:]), artifact_sha256=sha)


_WORDS = {"once": 1, "twice": 2, "thrice": 3, "one time": 1, "two times": 2, "three times": 3}
_ZH = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5}
_EN = re.compile(r"same root cause (?:has )?(?:failed|fails|failing|fail) (?P<n>once|twice|thrice|(?:one|two|three) "
                 r"times|\d+ times?)(?: (?:in a row|consecutively))?")
_CN = re.compile(r"同一根因(?:连续)?失败(?P<n>[一两二三四五]|\d+)次")


def parse_failure(value: object) -> SameRootCause:
    """``stop.failure`` as a rule; a ValueError of one line for anything else."""
    if isinstance(value, dict):
        times = _structured(value, "same_root_cause")
    elif isinstance(value, str):
        text = " ".join(value.lower().split()).rstrip(".")
        if (m := _EN.fullmatch(text)) is not None:
            n = m["n"]
            times = _WORDS[n] if n in _WORDS else int(n.split()[0])
        elif (m := _CN.fullmatch(value.strip())) is not None:
            times = _ZH.get(m["n"]) or int(m["n"])
        else:
            raise ValueError(f"cannot read {value!r} as a stop rule; write 'same root cause failed twice' "
                             "(or 'failed N times'), or {same_root_cause: N}")
    else:
        raise ValueError(f"a stop rule is text or {{same_root_cause: N}}, got {type(value).__name__}")
    if times < 1:
        raise ValueError(f"same_root_cause must be at least 1 failure, got {times}")
    return SameRootCause(times=times)


def parse_success(value: object) -> AllChecksPass:
    """``stop.success`` as a rule; a ValueError of one line for anything else."""
    if isinstance(value, dict):
        if set(value) != {"all_checks_pass"} or value["all_checks_pass"] is not True:
            raise ValueError(f"a structured success rule is {{all_checks_pass: true}}, got {value!r}")
        return AllChecksPass()
    if isinstance(value, str):
        text = " ".join(value.lower().split()).rstrip(".")
        if text in ("all verification checks pass", "all checks pass", "所有验证通过"):
            return AllChecksPass()
        raise ValueError(f"cannot read {value!r} as a success rule; write 'all verification checks pass', "
                         "or {all_checks_pass: true}")
    raise ValueError(f"a success rule is text or {{all_checks_pass: true}}, got {type(value).__name__}")


def _structured(value: dict[Any, Any], key: str) -> int:
    if set(value) != {key}:
        raise ValueError(f"a structured stop rule is {{{key}: N}}, got the keys {sorted(map(str, value))}")
    times = value[key]
    if type(times) is not int:  # a bool is no count (True would read as 1)
        raise ValueError(f"{key} must be a whole number of failures, got {times!r}")
    return times


def _count_words(times: int) -> str:
    return {1: "once", 2: "twice"}.get(times, f"{times} times")
