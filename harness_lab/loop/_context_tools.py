"""The actions a run's context answers: the subtask cycle (``begin_subtask`` / ``finish_subtask``, from the
proposer's plan) and ``search_history``. Like every tool they return a :class:`ToolResult`; a mistake
(finishing when no subtask is open, opening one while another is open) is a structured error the
proposer reads, never an exception.
"""

from __future__ import annotations

from ..context import ContextManager
from ..records.actions import ActionBase, BeginSubtask, FinishSubtask, SearchHistory
from ..records.tools import ToolResult

__all__ = ["context_action"]


def context_action(ctx: ContextManager, action: ActionBase, round: int) -> ToolResult:
    """Carry out one context action on *ctx* at step *round*."""
    if isinstance(action, SearchHistory):
        hits = ctx.search_history(action.query, action.k)
        if not hits:
            return ToolResult.success("search_history", f"no stored history matches {action.query!r}", hits=[])
        lines = [f"{len(hits)} hit(s) for {action.query!r}; read_ref(id) opens one:", *(h.line() for h in hits)]
        return ToolResult.success("search_history", "\n".join(lines), hits=[h.to_dict() for h in hits])
    if isinstance(action, BeginSubtask):
        if (open_one := ctx.current_subtask) is not None:
            return ToolResult.failure("begin_subtask", f"subtask {open_one!r} is still open",
                                      "finish_subtask first (with its conclusion), then begin the next one")
        item = ctx.begin_subtask(action.name, action.goal, round=round)
        return ToolResult.success("begin_subtask", f"subtask {action.name!r} opened ({item.id})", subtask=action.name)
    if isinstance(action, FinishSubtask):
        name = ctx.current_subtask
        if name is None:
            return ToolResult.failure("finish_subtask", "no subtask is open",
                                      "begin_subtask(name, goal) opens one; a conclusion closes it")
        item = ctx.finish_subtask(name, action.conclusion, round=round)
        report = ctx.last_report
        assert report is not None  # finish_subtask always leaves its report
        return ToolResult.success("finish_subtask", f"subtask {name!r} closed into {item.id}: {item.text}",
                                  subtask=name, conclusion=item.id, report=report.to_dict())
    return ToolResult.failure(action.kind, f"{action.kind} is not a context action", "propose a tool action")
