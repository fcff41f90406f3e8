"""Shared fixtures: every test gets a scratch HOME so nothing lands in ~."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _scratch_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")


@pytest.fixture
def contract():
    return load_contract(data_dir() / "contracts" / "report_task.yaml")


@pytest.fixture
def evidence():
    return EvidenceCatalogue.from_dir(data_dir() / "evidence")


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tempfile's folder pointed at an empty directory of this test: runs make their temporary workspace and
    snapshots there, so a test sees what is left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch
