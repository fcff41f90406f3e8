"""Fixtures for the sandbox tests: a workspace with an outside world around it to attack."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sbhelpers import RESOLUTIONS, build_world

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
