"""Defects found by the sandbox review: each test failed before its fix."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from harness_lab.sandbox import Sandbox


def test_list_dir_names_that_are_not_utf8_or_hold_newlines_stay_one_serialisable_line_each(
        tmp_path: Path, make_sandbox: Callable[..., Sandbox]) -> None:
    # A command can create any byte string as a name; the listing goes into the context and the
    # checkpoint as JSON text, so it must be valid UTF-8, and one name must not read as two.
    ws = tmp_path / "ws"
    ws.mkdir()
    for raw in (b"a\xffb", b"new\nline", b"plain.txt"):
        fd = os.open(os.path.join(os.fsencode(ws), raw), os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)
    result = make_sandbox(ws).call("list_dir", path=".")
    assert result.ok
    result.model_dump_json()  # raised UnicodeEncodeError (lone surrogate) before the fix
    (result.content or "").encode("utf-8")
    lines = (result.content or "").splitlines()
    assert len([ln for ln in lines if not ln.startswith("(")]) == 3, lines
    assert "plain.txt" in lines
    assert r"a\xffb" in result.content and r"new\nline" in result.content
    names = {str(e["name"]) for e in result.data["entries"]}
    assert "plain.txt" in names and all(n.isprintable() for n in names)

