"""The acceptance receipt: binds the *same* bytes that were validated to the verdict.

Consumers use the accepted bytes, or call :meth:`Receipt.matches` before trusting the path again.
A hash identifies content; it does not prove the content true.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

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

    def matches(self, data: bytes) -> bool:
        return sha256_hex(data) == self.artifact_sha256
