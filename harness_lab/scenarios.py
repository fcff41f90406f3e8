"""Scenario files: a scripted action list plus fixed labels, in two families (:data:`FAMILIES`).

``report`` (``data/scenarios/<id>.yaml``): seed 004's research-report task. ``coding``
(``data/coding_scenarios/<id>.yaml``, kept in a folder of their own so that the report family's "all
scenarios" stays the ten-scenario set every table and study was measured on): a small repository from
``data/coding/<repository>/`` is copied into the run's workspace at start (:func:`copy_repository`) and
the agent reads, edits and runs commands there.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._files import shown_path, validate_file
from .errors import ConfigError, WorkspaceError
from .paths import data_dir

__all__ = ["FAMILIES", "Scenario", "copy_repository", "list_scenarios", "load_scenario", "require_scenarios",
           "scenario_ref"]

FAMILIES: dict[str, str] = {"report": "scenarios", "coding": "coding_scenarios"}
"""A scenario family -> its folder under the data folder."""


class Labels(BaseModel):
    """Ground truth fixed before any run; studies score against these, never the validator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    acceptable_reports: tuple[int, ...] = Field(
        default=(), description="indexes of the scripted write_report actions whose text is an acceptable report"
    )
    acceptable_finishes: tuple[int, ...] = Field(
        default=(), description="coding scenarios: indexes of the scripted finish actions at which the workspace "
                                "holds an acceptable fix (and nothing else)"
    )
    note: str = ""


class Scenario(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    contract: str = "report_task"
    then: Literal["repeat_last", "finish"] = "repeat_last"
    # a coding scenario's task repository: data/coding/<repository>/, copied into the workspace at start
    repository: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
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
        for i in self.labels.acceptable_finishes:
            if not 0 <= i < len(self.actions) or self.actions[i].get("kind") != "finish":
                raise ValueError(f"labels.acceptable_finishes: {i} is not a finish action "
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
        found = [data_dir() / folder / f"{name_or_path}.yaml" for folder in FAMILIES.values()]
        path = next((p for p in found if p.exists()), found[0])
        if not path.exists():
            known = ", ".join(require_scenarios())
            raise ConfigError(f"{shown_path(path)}: no scenario named {str(name_or_path)!r}; known: {known}"
                              + (f"; coding: {', '.join(coding)}" if (coding := list_scenarios("coding")) else ""))
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
    if scenario.repository is not None and not (data_dir() / "coding" / scenario.repository).is_dir():
        known = ", ".join(sorted(p.name for p in (data_dir() / "coding").glob("*") if p.is_dir()))
        raise ConfigError(f"{shown_path(path)}: field repository: no repository named {scenario.repository!r} in "
                          f"{data_dir() / 'coding'}; known: {known or 'none'}")
    return scenario


def copy_repository(source: str | Path, workspace: str | Path) -> list[str]:
    """Copy a task repository's regular files (``__pycache__`` left out) into ``workspace``; the relative
    paths copied. Everything is checked before anything is written: a symbolic link (it could point out of
    the workspace, or at a secret), any file that is not regular, or a file the workspace already holds is a
    one-line error and the workspace stays as it was."""
    src, dest = Path(source), Path(workspace)
    files: list[str] = []
    for folder, dirs, names in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        here = Path(folder)
        for name in [*dirs, *sorted(names)]:
            mode = os.lstat(here / name).st_mode
            if stat.S_ISLNK(mode):
                raise ConfigError(f"{shown_path(here / name)}: a symbolic link in a task repository is refused "
                                  f"(it may point out of the workspace); nothing was copied")
            if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                raise ConfigError(f"{shown_path(here / name)}: not a regular file; nothing was copied")
            if stat.S_ISREG(mode):
                files.append((here / name).relative_to(src).as_posix())
    if taken := [f for f in files if os.path.lexists(dest / f)]:
        raise WorkspaceError(f"{dest}: already holds {taken[0]}; start the task in a fresh directory")
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel, follow_symlinks=False)
    return files


def list_scenarios(family: str = "report") -> list[str]:
    """Every shipped scenario id of a family (:data:`FAMILIES`), sorted (the seed's table order lives in
    ``experiments``)."""
    if family not in FAMILIES:
        raise ConfigError(f"no scenario family {family!r}; choose from {', '.join(FAMILIES)}")
    folder = data_dir() / FAMILIES[family]
    return sorted(p.stem for p in folder.glob("*.yaml"))


def require_scenarios() -> list[str]:
    """:func:`list_scenarios`, or a ConfigError naming the folder looked in when it holds none."""
    names = list_scenarios()
    if not names:
        source = f"HARNESS_LAB_DATA={os.environ['HARNESS_LAB_DATA']}" if os.environ.get("HARNESS_LAB_DATA") else \
            "the package's data folder; set HARNESS_LAB_DATA to another"
        raise ConfigError(f"{data_dir() / 'scenarios'}: no scenario files (*.yaml) here (data from {source})")
    return names
