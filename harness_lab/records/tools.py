"""The one result shape every tool call returns: expected failures are data, never exceptions.

``status`` is one of ``ok``, ``error``, ``denied``, ``timeout``. When it is not ``ok`` the
structured error fields (``reason``, ``hint``, ``retryable``, ``exit_status``) say what went
wrong in words a model can use; raw tracebacks never appear here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ToolResult", "ToolStatus"]

ToolStatus = Literal["ok", "error", "denied", "timeout"]


class ToolResult(BaseModel):
    """Outcome of one tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["tool_result"] = "tool_result"
    status: ToolStatus
    tool: str
    content: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    hint: str | None = None
    retryable: bool = False
    exit_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def success(cls, tool: str, content: str | None = None, **data: Any) -> ToolResult:
        return cls(status="ok", tool=tool, content=content, data=data)

    @classmethod
    def failure(
        cls,
        tool: str,
        reason: str,
        hint: str,
        *,
        status: ToolStatus = "error",
        retryable: bool = False,
        exit_status: int | None = None,
    ) -> ToolResult:
        return cls(
            status=status,
            tool=tool,
            reason=reason,
            hint=hint,
            retryable=retryable,
            exit_status=exit_status,
        )

    def for_model(self) -> dict[str, Any]:
        """The structured error (or result) as the model sees it."""
        if self.ok:
            return {"status": "ok", "tool": self.tool, "content": self.content}
        return {
            "status": self.status,
            "tool": self.tool,
            "reason": self.reason,
            "hint": self.hint,
            "retryable": self.retryable,
            "exit_status": self.exit_status,
        }
