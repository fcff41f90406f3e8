"""The verdicts a finish step's validation gives, as the step record holds them: the format layer's
:class:`ReportVerdict` (with a :class:`CheckFailure` per failed check) and the functional or goal layer's
:class:`LayerVerdict` (with :class:`LayerFailure` and a :class:`CheckRun` per check command).

Records, not checks: :mod:`harness_lab.validation` makes them (and re-exports these names); they live
here so that :mod:`harness_lab.records.events` types ``StepRecord.verdict`` without importing the
validators, which read the contract.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckCode", "CheckFailure", "CheckRun", "FailureCode", "LayerFailure", "LayerVerdict", "ReportVerdict",
           "Verdict"]

CheckCode = Literal[
    "report_missing",
    "report_too_large",
    "report_empty",
    "report_not_text",
    "section_missing",
    "section_empty",
    "citation_malformed",
    "citation_unknown",
    "citation_not_read",
    "too_few_citations",
]

FailureCode = Literal["check_failed", "check_timed_out", "check_error", "protected_changed", "protected_missing",
                      "unexpected_file", "goal_failed"]


class CheckFailure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["check_failure"] = "check_failure"
    code: CheckCode
    message: str


class ReportVerdict(BaseModel):
    """The structural verdict on one report snapshot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["report_verdict"] = "report_verdict"
    layer: Literal["structural"] = "structural"
    accepted: bool
    errors: tuple[CheckFailure, ...] = ()
    cited: tuple[str, ...] = ()

    @property
    def reasons(self) -> list[str]:
        return [f"{e.code}: {e.message}" for e in self.errors]


class CheckRun(BaseModel):
    """One check command's outcome as the receipt binds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["check_run"] = "check_run"
    name: str
    status: Literal["passed", "failed", "timeout", "error"]
    exit_status: int | None = None
    output_sha256: str
    output_tail: str = ""
    reason: str | None = None


class LayerFailure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["layer_failure"] = "layer_failure"
    code: FailureCode
    message: str


class LayerVerdict(BaseModel):
    """The verdict of the functional or the goal layer on one finish (the format layer's is
    :class:`ReportVerdict`); shaped like it where a reader looks: ``accepted``,
    ``errors`` with ``code`` and ``message``, ``reasons``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["layer_verdict"] = "layer_verdict"
    layer: Literal["functional", "goal"]
    accepted: bool
    errors: tuple[LayerFailure, ...] = ()
    checks: tuple[CheckRun, ...] = ()
    tree_sha256: str | None = None

    @property
    def reasons(self) -> list[str]:
        return [f"{e.code}: {e.message}" for e in self.errors]


Verdict = Annotated[ReportVerdict | LayerVerdict, Field(discriminator="kind")]
"""A finish step's verdict: the format layer's (:class:`ReportVerdict`) or the first other layer that failed."""
