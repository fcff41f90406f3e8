"""Defects from the study/proposer review: each test failed before its fix."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from harness_lab.cli import main
from harness_lab.context import ContextView
from harness_lab.experiments import run_study
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer


def test_max_tool_calls_floor_is_the_contracts_and_the_message_says_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0 tool calls is a budget a contract file may state (a finish is not a tool call): it runs.
    out = tmp_path / "zero"
    assert main(["study", "--groups", "base", "--scenarios", "conforming_report", "--seeds", "1", "--no-plots",
                 "--quiet", "--max-tool-calls", "0", "--output", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["budget"]["max_tool_calls"] == 0
    capsys.readouterr()
    # Below it, the message names the flag and its real floor (it said "must be positive" and took 0).
    never = tmp_path / "never"
    assert main(["study", "--seeds", "1", "--no-plots", "--quiet", "--max-tool-calls", "-1",
                 "--output", str(never)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-tool-calls: must be >= 0, got -1" in err
    assert not never.exists()


class _NoRunExecutor(Executor):
    """Fails the test if anything is submitted: the argument check must come before any run."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        raise AssertionError("a run was submitted before the noise was checked")


@pytest.mark.parametrize("noise", [1.5, -0.1])
def test_run_study_checks_noise_before_any_run(noise: float) -> None:
    with pytest.raises(ValueError, match=rf"^noise must lie in \[0, 1\], got {noise}$"):
        run_study(["base"], ["conforming_report"], 1, noise=noise, executor=_NoRunExecutor(), progress=False)


def test_the_study_table_has_the_blocked_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    assert main(["study", "--groups", "repair", "--scenarios", "seed", "--seeds", "2", "--no-plots", "--quiet",
                 "--output", str(out)]) == 0
    blocked = json.loads((out / "results.json").read_text())["summaries"][0]["blocked"]
    assert blocked > 0  # the seed scenarios include a forbidden push and repair escalations
    header, _, row = (out / "table.md").read_text(encoding="utf-8").splitlines()[:3]
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")],
                     strict=True))
    assert cells["blocked"] == str(blocked)
    assert "- blocked: runs that ended BLOCKED" in (out / "table.md").read_text(encoding="utf-8")


def _reply(message: dict[str, Any]) -> bytes:
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}],
                       "usage": {"total_tokens": 7}}).encode()


def test_a_base_url_with_a_trailing_slash_is_normalized_in_the_config() -> None:
    config = OpenAICompatConfig(base_url="http://127.0.0.1:11434/v1/", model="m")
    assert config.base_url == "http://127.0.0.1:11434/v1"
    urls: list[str] = []

    def transport(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        urls.append(url)
        return 200, _reply({"role": "assistant", "content": None,
                            "tool_calls": [{"function": {"name": "finish", "arguments": "{}"}}]})

    OpenAICompatProposer(config, transport=transport).propose(ContextView((), 0, 100))
    assert urls == ["http://127.0.0.1:11434/v1/chat/completions"]


def test_content_given_as_a_list_of_parts_is_its_text() -> None:
    proposer = OpenAICompatProposer(OpenAICompatConfig(base_url="http://127.0.0.1:1/v1", model="m"))
    out = proposer._parse(_reply({"role": "assistant", "content": [
        {"type": "text", "text": "I will read the note "}, {"type": "text", "text": "first."}]}))
    assert out.raw == "I will read the note first."
    assert out.tokens == 7
