"""A user's own scenario file, run and resumed: bad fields are one line naming file, field and value,
and nothing is made before they are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.errors import ConfigError
from harness_lab.scenarios import load_scenario

_GATED = ("id: {id}\ntitle: a push behind the human gate\nlabels: {{acceptable_reports: []}}\n"
          "actions:\n  - {{kind: read_evidence, id: harness-boundary}}\n  - {{kind: push, branch: main}}\n"
          "  - {{kind: list_dir, path: .}}\n")


@pytest.mark.parametrize("bad_id", ["''", "'  '", '"a\\tb"'])
def test_a_blank_scenario_id_names_file_and_field_and_makes_no_store(tmp_path: Path, capsys, bad_id: str) -> None:
    # It was refused only by the checkpointer, as "run id '': ..." naming no file, after --db made the store.
    path = tmp_path / "mine.yaml"
    path.write_text(_GATED.format(id=bad_id), encoding="utf-8")
    db = tmp_path / "runs.sqlite"
    assert main(["run", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: field id: " in err and "empty, blank or holds a control" in err
    assert not db.exists()


def test_actions_that_are_not_mappings_name_the_action_and_its_value(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("id: mine\ntitle: t\nlabels: {}\nactions:\n  - {kind: finish}\n  - read_evidence\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.yaml: field actions: .*action 1 is 'read_evidence', not a mapping"):
        load_scenario(path)


def test_an_upper_case_suffix_is_a_file_not_an_unknown_shipped_id(tmp_path: Path) -> None:
    path = tmp_path / "Mine.YAML"
    path.write_text(_GATED.format(id="mine"), encoding="utf-8")
    assert load_scenario(path).id == "mine"


def test_a_run_of_a_relative_scenario_path_resumes_from_another_folder(tmp_path: Path, monkeypatch,
                                                                        capsys) -> None:
    # The run recorded "sub/mine.yaml" as given; resume from elsewhere said "sub/mine.yaml: file not found".
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.yaml").write_text(_GATED.format(id="mine"), encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    db = str(tmp_path / "runs.sqlite")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "sub/mine.yaml", "--db", db, "--run-id", "M"]) == 0
    assert "waiting for a human: push" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["resume", "--db", db, "--run-id", "M", "--gate-policy", "approve"]) == 0
    out = capsys.readouterr().out
    assert "push" in out and "approved" in out
