"""A debugging session: every interactive call on a LabView, recorded so it can be replayed headless.

Each entry holds the call (``step``, ``approve``, ``reject``, ``inject``, ``rollback``, ``fork``, ...)
with its arguments and what it led to (state, step, workspace hash). The run's own trace records
the decisions themselves (human decisions, armed faults, restores). ``Session.replay(view)`` makes
the same calls on a fresh view and reports the first entry whose outcome differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ACTIONS", "Session", "SessionEntry", "SessionReplay"]

Action = Literal["step", "run_to_gate", "run_to_end", "approve", "reject", "inject", "rollback", "fork", "edit_pending"]
ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]


class SessionEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_entry"] = "session_entry"
    action: Action
    args: dict[str, Any] = Field(default_factory=dict)
    state_after: str
    step_after: int
    last_decision: str = ""  # "<verdict>:<tool status>" of the last step record
    workspace_hash: str


class SessionReplay(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_replay"] = "session_replay"
    entries: int
    diverged_at: int | None  # index of the first entry whose outcome differs, or None
    detail: str

    @property
    def identical(self) -> bool:
        return self.diverged_at is None


def outcome(run: Any) -> tuple[str, int, str, str]:
    last = run.records[-1] if run.records else None
    decided = f"{last.decision.verdict}:{last.tool_result.status if last.tool_result else '-'}" if last else ""
    return run.state.value, run.step_no, decided, run.sandbox.workspace_hash()


class Session:
    """The calls made on one LabView, in order (``view.session``)."""

    def __init__(self, entries: list[SessionEntry] | None = None) -> None:
        self.entries: list[SessionEntry] = list(entries or [])

    def record(self, run: Any, action: str, args: dict[str, Any]) -> SessionEntry:
        state, step, decided, ws = outcome(run)
        entry = SessionEntry.model_validate({"action": action, "args": args, "state_after": state, "step_after": step,
                                             "last_decision": decided, "workspace_hash": ws})
        self.entries.append(entry)
        return entry

    def to_json(self) -> str:
        return json.dumps({"kind": "session", "entries": [e.model_dump(mode="json") for e in self.entries]},
                          indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, *, source: str = "session") -> Session:
        """Parse a saved session; bad input is a ValueError naming the source and the entry."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(data, dict) or data.get("kind") != "session" or not isinstance(data.get("entries"), list):
            raise ValueError(f"{source}: not a saved session (expected kind 'session' with a list of entries)")
        entries = []
        for i, raw in enumerate(data["entries"]):
            try:
                entries.append(SessionEntry.model_validate(raw))
            except ValueError as exc:
                first = str(exc).splitlines()[1:2] or [str(exc)]
                raise ValueError(f"{source}: entry {i}: {first[0].strip()}") from None
        return cls(entries)

    def save(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_text(self.to_json() + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | Path) -> Session:
        p = Path(path)
        return cls.from_json(p.read_text(encoding="utf-8"), source=str(p))

    def replay(self, view: Any) -> SessionReplay:
        """Make the same calls on ``view`` (a LabView over a fresh run of the same scenario)."""
        for i, entry in enumerate(self.entries):
            getattr(view, entry.action)(**entry.args)
            got = outcome(view.run)
            want = (entry.state_after, entry.step_after, entry.last_decision, entry.workspace_hash)
            if got != want:
                return SessionReplay(entries=len(self.entries), diverged_at=i,
                                     detail=f"entry {i} ({entry.action} {entry.args}): recorded {want[:3]}, replayed {got[:3]}"
                                     + ("" if got[3] == want[3] else "; workspace differs"))
        return SessionReplay(entries=len(self.entries), diverged_at=None,
                             detail=f"{len(self.entries)} calls replayed to the same states and workspace hashes")
