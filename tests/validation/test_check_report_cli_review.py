"""Review pass on `harness-lab check-report`: what it says about its own arguments."""

from __future__ import annotations

import pytest

from harness_lab.cli import main
from harness_lab.paths import data_dir

REPORT = str(data_dir() / "reports" / "conforming.md")


@pytest.mark.parametrize(("read", "hint"), [("harness-boundry", "did you mean harness-boundary?"),
                                            ("nothing-like-it", "known: ")])
def test_a_read_id_that_names_no_evidence_note_is_a_usage_error(read: str, hint: str, capsys) -> None:
    # It was taken silently: the report's correct [E:harness-boundary] was then 'not read in this run'.
    assert main(["check-report", REPORT, "--read", read, "--read", "acceptance-snapshot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--read: no evidence note {read!r}" in err and hint in err
