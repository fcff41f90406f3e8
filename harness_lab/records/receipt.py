"""The acceptance receipt: binds the *same* bytes that were validated to the verdict.

Consumers use the accepted bytes, or call :meth:`Receipt.matches` before trusting the path again.
A hash identifies content; it does not prove the content true.

Each verification layer's verdict is kept apart: ``structural`` (the report's format), ``functional``
(the check commands, each one's exit status and output digest in ``checks``, with ``tree_sha256``: the
workspace tree they ran on; :meth:`Receipt.matches_tree` before trusting the tree again) and ``semantic``
(the goal reviewer). The functional fields are left out of the JSON form while the layer does not apply,
so receipts of report tasks read as before it existed.

A record the step record holds (``StepRecord.receipt``), so it lives in ``records/``;
:mod:`harness_lab.validation` re-exports it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

from .verdicts import CheckRun

__all__ = ["Receipt", "sha256_hex"]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Receipt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["receipt"] = "receipt"
    artifact_path: str
    artifact_sha256: str
    contract_version: str
    evidence_sha256: dict[str, str]
    step: int
    structural: Literal["passed", "not_run"]
    semantic: Literal["passed", "failed", "not_run"] = "not_run"
    functional: Literal["passed", "not_run", "not_applicable"] = "not_applicable"
    checks: tuple[CheckRun, ...] = ()
    tree_sha256: str | None = None

    def matches(self, data: bytes) -> bool:
        return sha256_hex(data) == self.artifact_sha256

    def matches_tree(self, workspace_hash: str) -> bool:
        """Whether a workspace hash (``Sandbox.workspace_hash()``) is the tree the checks passed on."""
        return self.tree_sha256 is not None and workspace_hash == self.tree_sha256

    @model_serializer(mode="wrap")
    def _without_inapplicable(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.functional == "not_applicable":
            for name in ("functional", "checks", "tree_sha256"):
                data.pop(name, None)
        return data
