"""Secrets a model plausibly writes never reach the store: a quoted value (spaces, commas, non-ASCII
letters), a value inside JSON inside JSON (the checkpoint's gate fingerprints), the usual
``SECRET_KEY`` / ``aws_secret_access_key`` names, a private key cut short by a one-line description;
and what is redacted stays valid JSON."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from persisthelpers import CountingOutbox, push_run

from harness_lab.redaction import Redactor
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

