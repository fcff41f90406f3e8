"""Scenario files (``data/scenarios/<id>.yaml``): a scripted action list plus fixed labels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._files import shown_path, validate_file
from .errors import ConfigError
from .paths import data_dir

__all__ = ["Scenario", "list_scenarios", "load_scenario", "require_scenarios", "scenario_ref"]


class Labels(BaseModel):
    """Ground truth fixed before any run; studies score against these, never the validator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    acceptable_reports: tuple[int, ...] = Field(
        default=(), description="indexes of the scripted write_report actions whose text is an acceptable report"
    )
    note: str = ""


class Scenario(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    contract: str = "report_task"
    then: Literal["repeat_last", "finish"] = "repeat_last"
    labels: Labels
    actions: tuple[dict[str, Any], ...] = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _id_names_a_run(cls, value: str) -> str:
        # The id is the run's default id: a blank one was refused only later, unnamed, after --db made its file.
        if not value.strip() or not value.isprintable():
            raise ValueError(f"{value!r} is empty, blank or holds a control character; it is the run's default id")
        return value

    @field_validator("actions", mode="before")
    @classmethod
    def _actions_are_mappings(cls, value: Any) -> Any:
        # pydantic's "Input should be a valid dictionary" named neither the action nor what it was.
        if isinstance(value, list):
            for i, action in enumerate(value):
                if not isinstance(action, dict):
                    raise ValueError(f"action {i} is {action!r:.60}, not a mapping "
                                     "(write it as 'kind: read_evidence' plus its arguments, e.g. 'id: ...')")
        return value

    @model_validator(mode="after")
    def _labels_name_reports(self) -> Scenario:
        # An index past the script was an IndexError mid-study; one naming a read made b"" "acceptable".
        for i in self.labels.acceptable_reports:
            if not 0 <= i < len(self.actions) or self.actions[i].get("kind") != "write_report":
                raise ValueError(f"labels.acceptable_reports: {i} is not a write_report action "
                                 f"(actions are numbered from 0; this script has {len(self.actions)})")
        return self

    def acceptable_texts(self) -> set[bytes]:
        """The report bytes a correct harness may accept for this scenario (fixed before any run)."""
        return {str(self.actions[i].get("text", "")).encode() for i in self.labels.acceptable_reports}

    def is_acceptable(self, accepted: bytes | None) -> bool:
        return accepted is not None and accepted in self.acceptable_texts()


def _is_file_name(name_or_path: str | Path) -> bool:
    # Any case: "My.YAML" from another system was looked up as the shipped id "My.YAML" and not found.
    return Path(name_or_path).suffix.lower() in (".yaml", ".yml", ".json")


def scenario_ref(name_or_path: str | Path) -> str:
    """How a run records its scenario: a shipped id as it is, a file as its absolute path (a relative
    one would name another file, or none, when the run is resumed from another folder)."""
    return str(Path(name_or_path).absolute()) if _is_file_name(name_or_path) else str(name_or_path)


def load_scenario(name_or_path: str | Path) -> Scenario:
    path = Path(name_or_path)
    if not _is_file_name(name_or_path):
        path = data_dir() / "scenarios" / f"{name_or_path}.yaml"
        if not path.exists():
            known = ", ".join(require_scenarios())
            raise ConfigError(f"{shown_path(path)}: no scenario named {str(name_or_path)!r}; known: {known}")
    elif not str(path).isprintable():  # bytes that are not UTF-8 come as surrogates, which are not printable
        # A run records its scenario by name, as UTF-8 text: a store refused this one only after --db made its file.
        raise ConfigError(f"{shown_path(path)}: the file name is not UTF-8 or holds a control character; "
                          "rename the file")
    scenario: Scenario = validate_file(Scenario, path)
    contracts = data_dir() / "contracts"
    if not (contracts / f"{scenario.contract}.yaml").is_file():
        # Said here, naming the scenario's field, not later as a missing file the user never named.
        known = ", ".join(sorted(p.stem for p in contracts.glob("*.yaml")))
        raise ConfigError(f"{shown_path(path)}: field contract: no contract named {scenario.contract!r} in "
                          f"{contracts}; known: {known}")
    return scenario


def list_scenarios() -> list[str]:
    """Every shipped scenario id, sorted (the seed's table order lives in ``experiments``)."""
    folder = data_dir() / "scenarios"
    return sorted(p.stem for p in folder.glob("*.yaml"))


def require_scenarios() -> list[str]:
    """:func:`list_scenarios`, or a ConfigError naming the folder looked in when it holds none."""
    names = list_scenarios()
    if not names:
        source = f"HARNESS_LAB_DATA={os.environ['HARNESS_LAB_DATA']}" if os.environ.get("HARNESS_LAB_DATA") else \
            "the package's data folder; set HARNESS_LAB_DATA to another"
        raise ConfigError(f"{data_dir() / 'scenarios'}: no scenario files (*.yaml) here (data from {source})")
    return names
