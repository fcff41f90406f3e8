"""The human gate: gated proposals wait, with no side effect, until a decision.

An :class:`Approver` answers an :class:`ApprovalRequest` with a decision, or ``None`` to ask a
human (the run then parks in WAITING_FOR_HUMAN). Headless runs pass a policy instead.
The request carries the sha256 of the exact action; what executes is what was approved.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AskHuman",
    "AutoApprove",
    "AutoReject",
    "approver_from_policy",
]


class ApprovalRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["approval_request"] = "approval_request"
    step: int
    action_kind: str
    category: str
    args: dict[str, Any]
    args_sha256: str
    requested_at: float


class ApprovalDecision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["approval_decision"] = "approval_decision"
    approved: bool
    reason: str
    by: str


class Approver(Protocol):
    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None: ...


class AskHuman:
    """Always defer to a person: the run waits for ``approve()`` / ``reject()``."""

    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return None


class AutoApprove:
    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return ApprovalDecision(approved=True, reason="headless policy: approve", by="policy:approve")


class AutoReject:
    def __init__(self, reason: str = "headless policy: reject") -> None:
        self.reason = reason

    def decide(self, request: ApprovalRequest) -> ApprovalDecision | None:
        return ApprovalDecision(approved=False, reason=self.reason, by="policy:reject")


def approver_from_policy(policy: str) -> Approver:
    """``ask`` (wait for a human), ``approve`` or ``reject``: the headless gate policies."""
    policies: dict[str, Approver] = {"ask": AskHuman(), "approve": AutoApprove(), "reject": AutoReject()}
    if policy not in policies:
        raise ValueError(f"unknown gate policy {policy!r}; choose one of {', '.join(policies)}")
    return policies[policy]
