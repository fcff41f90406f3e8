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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["ACTIONS", "Session", "SessionEntry", "SessionReplay"]

Action = Literal["step", "run_to_gate", "run_to_end", "approve", "reject", "inject", "rollback", "fork", "edit_pending",
                 "run_to", "approve_as_edited", "fork_here", "snapshot_now"]
ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]


# The arguments each LabView call takes: name -> (accepted types, required). ``raw`` is any JSON.
_ARGS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "step": {},
    "run_to_gate": {"max_steps": ((int,), False)},
    "run_to_end": {"max_steps": ((int, type(None)), False)},
    "approve": {"by": ((str,), False)},
    "reject": {"reason": ((str,), True), "by": ((str,), False)},
    "inject": {"name": ((str, dict), True)},  # a dict: a Fault object's fields (see _fault)
    "rollback": {"snapshot_id": ((str,), True)},
    "fork": {"snapshot_id": ((str,), True)},
    "edit_pending": {"raw": ((object,), True), "by": ((str,), False)},
    "run_to": {"until": ((str, int), True), "max_steps": ((int, type(None)), False)},
    "approve_as_edited": {"by": ((str,), False)},  # and the edited fields, any names (see below)
    "fork_here": {"budget": ((str, dict), False), "step": ((int,), False)},
    "snapshot_now": {"label": ((str,), False)},
}
_ANY_FIELDS = frozenset({"approve_as_edited"})  # the edited call's own argument names


class SessionEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["session_entry"] = "session_entry"
    action: Action
    args: dict[str, Any] = Field(default_factory=dict)
    state_after: str
    step_after: int
    last_decision: str = ""  # "<verdict>:<tool status>" of the last step record
    workspace_hash: str

    @model_validator(mode="after")
    def _args_fit_the_call(self) -> SessionEntry:
        # Checked on load, so a bad file fails before a replay makes any call, not with a TypeError halfway.
        spec = _ARGS[self.action]
        for name in self.args:
            if name not in spec and self.action not in _ANY_FIELDS:
                raise ValueError(f"{self.action} takes no argument {name!r}")
        for name, (types, required) in spec.items():
            if name not in self.args:
                if required:
                    raise ValueError(f"{self.action} needs argument {name!r}")
                continue
            value = self.args[name]
            if isinstance(value, bool) and bool not in types or not isinstance(value, types):
                want = " or ".join("None" if t is type(None) else t.__name__ for t in types)
                raise ValueError(f"{self.action} argument {name!r} must be {want}, not {type(value).__name__}")
        if self.action == "inject" and isinstance(self.args["name"], dict):
            _fault(self.args["name"])
        return self


def _fault(fields: dict[str, Any]) -> Any:
    """The fault ``view.inject(<a Fault object>)`` armed (e.g. with its own parameters), from the fields
    a saved session holds; a ValueError naming what does not fit."""
    from harness_lab.faults import fault_catalogue

    name, catalogue = fields.get("name"), fault_catalogue()
    if not isinstance(name, str) or name not in catalogue:
        raise ValueError(f"inject: unknown fault {name!r}; choose one of {', '.join(catalogue)}")
    try:
        return type(catalogue[name]).model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"inject: fault {name} {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


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
        # Not validated: a call that succeeded is recorded as made (view.inject(<a Fault object>)
        # replays in memory; only a saved file must hold plain arguments, checked when loaded).
        entry = SessionEntry.model_construct(action=action, args=dict(args), state_after=state, step_after=step,
                                             last_decision=decided, workspace_hash=ws)
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
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(part) for part in err["loc"])
                msg = str(err["msg"]).removeprefix("Value error, ")
                raise ValueError(f"{source}: entry {i}: {where + ': ' if where else ''}{msg}") from None
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
            args = entry.args
            if entry.action == "inject" and isinstance(args.get("name"), dict):  # loaded from a file
                args = {**args, "name": _fault(args["name"])}
            getattr(view, entry.action)(**args)
            got = outcome(view.run)
            want = (entry.state_after, entry.step_after, entry.last_decision, entry.workspace_hash)
            if got != want:
                return SessionReplay(entries=len(self.entries), diverged_at=i,
                                     detail=f"entry {i} ({entry.action} {entry.args}): recorded {want[:3]}, replayed {got[:3]}"
                                     + ("" if got[3] == want[3] else "; workspace differs"))
        return SessionReplay(entries=len(self.entries), diverged_at=None,
                             detail=f"{len(self.entries)} calls replayed to the same states and workspace hashes")
