"""Reading YAML/JSON config files with one-line errors that name the file."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError

__all__ = ["load_mapping", "validate_file"]


def load_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    is_json = path.suffix == ".json"
    try:
        raw = json.loads(text) if is_json else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        reason = _yaml_reason(exc) if isinstance(exc, yaml.MarkedYAMLError) else str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {reason}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw


def validate_file(model: type[BaseModel], path: Path) -> Any:
    """Load ``path`` and validate it as ``model``; the first problem becomes a one-line ConfigError."""
    raw = load_mapping(path)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt field is reported twice, as unknown and as missing: name the misspelling first.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: field {where}: {first['msg']}{_did_you_mean(first, errors)}") from None


def _did_you_mean(error: Any, errors: list[Any]) -> str:
    if error["type"] != "extra_forbidden":
        return ""
    parent, name = error["loc"][:-1], str(error["loc"][-1])
    missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and e["loc"][:-1] == parent]
    close = difflib.get_close_matches(name, missing, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _yaml_reason(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark
    place = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{exc.problem or exc.context}{place}"
