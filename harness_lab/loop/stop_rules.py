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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# The rules and their parsers sit beside the contract, which checks its stop fields with them (the loop is
# above the contract); re-exported here, where the loop's readers of them are described.
from ..contract_fields import AllChecksPass, SameRootCause, parse_failure, parse_success

__all__ = ["SAME_ROOT_CAUSE", "AllChecksPass", "FailedAttempts", "SameRootCause", "parse_failure", "parse_success",
           "root_cause"]

SAME_ROOT_CAUSE = "same_root_cause"  # the stop code of a run the failure rule stopped


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
