"""Tool-call arguments that start with a UTF-8 byte order mark (some servers' JSON encoders write one)
are still JSON: the proposer reads the object behind the mark instead of refusing it as "not JSON"."""

from __future__ import annotations

import json

from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer


class _View:
    def render(self) -> str:
        return "context"


def _reply(arguments: str) -> bytes:
    call = {"id": "c1", "type": "function", "function": {"name": "think", "arguments": arguments}}
    return json.dumps({"choices": [{"message": {"role": "assistant", "tool_calls": [call]},
                                    "finish_reason": "tool_calls"}]}).encode()


def test_arguments_behind_a_byte_order_mark_are_read() -> None:
    payload = _reply('\ufeff{"thought": "plan"}')
    proposer = OpenAICompatProposer(OpenAICompatConfig(base_url="http://127.0.0.1:9", model="m"),
                                    transport=lambda url, body, headers, timeout: (200, payload))
    assert proposer.propose(_View()).raw == {"thought": "plan", "kind": "think"}
