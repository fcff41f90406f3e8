"""A real local model through the harness: per-step latency, tokens per step and how runs end.

    .venv/bin/python bench/real_model.py [--scenarios conforming_report,missing_limitations] [--seeds 3]
                                         [--temperature 1.0] [--max-tokens 160]

Starts the cached llama-server with SmolLM2-135M-Instruct (``make model`` builds it; nothing is
downloaded) on 127.0.0.1, drives each scenario's contract with ``OpenAICompatProposer`` once per seed
(temperature > 0 with a sampling seed per run: different runs; llama-server's prompt cache
means a seed does not always repeat its run), and prints, side by side, the
endpoint's time per call and the harness's own time per step (the step minus the call), the tokens the
server reported per call, and the runs' terminal states with their stop reasons. The README's real-model
figures come from this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from typing import Any

from harness_lab import Run
from harness_lab.proposers import local_model
from harness_lab.proposers.openai_compat import (
    OpenAICompatConfig,
    OpenAICompatProposer,
    Transport,
    urllib_transport,
)


class _Timed:
    """The real transport, timed: how long the endpoint took per call, and its reported usage."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.seconds: list[float] = []
        self.tokens: list[int] = []

    def __call__(self, url: str, body: bytes, headers: Any, timeout: float) -> tuple[int, bytes]:
        start = time.perf_counter()
        try:
            status, payload = self.inner(url, body, headers, timeout)
        finally:
            self.seconds.append(time.perf_counter() - start)
        try:
            self.tokens.append(int(json.loads(payload)["usage"]["total_tokens"]))
        except (ValueError, KeyError, TypeError):
            pass
        return status, payload


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", default="conforming_report,missing_limitations,endless_tool_calls")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=1.0)  # greedy decoding repeats one call
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    started = time.perf_counter()
    with local_model.serve() as server:
        print(f"server ready in {time.perf_counter() - started:.1f} s: {server.model} at 127.0.0.1")
        outcomes: Counter[str] = Counter()
        call_s: list[float] = []
        harness_s: list[float] = []
        tokens: list[int] = []
        kinds: Counter[str] = Counter()
        for scenario in args.scenarios.split(","):
            for seed in range(1, args.seeds + 1):
                timed = _Timed(urllib_transport)
                config = OpenAICompatConfig(base_url=server.base_url, model=server.model, api_key=server.api_key,
                                            temperature=args.temperature, seed=seed, max_tokens=args.max_tokens,
                                            tool_choice=local_model.TOOL_CHOICE)
                with Run.from_scenario(scenario, proposer=OpenAICompatProposer(config, transport=timed)) as run:
                    while run.step_due:
                        before = len(timed.seconds)
                        t0 = time.perf_counter()
                        record = run.step()
                        step = time.perf_counter() - t0
                        harness_s.append(step - sum(timed.seconds[before:]))
                        kinds[record.decision.verdict] += 1
                    stop = run.stop_reason.code if run.stop_reason else "-"
                    outcomes[f"{run.state.value} {stop}"] += 1
                    call_s.extend(timed.seconds)
                    tokens.extend(timed.tokens)
                    print(f"  {scenario} seed {seed}: {run.state.value} {stop} after {run.step_no} steps, "
                          f"{run.usage.tokens} tokens, {run.usage.tool_calls} tool calls")
    runs = sum(outcomes.values())
    print(f"runs: {runs}; calls: {len(call_s)}")
    print(f"endpoint per call: median {statistics.median(call_s):.2f} s, p90 {_pct(call_s, 0.9):.2f} s")
    print(f"harness per step (step minus the call): median {statistics.median(harness_s) * 1e3:.2f} ms, "
          f"p90 {_pct(harness_s, 0.9) * 1e3:.2f} ms")
    if tokens:
        print(f"tokens per call (server's usage): median {statistics.median(tokens):.0f}, "
              f"min {min(tokens)}, max {max(tokens)}")
    else:  # every call failed (a server too slow for the deadline, say): the outcomes say so
        print("tokens per call (server's usage): none reported")
    print("decisions: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))
    print("outcomes: " + ", ".join(f"{k} x{v}" for k, v in outcomes.most_common()))


if __name__ == "__main__":
    main()
