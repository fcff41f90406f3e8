"""Secrets a model plausibly writes never reach the store: a quoted value (spaces, commas, non-ASCII
letters), a value inside JSON inside JSON (the checkpoint's gate fingerprints), the usual
``SECRET_KEY`` / ``aws_secret_access_key`` names, a private key cut short by a one-line description;
and what is redacted stays valid JSON."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from persisthelpers import CountingOutbox, push_run

from harness_lab.records.redaction import Redactor, _replace
from harness_lab.store import SQLiteStore


def _stored_texts(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [json.dumps(row) for (row,) in con.execute("SELECT checkpoint FROM steps")]
    finally:
        con.close()


@pytest.mark.parametrize("content", ['password = "hunter2hunter2"', '{"api_key": "hunter2hunter2"}'])
def test_a_quoted_secret_never_reaches_the_checkpoint(tmp_path: Path, content: str) -> None:
    db = tmp_path / "s.sqlite"
    store = SQLiteStore(db)
    actions = [{"kind": "write_file", "path": "cfg.txt", "content": content}, {"kind": "think", "thought": "next"}]
    with push_run(tmp_path / "ws", store, CountingOutbox(), actions=actions) as run:
        run.step()
        run.step()
    store.close()
    checkpoints = _stored_texts(db)
    assert checkpoints and all("hunter2hunter2" not in c for c in checkpoints)
    assert b"hunter2hunter2" not in b"".join(p.read_bytes() for p in tmp_path.glob("s.sqlite*"))
    inner = [t for c in checkpoints for t in _strings(json.loads(json.loads(c))) if t.startswith('{"content"')]
    assert inner and all("[REDACTED]" in t for t in inner)  # the gates' fingerprints: JSON in JSON
    for text in inner:
        json.loads(text)  # still readable


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in _strings(item)]


@pytest.mark.parametrize(("secret", "leaked"), [
    ('password: "correct horse battery staple"', "battery"),
    ('password: "pa,ssw0rd-tail"', "ssw0rd-tail"),
    ('password = "\u00e9t\u00e9-hunter2-xyz"', "hunter2"),
    ("password=pa\u00dfw\u00f6rd-zz", "rd-zz"),
    ("SECRET_KEY=django-insecure-abc123", "insecure"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA75s...", "MIIEpAIBAAKCAQEA"),
])
def test_secrets_are_redacted_at_every_json_depth(secret: str, leaked: str) -> None:
    redactor = Redactor(["secrets"])
    once = json.dumps({"content": secret})
    twice = json.dumps({"recent": [json.dumps({"content": secret})]})
    for text in (once, twice):
        redacted = redactor(text)
        assert leaked not in redacted and "[REDACTED]" in redacted
        json.loads(redacted)  # still valid JSON
        assert not redactor.clean(text)



@pytest.mark.parametrize(("secret", "leaked"), [
    ("password=ab,cdef", "cdef"),  # an unquoted value runs past its commas
    ("password=ab,cd,ef", "ef"),
    ('password: "pa\\"ss-tail"', "ss-tail"),  # an escaped quote is inside the quoted value
    ('{"password": "pa\\"ss-tail"}', "ss-tail"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpw"),
    ('{"authorization": "Basic dXNlcjpwYXNzd29yZA=="}', "dXNlcjpw"),
])
def test_the_whole_secret_goes_and_the_row_stays_json(secret: str, leaked: str) -> None:
    redactor = Redactor(["secrets"])
    for text in (json.dumps({"content": secret, "n": 1}), json.dumps({"recent": [json.dumps({"content": secret, "n": 1})]})):
        redacted = redactor(text)
        assert leaked not in redacted and "[REDACTED]" in redacted
        row = json.loads(redacted)  # still valid JSON, its other fields kept
        inner = json.loads(row["recent"][0]) if "recent" in row else row
        assert inner["n"] == 1
        assert redactor.json(text) == redacted and not redactor.clean(text)



@pytest.mark.parametrize("header", ["Authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization: Bearer abcdefghijk",
                                    '"Authorization": "Basic dXNlcjpwYXNzd29yZA=="'])
def test_an_authorization_header_keeps_its_scheme_and_loses_its_credential(header: str) -> None:
    redactor = Redactor(["secrets"])
    redacted = redactor(json.dumps({"content": header}))
    scheme = "Basic" if "Basic" in header else "Bearer"
    assert f"{scheme} [REDACTED]" in json.loads(redacted)["content"]
    # anchored on the header's name: prose about the schemes stays
    prose = json.dumps({"content": "a basic approach: the Authorization header carries a bearer scheme"})
    assert redactor(prose) == prose and redactor.clean(prose)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='ab,"\\ }]', max_size=12), st.text(alphabet="ab,", max_size=12))
def test_a_secret_of_quotes_commas_and_backslashes_goes_whole_two_levels_deep(quoted: str, bare: str) -> None:
    """A JSON string value (quotes and backslashes escaped) and an unquoted one (commas inside) go
    whole, and what is redacted stays JSON with its other fields, one and two levels deep."""
    redactor = Redactor(["secrets"])
    for secret in (json.dumps({"password": "x" + quoted + "Zq9tail"}), "password=x" + bare + "Zq9tail"):
        once = json.dumps({"content": secret, "n": 1})
        for text in (once, json.dumps({"recent": [once], "n": 2})):
            redacted = redactor(text)
            assert "Zq9tail" not in redacted
            row = json.loads(redacted)
            assert row["n"] in (1, 2) and ("recent" not in row or json.loads(row["recent"][0])["n"] == 1)


_PIECES = ["Authorization", "AUTHORIZATION", "authorızation", ":", "=", " ", '"', '\\"', '\\\\"', "Basic ", "bearer ",
           "password", "token", "ab", ",", '",', "}", "]", "{", "[", "\\n", "7", "dXNlcjpw"]
_MEMO = Redactor(["secrets"])  # shared: later examples meet the pieces earlier ones left in the memo


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join))
def test_the_pre_check_and_the_memo_agree_with_the_full_patterns(text: str) -> None:
    """The header name and the comma-holding values are found by the quick pre-check and the memo of
    clean pieces exactly as by the full patterns (raw, and as JSON one level down)."""
    assert _MEMO._re is not None
    for t in (text, json.dumps({"content": text, "n": 1})):
        expected = _MEMO._re.sub(_replace, t)
        assert _MEMO(t) == expected and _MEMO.json(t) == expected
        assert _MEMO.clean(t) == (expected == t and _MEMO._re.search(t) is None)
