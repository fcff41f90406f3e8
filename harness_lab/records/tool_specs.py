"""The tools a proposer may call, described once: the JSON schemas a model endpoint is sent
(:data:`TOOL_SCHEMAS`) and the one-line list the L0 system text gives (:func:`tool_signatures`), so
what a model reads and what it can call never differ."""

from __future__ import annotations

from typing import Any

__all__ = ["TOOL_SCHEMAS", "tool_names", "tool_signatures"]


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


_STR = {"type": "string"}
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _fn("read_evidence", "Read one evidence note by id.", {"id": _STR}, ["id"]),
    _fn("write_report", "Write the whole report (Markdown) to the report path.", {"text": _STR}, ["text"]),
    _fn("finish", "Ask the runtime to validate the report and end the task.", {}, []),
    _fn("list_dir", "List a workspace directory.", {"path": _STR}, []),
    _fn("read_file", "Read a workspace file.", {"path": _STR}, ["path"]),
    _fn("write_file", "Write a workspace file.", {"path": _STR, "content": _STR}, ["path", "content"]),
    _fn("run_command", "Run a command in the sandbox.",
        {"argv": {"type": "array", "items": _STR}, "timeout": {"type": "number"}}, ["argv"]),
    _fn("delete_file", "Delete a workspace file (asks a human first).", {"path": _STR}, ["path"]),
    _fn("read_ref", "Read part of a large stored output by reference.",
        {"ref": _STR, "start": {"type": "integer"}, "end": {"type": "integer"}}, ["ref"]),
    _fn("think", "Write a thought down (no side effect); it stays in the context.", {"thought": _STR}, ["thought"]),
    _fn("begin_subtask", "Open a subtask of your plan (a name and its goal).", {"name": _STR, "goal": _STR},
        ["name", "goal"]),
    _fn("finish_subtask", "Close the open subtask; its steps collapse into your conclusion (L3).",
        {"conclusion": _STR}, []),
    _fn("search_history", "Search earlier context that left the view, by relevance; read_ref opens a hit's id.",
        {"query": _STR, "k": {"type": "integer"}}, ["query"]),
)


def tool_names() -> tuple[str, ...]:
    return tuple(t["function"]["name"] for t in TOOL_SCHEMAS)


def tool_signatures() -> str:
    """``read_evidence(id), write_report(text), ...``: every tool with its argument names."""
    return ", ".join(f"{t['function']['name']}({', '.join(t['function']['parameters']['properties'])})"
                     for t in TOOL_SCHEMAS)
