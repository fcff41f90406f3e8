"""Fixtures for the sandbox tests: a workspace with an outside world around it to attack."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import PY, RESOLUTIONS, build_world, isolation_or_skip

from harness_lab.sandbox import Sandbox, SandboxPolicy


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    return build_world(tmp_path)


@pytest.fixture(params=RESOLUTIONS)
def resolution(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_sandbox(tmp_path: Path) -> Iterator[Callable[..., Sandbox]]:
    made: list[Sandbox] = []

    def make(root: Path, **policy: Any) -> Sandbox:
        snaps = tmp_path / f"snaps-{len(made)}"
        sb = Sandbox(root, policy=SandboxPolicy(**policy), snapshot_dir=snaps)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()


@pytest.fixture(params=["bwrap", "unshare"])
def iso(request: pytest.FixtureRequest) -> str:
    """Both wrappers (CI has bubblewrap, and unshare is the fallback when it is missing), with the system
    interpreter the tests' commands run."""
    name = str(request.param)
    isolation_or_skip(name)
    if not os.access(PY, os.X_OK):
        pytest.skip(f"needs {PY} (apt-get install python3)")
    return name


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d
