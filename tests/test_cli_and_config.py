"""The command line and bad-input handling: one line naming the file, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness_lab import Run
from harness_lab.cli import main
from harness_lab.contract import load_contract
from harness_lab.errors import ConfigError
from harness_lab.paths import data_dir
from harness_lab.scenarios import load_scenario

GOOD = (data_dir() / "reports" / "conforming.md").read_text(encoding="utf-8")


def test_contract_version_is_sha256_of_canonical_form(contract) -> None:
    assert len(contract.version) == 64
    assert contract.with_budget(max_decisions=9).version != contract.version
    assert load_contract(Path(__file__).parents[1] / "data/contracts/report_task.yaml").version == contract.version


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("name: x\n", "field goal: Field required"),
        ("name: [unclosed\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
        ("name: x\ngoal: {text: g}\nstop: {budget: {max_decisions: 0}}\n", "field stop.budget.max_decisions"),
    ],
)
def test_malformed_contract_is_one_line_naming_the_file(tmp_path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_contract(path)
    message = str(info.value)
    assert str(path) in message and fragment in message and "\n" not in message


def test_missing_scenario_names_the_file_and_known_ids() -> None:
    with pytest.raises(ConfigError, match="no scenario named 'nope'.*conforming_report"):
        load_scenario("nope")


def test_malformed_scenario_file(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("id: s\ntitle: t\nlabels: {acceptable_reports: []}\nactions: []\n")
    with pytest.raises(ConfigError, match=r"s\.yaml: field actions"):
        load_scenario(path)


def _check(tmp_path: Path, text: str, *read: str, capsys) -> tuple[int, dict]:
    report = tmp_path / "r.md"
    report.write_text(text)
    args = ["check-report", str(report)] + [a for r in read for a in ("--read", r)]
    code = main(args)
    return code, json.loads(capsys.readouterr().out)


def test_check_report_accepts_and_rejects(tmp_path, capsys) -> None:
    code, out = _check(tmp_path, GOOD, "harness-boundary", "acceptance-snapshot", capsys=capsys)
    assert code == 0 and out == {"accepted": True, "errors": []}
    code, out = _check(tmp_path, GOOD, "harness-boundary", capsys=capsys)
    assert code == 1 and out["accepted"] is False
    assert {e["code"] for e in out["errors"]} == {"citation_not_read", "too_few_citations"}


def test_check_report_custom_evidence_dir(tmp_path, capsys) -> None:
    ev = tmp_path / "ev"
    ev.mkdir()
    for name in ("harness-boundary", "acceptance-snapshot"):
        (ev / f"{name}.md").write_text("note")
    report = tmp_path / "r.md"
    report.write_text(GOOD)
    assert main(["check-report", str(report), "--read", "harness-boundary", "--read", "acceptance-snapshot",
                 "--evidence", str(ev)]) == 0
    capsys.readouterr()
    (ev / "acceptance-snapshot.md").unlink()
    assert main(["check-report", str(report), "--read", "harness-boundary",
                 "--evidence", str(ev)]) == 1


def test_bad_usage_exits_2_with_one_line(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "harness_lab.cli", "check-report", str(tmp_path / "missing.md")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "missing.md" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "harness_lab.cli", "run", "no-such-scenario"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no-such-scenario" in proc.stderr and "Traceback" not in proc.stderr


def test_run_command_prints_steps_and_final_state(capsys) -> None:
    assert main(["run", "missing_section_then_fixed", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7
    final = json.loads(lines[-1])
    assert final["final_state"] == "REVIEW_READY" and final["receipt"]["step"] == 6
    assert main(["run", "missing_section_then_fixed", "--no-validation"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("final: REVIEW_READY")


def test_from_scenario_single_steps() -> None:
    run = Run.from_scenario("missing_section_then_fixed", validation=True)
    rec = run.step()
    assert rec.state_before.value == "CREATED" and rec.state_after.value == "RUNNING"
    assert run.pending is not None
    assert run.run().value == "REVIEW_READY"


def _gated_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "gated_push.yaml"
    path.write_text(
        "id: gated_push\ntitle: a push behind the human gate\nlabels: {acceptable_reports: []}\n"
        "actions:\n  - {kind: read_evidence, id: harness-boundary}\n  - {kind: push, branch: main}\n"
        "  - {kind: list_dir, path: .}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("policy", "state", "decided"),
    [("ask", "WAITING_FOR_HUMAN", None), ("approve", "RUNNING", True), ("reject", "BLOCKED", False)],
)
def test_run_takes_a_headless_gate_policy(tmp_path, capsys, policy: str, state: str, decided) -> None:
    scenario = _gated_scenario(tmp_path)
    assert main(["run", str(scenario), "--json", "--gate-policy", policy]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    steps, final = lines[:-1], lines[-1]
    push = steps[1]
    assert push["proposal"]["action"]["kind"] == "push"
    if decided is None:
        assert final["final_state"] == state and final["waiting_for"]["action_kind"] == "push"
        assert push["tool_result"] is None, "nothing may run before a human decides"
    else:
        humans = [e for e in push["events"] if e["kind"] == "human_decided"]
        assert [h["approved"] for h in humans] == [decided] and humans[0]["by"].startswith("policy:")
        assert (push["tool_result"] is not None) is decided
        assert push["state_after"] == state


def test_run_says_what_waits_for_a_human(tmp_path, capsys) -> None:
    assert main(["run", str(_gated_scenario(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "final: WAITING_FOR_HUMAN" in out and "waiting for a human: push" in out and "--gate-policy" in out


@pytest.mark.parametrize(("flag", "value"), [("--heartbeat", "0"), ("--heartbeat", "-1"), ("--grace", "-5")])
def test_bad_liveness_values_are_one_line_and_register_no_run(tmp_path, capsys, flag: str, value: str) -> None:
    db = tmp_path / "runs.sqlite"
    assert main(["run", "conforming_report", "--db", str(db), "--run-id", "R1", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and value in err
    # Nothing half-written: the id is still free for a corrected command.
    assert main(["run", "conforming_report", "--db", str(db), "--run-id", "R1"]) == 0


@pytest.mark.parametrize(("labels", "fragment"), [
    ("[5]", "labels.acceptable_reports: 5 is not a write_report action"),
    ("[0]", "labels.acceptable_reports: 0 is not a write_report action"),
    ("[-1]", "labels.acceptable_reports: -1 is not a write_report action"),
])
def test_labels_must_name_write_report_actions(tmp_path, labels: str, fragment: str) -> None:
    # Out of range was an IndexError in the study; a read's index made b"" (an empty report) "acceptable".
    path = tmp_path / "s.yaml"
    path.write_text(f"id: s\ntitle: t\nlabels: {{acceptable_reports: {labels}}}\n"
                    "actions: [{kind: read_evidence, id: harness-boundary}, {kind: write_report, text: hi}]\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert str(path) in str(info.value) and fragment in str(info.value) and "\n" not in str(info.value)


def test_a_scenario_naming_an_unknown_contract_says_which_file_and_field(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("id: s\ntitle: t\ncontract: report_tsak\nlabels: {}\nactions: [{kind: finish}]\n")
    with pytest.raises(ConfigError, match=rf"{path}: field contract: no contract named 'report_tsak'.*report_task"):
        load_scenario(path)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import harness_lab.cli as cli

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_faults", interrupted)
    assert main(["faults"]) == 130
    err = capsys.readouterr().err
    assert err == "harness-lab: interrupted\n"


def test_check_report_says_a_directory_is_not_a_report(tmp_path, capsys) -> None:
    assert main(["check-report", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory, not a report file" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "fragment"), [
    # A misspelt field is both "unknown" and "missing": the misspelling is the one to name.
    ("name: x\ngoall: {text: g}\n", "field goall: Extra inputs are not permitted (did you mean goal?)"),
    ("name: x\ngoal: {txet: g}\n", "field goal.txet: Extra inputs are not permitted (did you mean text?)"),
    # The YAML parser's own problem and place, not only its context line.
    ("name: x\n\tgoal: y\n", "not valid YAML: " + ("found a tab character that violates indentation" if yaml.__with_libyaml__
                                                 else "found character '\\t' that cannot start any token")
     + " (line 2, column 1)"),  # libyaml's parser when PyYAML has it, PyYAML's own otherwise
])
def test_config_errors_name_the_misspelt_field_and_the_yaml_problem(tmp_path, content: str, fragment: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_contract(path)
    assert fragment in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("argv", [["run", "conforming_report"], ["study", "--seeds", "1", "--no-plots", "--output", "x"]])
def test_a_data_folder_without_scenarios_is_named(tmp_path, monkeypatch, capsys, argv: list[str]) -> None:
    # HARNESS_LAB_DATA pointing at the wrong place read as "unknown scenario(s) 'all'; ... some of " (nothing).
    monkeypatch.setenv("HARNESS_LAB_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'data' / 'scenarios'}: no scenario files" in err
    assert "HARNESS_LAB_DATA" in err and not (tmp_path / "x").exists()


@pytest.mark.parametrize(("policy", "state", "approved"), [("approve", "RUNNING", True), ("reject", "BLOCKED", False)])
def test_resume_decides_a_stored_gate_with_a_policy(tmp_path, capsys, policy: str, state: str, approved: bool) -> None:
    # `resume` is documented as the way on "after a gate", yet it could only park again, and the hint said
    # to rerun with --gate-policy, which a stored run id refuses.
    db, scenario = str(tmp_path / "runs.sqlite"), str(_gated_scenario(tmp_path))
    assert main(["run", scenario, "--db", db, "--run-id", "G"]) == 0
    out = capsys.readouterr().out
    assert "final: WAITING_FOR_HUMAN" in out and f"harness-lab resume --db {db} --run-id G --gate-policy" in out
    assert main(["resume", "--db", db, "--run-id", "G", "--json", "--gate-policy", policy]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    decided = lines[0]
    assert decided["proposal"]["action"]["kind"] == "push" and decided["state_after"] == state
    humans = [e for e in decided["events"] if e["kind"] == "human_decided"]
    assert [(h["approved"], h["by"]) for h in humans] == [(approved, f"policy:{policy}")]
    assert (decided["tool_result"] is not None) is approved
    assert lines[-1]["final_state"] == ("BLOCKED" if not approved else lines[-1]["final_state"])
    assert "waiting_for" not in lines[-1]


@pytest.mark.parametrize("kind", ["dangling symlink", "directory"])
def test_an_unreadable_evidence_note_is_a_config_error_naming_it(tmp_path, kind: str) -> None:
    from harness_lab.evidence import EvidenceCatalogue

    (tmp_path / "fine.md").write_text("note")
    bad = tmp_path / "broken.md"
    if kind == "directory":
        bad.mkdir()
    else:
        bad.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"broken\.md: cannot read evidence note"):
        EvidenceCatalogue.from_dir(tmp_path)


def test_an_empty_run_id_is_refused_not_replaced(tmp_path, capsys) -> None:
    # `--run-id "$ID"` with ID unset stored the run under the scenario id instead, silently.
    db = tmp_path / "runs.sqlite"
    assert main(["run", "conforming_report", "--db", str(db), "--run-id", ""]) == 2
    assert "--run-id: empty" in capsys.readouterr().err and not db.exists()


@pytest.mark.parametrize("command", [["faults", "--json"], ["run", "conforming_report"]])
def test_a_reader_that_went_away_stops_the_command_quietly(command: list[str], tmp_path: Path) -> None:
    # `harness-lab faults --json | head -0`: was a BrokenPipeError traceback (twice: once more at exit).
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout fails with EPIPE, deterministically
    try:
        proc = subprocess.run([sys.executable, "-m", "harness_lab.cli", *command], stdout=write_end,
                              stderr=subprocess.PIPE, cwd=tmp_path, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == b""
