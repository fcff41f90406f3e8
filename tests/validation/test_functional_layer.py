"""The functional layer and ``verification.checks``: layers named in a contract act at finish, each check
runs in the run's sandbox, the receipt binds its outcome and the tree, bad input is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from harness_lab import Run
from harness_lab.contract import ControlContract, Verification, canonical_json, load_contract
from harness_lab.errors import ConfigError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.faults import Fault
from harness_lab.faults.base import FaultHook, FaultTarget
from harness_lab.paths import data_dir
from harness_lab.proposers.scripted import ScriptedProposer
from harness_lab.records.events import Note
from harness_lab.sandbox import Quotas, Sandbox, SandboxPolicy
from harness_lab.scenarios import copy_repository
from harness_lab.validation import run_functional_layer
from harness_lab.validation.semantic import ClaimFinding, SemanticVerdict

CODING = data_dir() / "contracts" / "coding_task.yaml"
REPO = data_dir() / "coding" / "stats"


def _contract(tmp_path: Path, verification: dict[str, Any]) -> ControlContract:
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "goal": {"text": "g"}, "verification": verification}))
    return load_contract(path)


def _coding_run(tmp_path: Path, actions: list[dict[str, Any]], contract: ControlContract | None = None) -> Run:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    copy_repository(REPO, workspace)
    return Run(contract=contract or load_contract(CODING), proposer=ScriptedProposer(actions, then="finish"),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=workspace)


# -- verification.checks ------------------------------------------------------------------------

def test_an_unknown_layer_is_one_line_with_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _contract(tmp_path, {"checks": ["format", "funtional"]})
    message = str(info.value)
    assert "\n" not in message and "'funtional' is no verification layer" in message
    assert "did you mean 'functional'?" in message and "verification.checks" in message


@pytest.mark.parametrize(("check", "says"), [
    ({"name": "tests", "command": "python3 -m unittest"}, "must be a list of arguments"),
    ({"name": "tests", "command": ["python3"], "timeout": "30"}, "timeout"),
    ({"name": "tests", "command": []}, "command"),
    ({"name": "no spaces", "command": ["true"]}, "name"),
    ({"name": "tests", "command": ["true"], "shell": True}, "shell"),
])
def test_a_check_of_the_wrong_shape_is_one_line(tmp_path: Path, check: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as info:
        _contract(tmp_path, {"functional": [check]})
    assert "\n" not in str(info.value) and says in str(info.value) and "verification.functional" in str(info.value)


def test_report_contracts_keep_their_canonical_form() -> None:
    # The functional fields are left out while empty: the shipped report contracts' versions stand.
    for name in ("report_task", "report_task_tight_tokens"):
        contract = load_contract(data_dir() / "contracts" / f"{name}.yaml")
        dumped = contract.model_dump(mode="json")["verification"]
        assert not {"functional", "protected", "allowed_files"} & set(dumped)
        assert Verification.model_validate(dumped) == contract.verification
    coding = load_contract(CODING)
    assert [c["name"] for c in coding.model_dump(mode="json")["verification"]["functional"]] == ["tests", "held_out"]
    assert json.loads(canonical_json(coding.model_dump(mode="json"))) == coding.model_dump(mode="json")


def test_the_shipped_protected_hash_is_the_repository_s_test_file() -> None:
    import hashlib

    for path, digest in load_contract(CODING).verification.protected.items():
        assert hashlib.sha256((REPO / path).read_bytes()).hexdigest() == digest


# -- the layer at finish ------------------------------------------------------------------------

def test_a_tests_pass_claim_over_failing_tests_is_rejected_with_each_check(tmp_path: Path) -> None:
    with _coding_run(tmp_path, [{"kind": "finish", "note": "all tests pass"}]) as run:
        record = run.step()
        assert record.verdict is not None and not record.verdict.accepted
        assert record.verdict.kind == "layer_verdict" and record.verdict.layer == "functional"
        runs = {c.name: (c.status, c.exit_status) for c in record.verdict.checks}
        assert runs == {"tests": ("failed", 1), "held_out": ("failed", 1)}
        assert run.receipt is None and run.state.value == "RUNNING"
        notes = [e for e in record.events if isinstance(e, Note) and e.topic == "verification"]
        assert [n.data["layer"] for n in notes] == ["functional"] and notes[0].data["accepted"] is False


def test_the_receipt_binds_each_check_and_the_tree(tmp_path: Path) -> None:
    fixed = (REPO / "stats.py").read_text().replace(
        "    return ordered[middle]\n",
        "    if len(ordered) % 2 == 0:\n        return (ordered[middle - 1] + ordered[middle]) / 2\n"
        "    return ordered[middle]\n")
    with _coding_run(tmp_path, [{"kind": "write_file", "path": "stats.py", "content": fixed},
                                {"kind": "finish"}]) as run:
        run.run()
        receipt = run.receipt
        assert run.state.value == "REVIEW_READY" and receipt is not None
        assert (receipt.structural, receipt.functional, receipt.semantic) == ("not_run", "passed", "not_run")
        assert [(c.name, c.status, c.exit_status) for c in receipt.checks] == [("tests", "passed", 0),
                                                                              ("held_out", "passed", 0)]
        assert all(len(c.output_sha256) == 64 for c in receipt.checks)
        assert receipt.matches_tree(run.sandbox.workspace_hash())
        (run.workspace / "stats.py").write_text(fixed + "\n# later\n")
        assert not receipt.matches_tree(run.sandbox.workspace_hash(rescan=True))
        assert {"functional", "checks", "tree_sha256"} <= set(receipt.model_dump(mode="json"))


class _TouchesTree(Fault):
    """Writes a file into the workspace after the checks ran, before acceptance."""

    name: str = "touches_tree"
    hook: ClassVar[FaultHook] = "after_validate"

    def after_validate(self, run: FaultTarget) -> str:
        (run.workspace / "late.txt").write_text("written after the checks\n")
        return "wrote late.txt"


def test_a_tree_changed_after_the_checks_is_not_accepted(tmp_path: Path) -> None:
    contract = _contract(tmp_path, {"checks": ["functional"],
                                    "functional": [{"name": "ok", "command": ["true"], "timeout": 10}]})
    with _coding_run(tmp_path, [{"kind": "finish"}], contract) as run:
        run.inject(_TouchesTree(), at_step=1)
        record = run.step()
        assert run.receipt is None and record.state_after.value == "RUNNING"
        changed = [e for e in record.events if isinstance(e, Note) and e.topic == "artifact_changed"]
        assert len(changed) == 1 and len(changed[0].data["validated_tree_sha256"]) == 64


def test_a_check_that_hangs_ends_as_a_timed_out_check(tmp_path: Path) -> None:
    contract = _contract(tmp_path, {"checks": ["functional"], "functional": [
        {"name": "hangs", "command": ["python3", "-c", "import time; time.sleep(120)"], "timeout": 1}]})
    with _coding_run(tmp_path, [{"kind": "finish"}], contract) as run:
        record = run.step()
        assert record.verdict is not None and [e.code for e in record.verdict.errors] == ["check_timed_out"]
        assert "timeout" in record.verdict.errors[0].message and run.receipt is None


def test_a_check_that_floods_its_output_ends_as_a_failed_check(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    verification = Verification.model_validate({"functional": [
        {"name": "floods", "command": ["python3", "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]}]})
    with Sandbox(tmp_path / "ws", policy=SandboxPolicy(quotas=Quotas(output_bytes=1 << 16))) as sandbox:
        verdict = run_functional_layer(sandbox, verification)
    assert not verdict.accepted and [e.code for e in verdict.errors] == ["check_error"]
    assert "output exceeded" in verdict.errors[0].message
    assert len(verdict.checks[0].output_tail) <= 600


def test_protected_and_allowed_files_fail_the_layer(tmp_path: Path) -> None:
    with _coding_run(tmp_path, [{"kind": "write_file", "path": "test_stats.py", "content": "import unittest\n"},
                                {"kind": "write_file", "path": "notes.txt", "content": "debris\n"},
                                {"kind": "finish"}]) as run:
        run.run(max_steps=3)
        verdict = run.records[-1].verdict
        assert verdict is not None
        codes = [e.code for e in verdict.errors]
        assert "protected_changed" in codes and "unexpected_file" in codes
        os.unlink(run.workspace / "test_stats.py")
        later = run_functional_layer(run.sandbox, run.contract.verification)
        assert "protected_missing" in [e.code for e in later.errors]


def test_a_layer_left_out_of_checks_does_not_run(tmp_path: Path) -> None:
    contract = _contract(tmp_path, {"checks": [], "functional": [{"name": "fails", "command": ["false"]}]})
    with _coding_run(tmp_path, [{"kind": "finish"}], contract) as run:
        run.step()
        assert run.receipt is not None and run.receipt.functional == "not_run"
        assert run.stop_reason is not None and run.stop_reason.code == "finish_unvalidated"


# -- the goal layer -------------------------------------------------------------------------------

class _Reviewer:
    def __init__(self, passed: bool) -> None:
        self.passed = passed

    @property
    def name(self) -> str:
        return "stub"

    def review(self, report: bytes, evidence: Any) -> SemanticVerdict:
        finding = ClaimFinding(section="Conclusion", claim="x", cited=(), support=0.0,
                               problem="ok" if self.passed else "weak_support")
        return SemanticVerdict(reviewer=self.name, passed=self.passed, findings=(finding,))


@pytest.mark.parametrize("passed", [True, False])
def test_the_goal_layer_acts_when_a_reviewer_is_given(passed: bool) -> None:
    with Run.from_scenario("conforming_report") as run:
        run.reviewer = _Reviewer(passed)
        run.run(max_steps=4)
        finish = run.records[3]
        notes = [e for e in finish.events if isinstance(e, Note) and e.topic == "verification"]
        assert [n.data["layer"] for n in notes] == ["structural", "goal"]
        assert notes[0].data["accepted"] is True and notes[1].data["review"]["reviewer"] == "stub"
        if passed:
            assert run.receipt is not None and run.receipt.semantic == "passed" and run.receipt.structural == "passed"
        else:
            assert run.receipt is None and finish.verdict is not None and finish.verdict.layer == "goal"
            assert finish.verdict.errors[0].code == "goal_failed"


def test_a_report_run_without_reviewer_records_no_layer_notes() -> None:
    with Run.from_scenario("conforming_report") as run:
        run.run()
        assert run.receipt is not None and run.receipt.functional == "not_applicable"
        assert not [e for e in run.events if isinstance(e, Note) and e.topic == "verification"]
        assert not {"functional", "checks", "tree_sha256"} & set(run.receipt.model_dump(mode="json"))


# -- the repository copied in --------------------------------------------------------------------

def test_a_repository_with_a_symlink_out_is_refused_and_nothing_copied(tmp_path: Path) -> None:
    repo, ws = tmp_path / "repo", tmp_path / "ws"
    (repo / "pkg").mkdir(parents=True)
    ws.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    (repo / "pkg" / "secret.py").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError) as info:
        copy_repository(repo, ws)
    assert "\n" not in str(info.value) and "symbolic link" in str(info.value) and "secret.py" in str(info.value)
    assert list(ws.iterdir()) == []


def test_a_repository_copy_leaves_out_pycache_and_refuses_a_taken_name(tmp_path: Path) -> None:
    repo, ws = tmp_path / "repo", tmp_path / "ws"
    (repo / "__pycache__").mkdir(parents=True)
    (repo / "__pycache__" / "m.pyc").write_bytes(b"\0")
    (repo / "m.py").write_text("x = 1\n")
    ws.mkdir()
    assert copy_repository(repo, ws) == ["m.py"]
    (ws / "m.py").write_text("mine\n")
    with pytest.raises(Exception, match="already holds m.py"):
        copy_repository(repo, ws)
    assert (ws / "m.py").read_text() == "mine\n"



def test_a_coding_run_resumes_from_its_store_and_its_checks_pass(tmp_path: Path) -> None:
    from harness_lab.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.sqlite")
    workspace = tmp_path / "ws"
    with Run.from_scenario("coding_honest_fix", store=store, run_id="C1", workspace=workspace) as run:
        run.run(max_steps=2)  # the fix is written, the tests not yet run: "killed" here
    resumed = Run.resume(store, "C1")
    try:
        resumed.run()
        assert resumed.workspace.resolve() == workspace.resolve() and resumed.state.value == "REVIEW_READY"
        assert resumed.receipt is not None and resumed.receipt.functional == "passed"
        assert sorted(p.name for p in workspace.iterdir()) == ["README.md", "stats.py", "test_stats.py"]
    finally:
        resumed.close()
        store.close()


def test_the_dashboard_lists_the_functional_layer_s_own_checks() -> None:
    pytest.importorskip("ipywidgets", reason="the dashboard needs the lab extra")
    from harness_lab.widgets import check_rows

    with Run.from_scenario("coding_edits_tests") as run:
        run.run(max_steps=4)
        verdict = run.records[3].verdict
        assert verdict is not None
        rows = check_rows(verdict)
    assert [(name, outcome) for name, outcome, _ in rows] == [
        ("functional: tests", "pass"), ("functional: held_out", "FAIL"), ("functional: protected_changed", "FAIL")]


def test_a_report_task_with_a_check_runs_format_then_functional(tmp_path: Path) -> None:
    from harness_lab.scenarios import load_scenario

    data = yaml.safe_load((data_dir() / "contracts" / "report_task.yaml").read_text())
    data["verification"]["functional"] = [{"name": "lint", "command": ["false"], "timeout": 10}]
    path = tmp_path / "with_check.yaml"
    path.write_text(yaml.safe_dump(data))
    contract = load_contract(path)
    assert contract.version != load_contract(data_dir() / "contracts" / "report_task.yaml").version
    script = load_scenario("conforming_report").actions
    with Run(contract=contract, proposer=ScriptedProposer(script), workspace=tmp_path / "ws",
             evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence")) as run:
        run.run(max_steps=4)
        finish = run.records[3]
        notes = [e for e in finish.events if isinstance(e, Note) and e.topic == "verification"]
        assert [(n.data["layer"], n.data["accepted"]) for n in notes] == [("structural", True), ("functional", False)]
        assert finish.verdict is not None and finish.verdict.layer == "functional" and run.receipt is None


@pytest.mark.parametrize(("repository", "says"), [("nosuch", "no repository named 'nosuch'"),
                                                  ("../etc", "repository")])
def test_a_scenario_naming_a_bad_repository_is_one_line(tmp_path: Path, repository: str, says: str) -> None:
    from harness_lab.scenarios import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"id": "s", "title": "t", "contract": "coding_task", "repository": repository,
                                    "labels": {}, "actions": [{"kind": "finish"}]}))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert "\n" not in str(info.value) and says in str(info.value)
