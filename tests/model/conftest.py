"""The real local model server for tests marked ``model``: started once per session from the cache that
``make model`` builds, with a random API key, stopped at the end.

Without the cache the tests are skipped with a reason that says how to build it; with
HARNESS_LAB_REQUIRE_MODEL=1 (set by .ci/run) they fail instead. Each model run appends its figures
(steps, latency, tokens, final state) to ``test-artifacts/real-model.json`` at the end of the session."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from modelhelpers import RecordingTransport

from harness_lab.proposers import local_model

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
# Resolved at import, before the per-test scratch HOME (tests/conftest.py) points ~ elsewhere.
CACHE = local_model.default_cache_dir()


@pytest.fixture(scope="session")
def model_server() -> Iterator[local_model.LocalModelServer]:
    state = local_model.status(CACHE)
    if not state.ready:
        message = f"no local model server: {state.summary()}"
        if os.environ.get("HARNESS_LAB_REQUIRE_MODEL") == "1":
            pytest.fail(message + " (HARNESS_LAB_REQUIRE_MODEL=1: this run must not skip it)")
        pytest.skip(message)
    key = "hl-test-" + secrets.token_urlsafe(24)
    with local_model.serve(api_key=key, cache_dir=CACHE) as server:
        yield server


@pytest.fixture
def recorder() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture(scope="session")
def model_figures() -> Iterator[list[dict[str, Any]]]:
    figures: list[dict[str, Any]] = []
    yield figures
    if figures:
        ARTIFACTS.mkdir(exist_ok=True)
        calls = [s for f in figures for s in f.get("call_seconds", [])]
        tokens = [t for f in figures for t in f.get("call_tokens", [])]
        summary = {
            "runs": figures,
            "calls": len(calls),
            "seconds_per_call_mean": round(sum(calls) / len(calls), 3) if calls else None,
            "seconds_per_call_max": round(max(calls), 3) if calls else None,
            "tokens_per_call_mean": round(sum(tokens) / len(tokens), 1) if tokens else None,
            "final_states": sorted(f.get("final") or f"{f['final_state']} {f['stop_reason']}" for f in figures),
        }
        (ARTIFACTS / "real-model.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
