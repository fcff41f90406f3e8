"""Secrets never leave the harness in any output it writes, not only its store: `run`/`resume` stdout
(`--json` or not), `trace`, and what a model endpoint echoes back of the key it was given.

A scenario writes, reads and `cat`s a file holding one secret of each class the store redacts (an AWS
access key id, a GitHub token, a PEM private key, a `password=` pair); the dashboard's half is
tests/widgets/test_labview_secrets.py. STAND-IN endpoint (not a model): a 127.0.0.1 server that echoes the
Authorization header it got, whole and cut, into its reply text, its tool-call arguments and a 500 body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonpost import JsonPostServer

from harness_lab import EvidenceCatalogue, Run
from harness_lab.cli import main
from harness_lab.contract import ControlContract
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer, urllib_transport
from harness_lab.proposers.transcript import RecordingTransport
from harness_lab.records.redaction import Redactor, SecretMask
from harness_lab.store import SQLiteStore

# Spelled in pieces so no scanner mistakes this file for a leak.
AWS = "AKIA" + "QWERTYUIOPASDFGH"
GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
PEM_BODY = "MIIEowIBAAKCAQEAz1Q2w3e4r5t6y7u8i9o0p"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\nqwertyuiopasdfgh==\n-----END RSA PRIVATE KEY-----"
PASSWORD = "hunter2-open-sesame"
SECRETS = (AWS, GITHUB, PEM_BODY, PASSWORD)
NOTES = f"aws id {AWS}\ngithub {GITHUB}\ndb password={PASSWORD}\n{PEM}\n"


def _scenario(tmp_path: Path, *, gated: bool = False) -> Path:
    actions: list[dict[str, Any]] = [
        {"kind": "write_file", "path": "notes.txt", "content": NOTES},
        {"kind": "read_file", "path": "notes.txt"},
        {"kind": "run_command", "argv": ["cat", "notes.txt"]},
    ]
    if gated:  # parks the run: its resume prints the rest
        actions.append({"kind": "push", "remote": "origin", "branch": "main"})
        actions.append({"kind": "write_file", "path": "again.txt", "content": NOTES})  # a plain step line shows it
    actions.append({"kind": "finish"})
    path = tmp_path / "leaky.yaml"
    path.write_text(yaml.safe_dump({"id": "leaky", "title": "secrets in tool output", "contract": "report_task",
                                    "then": "repeat_last", "labels": {"acceptable_reports": [], "note": ""},
                                    "actions": actions}), encoding="utf-8")
    return path


def _assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret[:8]}... reached {where}"
    assert "[REDACTED]" in text, f"{where}: nothing was redacted (did the scenario run?)"


def test_run_prints_no_tool_output_secret_with_or_without_json(tmp_path: Path, own_tmp: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    scenario = _scenario(tmp_path)
    for flags in ([], ["--json"]):
        assert main(["run", str(scenario), *flags]) == 0
        out = capsys.readouterr()
        _assert_no_secret(out.out + out.err, f"run {' '.join(flags)} stdout")
    first = json.loads(out.out.splitlines()[0])
    assert first["proposal"]["raw"]["path"] == "notes.txt"  # the rest of the record is intact


def test_run_json_prints_the_stored_trace_and_resume_prints_no_secret(tmp_path: Path, own_tmp: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db, scenario = str(tmp_path / "runs.sqlite"), _scenario(tmp_path, gated=True)
    for run_id, flags in (("R1", ["--json"]), ("R2", [])):
        assert main(["run", str(scenario), "--db", db, "--run-id", run_id, "--json"]) == 0  # parks at the push
        printed = capsys.readouterr().out.splitlines()
        _assert_no_secret("\n".join(printed), "run --db --json stdout")
        assert main(["trace", "--db", db, "--run-id", run_id, "--json"]) == 0
        # Each printed step is the row the store keeps (redacted the same way), byte for byte.
        assert printed[:-1] == capsys.readouterr().out.splitlines()
        # approved, the run writes the secrets again, then ends (EXHAUSTED: the finish has no report)
        assert main(["resume", "--db", db, "--run-id", run_id, "--gate-policy", "approve", *flags]) == 0
        out = capsys.readouterr()
        _assert_no_secret(out.out + out.err, f"resume {' '.join(flags)} output")
        assert main(["trace", "--db", db, "--run-id", run_id]) == 0
        _assert_no_secret(capsys.readouterr().out, "trace")


# -- a key the endpoint echoes -------------------------------------------------------------------------
KEY = "hlecho-7f3a9c2e51d0b6-zz"  # no secret's shape: only the proposer's mask can know it


def _pieces(key: str, size: int = 8) -> list[str]:
    return [key[i:i + size] for i in range(len(key) - size + 1)]


class Echo(JsonPostServer):
    """Answers each call with the next reply, the Authorization header it got spliced in for ``{auth}``
    (whole) and ``{cut}`` (the key's first 12 characters, as a log window cuts it)."""

    def __init__(self, replies: list[tuple[int, Any]]) -> None:
        self.replies = replies
        super().__init__(self._answer)

    def _answer(self, path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, Any]:
        auth = headers.get("Authorization", "")
        status, reply = self.replies.pop(0)
        text = json.dumps(reply).replace("{auth}", auth).replace("{cut}", auth.removeprefix("Bearer ")[:12])
        return status, json.loads(text)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}},
                       {"id": "c2", "type": "function", "function": {"name": "think",
                                                                     "arguments": '{"thought": "{auth}"}'}}]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


def test_a_key_given_in_the_config_and_echoed_back_reaches_no_record_store_trace_or_transcript(
        tmp_path: Path, contract: ControlContract, evidence: EvidenceCatalogue,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    replies: list[tuple[int, Any]] = [
        (200, {"choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "you sent {auth}; in short {cut}"}}],
               "usage": {"total_tokens": 40}}),
        (200, _call("write_file", path="echo.txt", content="header {auth} / key cut {cut}")),
        (500, {"error": {"message": "upstream refused {auth} (first part {cut})"}}),
    ]
    db = tmp_path / "s.sqlite"
    store = SQLiteStore(db)
    with Echo(replies) as server:
        recorder = RecordingTransport(urllib_transport)
        proposer = OpenAICompatProposer(OpenAICompatConfig(base_url=server.url, model="echo", api_key=KEY,
                                                           max_retries=0, timeout_s=10.0), transport=recorder)
        run = Run(contract=contract, proposer=proposer, evidence=evidence, workspace=tmp_path / "ws", run_id="echo",
                  store=store)
        records = [run.step() for _ in range(3)]
    store.close()
    assert records[0].proposal is not None and records[0].proposal.action is None  # prose: refused as data
    assert records[1].tool_result is not None and records[1].tool_result.status == "ok"
    assert records[2].decision.verdict == "unavailable"  # the 500: an endpoint failure, its note kept
    recorder.save(tmp_path / "t.json")
    assert main(["trace", "--db", str(db), "--run-id", "echo", "--json"]) == 0
    outputs = {
        "records": "\n".join(r.model_dump_json() for r in run.records),
        "events": "\n".join(e.model_dump_json() for e in run.events),
        "store": b"".join(p.read_bytes() for p in tmp_path.glob("s.sqlite*")).decode("utf-8", "replace"),
        "trace": capsys.readouterr().out,
        "transcript": (tmp_path / "t.json").read_text(encoding="utf-8"),
        "workspace file": (tmp_path / "ws" / "echo.txt").read_text(encoding="utf-8"),
    }
    run.close()
    for where, text in outputs.items():
        leaked = [p for p in _pieces(KEY) if p in text]
        assert not leaked, f"{leaked[0]!r} of the key reached the {where}"
        assert "***" in text, f"{where}: nothing masked (did the echo arrive?)"


def test_a_secret_mask_masks_the_key_whole_cut_and_escaped_and_nothing_else() -> None:
    mask = SecretMask(['ab"cdefghijk-123'])
    assert mask('x ab"cdefghijk-123 y') == "x *** y"
    assert mask('{"k": "ab\\"cdefghijk-123"}') == '{"k": "***"}'  # the JSON-escaped key
    assert mask("Bearer ab\"cdefg... and 'hijk-123'") == "Bearer ***... and '***'"
    assert mask("abcdefg hijk-12") == "abcdefg hijk-12"  # no 8-character piece: left alone
    assert mask.walk({'ab"cdefghijk-123': ["ab\"cdefghij", 7]}) == {"***": ["***", 7]}


# -- the redactor keeps JSON JSON ------------------------------------------------------------------------
_KEYS = st.sampled_from(["password", "token", "api_key", "Authorization", "secret", "access-key", "n", "text"])
_PARTS = ['"', "\\", "\n", " ", ",", ":", "=", ";", "&", "}", "]", "{", "[", "ab", "é", "password=",
          "token: ", "Bearer ", "sk-", AWS[:6], "-----BEGIN RSA PRIVATE KEY-----\n", "12345678"]
_ATOMS = st.one_of(st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False, allow_infinity=False),
                   st.lists(st.sampled_from(_PARTS), max_size=10).map("".join))
_VALUES = st.recursive(_ATOMS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.one_of(_KEYS, st.text(max_size=4)),
                                                                       inner, max_size=4)), max_leaves=10)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_VALUES, st.integers(0, 2))
def test_redacted_json_stays_json_at_any_depth(value: Any, depth: int) -> None:
    # A bare number, true, false or null after a secret-named key ('{"password": -10}') became a bare
    # [REDACTED]: a stored row (or a printed --json line) no JSON reader could read back.
    text = json.dumps(value)
    for _ in range(depth):  # JSON in JSON, as a checkpoint holds the gates' fingerprints
        text = json.dumps({"inner": text})
    json.loads(Redactor(["secrets"])(text))
