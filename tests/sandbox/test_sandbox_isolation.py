"""Isolation can be required and its absence is visible (issue 17, item 4).

``isolation="required"`` (policy, ``Run``, contract ``sandbox.isolation``, CLI ``--isolation``) means a
bwrap or unshare namespace, else a one-line refusal before the run's first step; a run keeps the choice
on resume (strengthened, never weakened); commands run with none print one CLI warning and leave one note.
The machine without bwrap and unshare is played by ``hide_wrappers`` (``shutil.which`` finds neither).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sbhelpers import hide_wrappers, isolation_or_skip

from harness_lab import Run, cli
from harness_lab.cli import main
from harness_lab.contract import ControlContract, load_contract
from harness_lab.errors import ConfigError, SandboxEnvironmentError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.sandbox import Quotas, Sandbox, SandboxPolicy
from harness_lab.sandbox.command import check_isolation
from harness_lab.sandbox.policy import isolation_at_least
from harness_lab.store import SQLiteStore

COMMANDS = [{"kind": "run_command", "argv": ["true"], "timeout": 10},
            {"kind": "run_command", "argv": ["echo", "two"], "timeout": 10},
            {"kind": "think", "thought": "done"}]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI warns once per process: each test is a process of its own here."""
    monkeypatch.setattr(cli, "_warned", [])


@pytest.fixture
def no_namespaces(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from hide_wrappers(monkeypatch, "bwrap", "unshare")


def _contract(isolation: str = "auto", decisions: int = 3) -> ControlContract:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=decisions)
    return ControlContract.model_validate({**contract.model_dump(), "sandbox": {"isolation": isolation}})


def _run(tmp_path: Path, contract: ControlContract | None = None, **kw: object) -> Run:
    return Run(contract=contract or _contract(), proposer=ScriptedProposer(COMMANDS),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws", **kw)  # type: ignore[arg-type]


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "commands.yaml"
    path.write_text("id: commands\ntitle: two commands\nlabels: {acceptable_reports: []}\nthen: finish\nactions:\n"
                    "- {kind: run_command, argv: ['true'], timeout: 10}\n"
                    "- {kind: run_command, argv: [echo, two], timeout: 10}\n")
    return path


def test_the_shipped_contracts_keep_their_versions() -> None:
    # The canonical JSON feeds receipts, golden traces and notebook outputs: a default sandbox section is not in it.
    versions = {name: load_contract(data_dir() / "contracts" / f"{name}.yaml").version
                for name in ("report_task", "report_task_tight_tokens")}
    assert versions == {"report_task": "c48f00d8a2c10223c4f071fe2bf915655f1945897965355af7ee618b8daaa8a0",
                        "report_task_tight_tokens": "6f726fcfee072f72d1ee4e5beea5177086136cbd896bcf55668bbe2595ead4e2"}
    demanding = _contract("required")
    assert demanding.version != _contract().version  # a demand is part of the contract's version
    assert ControlContract.model_validate(demanding.model_dump()).sandbox.isolation == "required"


def test_a_contract_cannot_demand_no_isolation() -> None:
    with pytest.raises(ValueError, match="sandbox.isolation"):
        _contract("none")


@pytest.mark.parametrize(("floor", "asked", "got"), [
    ("auto", "auto", "auto"), ("auto", "none", "none"), ("auto", "required", "required"),
    ("none", "auto", "none"), ("none", "required", "required"), ("required", "auto", "required"),
    ("required", "unshare", "unshare"), ("bwrap", "auto", "bwrap"), ("bwrap", "bwrap", "bwrap"),
    ("required", "none", None), ("bwrap", "unshare", None), ("bwrap", "required", None), ("unshare", "none", None),
])
def test_isolation_may_be_strengthened_never_weakened(floor: str, asked: str, got: str | None) -> None:
    if got is None:
        with pytest.raises(ValueError, match="would weaken"):
            isolation_at_least(floor, asked)  # type: ignore[arg-type]
    else:
        assert isolation_at_least(floor, asked) == got  # type: ignore[arg-type]


def test_required_isolation_is_met_here_by_a_namespace(tmp_path: Path) -> None:
    isolation_or_skip()
    (tmp_path / "ws").mkdir()
    with Sandbox(tmp_path / "ws", policy=SandboxPolicy(isolation="required"), snapshot_dir=tmp_path / "s") as sb:
        assert sb.capabilities["isolation"] in ("bwrap", "unshare")
        result = sb.call("run_command", argv=["true"])
        assert result.ok and result.data["isolation"] == sb.capabilities["isolation"]


def test_required_isolation_without_a_namespace_refuses_in_one_line(tmp_path: Path, no_namespaces: None) -> None:
    (tmp_path / "ws").mkdir()
    with pytest.raises(SandboxEnvironmentError) as caught:
        Sandbox(tmp_path / "ws", policy=SandboxPolicy(isolation="required"), snapshot_dir=tmp_path / "s")
    message = str(caught.value)
    assert "\n" not in message and "'required'" in message and "bubblewrap not installed" in message
    assert "unshare cannot create" in message
    with Sandbox(tmp_path / "ws", policy=SandboxPolicy(isolation="auto"), snapshot_dir=tmp_path / "s2") as sb:
        assert sb.capabilities["isolation"] == "none"  # auto still falls back (visibly: see below)


@pytest.mark.parametrize("how", ["run", "contract"])
def test_a_run_that_requires_isolation_refuses_before_anything_is_made(tmp_path: Path, no_namespaces: None,
                                                                     how: str) -> None:
    with pytest.raises(SandboxEnvironmentError, match="isolation 'required'"):
        if how == "run":
            _run(tmp_path, isolation="required", store=SQLiteStore(tmp_path / "runs.sqlite"))
        else:
            _run(tmp_path, contract=_contract("required"))
    assert not (tmp_path / "ws").exists()


def test_a_run_cannot_weaken_its_contracts_demand(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'none' would weaken the isolation 'required'"):
        _run(tmp_path, contract=_contract("required"), isolation="none")
    assert not (tmp_path / "ws").exists()


def test_the_cli_refuses_missing_isolation_with_exit_2_and_no_store(tmp_path: Path, no_namespaces: None,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.sqlite"
    assert main(["run", str(_scenario(tmp_path)), "--isolation", "required", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness-lab: error: isolation 'required'"), err
    assert not db.exists()
    assert main(["run", str(_scenario(tmp_path)), "--isolation", "unshare"]) == 2
    assert "isolation 'unshare'" in capsys.readouterr().err


def test_running_without_isolation_warns_once_and_notes_it_once(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.sqlite"
    assert main(["run", str(_scenario(tmp_path)), "--isolation", "none", "--db", str(db), "--json"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "without isolation (chosen)" in warnings[0], err
    assert main(["trace", "--db", str(db), "--run-id", "commands", "--json"]) == 0
    trace = capsys.readouterr().out
    assert trace.count('"topic":"no_isolation"') == 1, trace


def test_an_isolated_run_neither_warns_nor_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    isolation_or_skip()
    db = tmp_path / "runs.sqlite"
    assert main(["run", str(_scenario(tmp_path)), "--isolation", "required", "--db", str(db)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["trace", "--db", str(db), "--run-id", "commands", "--json"]) == 0
    assert "no_isolation" not in capsys.readouterr().out


def test_auto_without_a_namespace_warns_why(tmp_path: Path, no_namespaces: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(_scenario(tmp_path))]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["harness-lab: warning: commands run without isolation (no bwrap or unshare namespace works "
                        "here): they share the host network and see host processes; --isolation required refuses "
                        "instead"]


def test_a_resumed_run_keeps_its_isolation_and_may_only_strengthen_it(tmp_path: Path) -> None:
    isolation_or_skip()
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = _run(tmp_path, isolation="required", store=store, run_id="R")
    run.step()
    run.close()
    assert store.run_info("R").spec["isolation"] == "required"
    with pytest.raises(ConfigError, match="'none' would weaken the isolation 'required'"):
        Run.resume(store, "R", isolation="none")
    kept = Run.resume(store, "R")
    assert kept.isolation == "required" and kept.sandbox.capabilities["isolation"] in ("bwrap", "unshare")
    kept.close()
    found = kept.sandbox.capabilities["isolation"]
    narrowed = Run.resume(store, "R", isolation=found)
    assert narrowed.isolation == found
    narrowed.close()
    store.close()


def test_a_run_that_chose_nothing_stores_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = _run(tmp_path, store=store, run_id="A")
    run.step()
    run.close()
    assert "isolation" not in store.run_info("A").spec  # specs written before the field existed look the same
    resumed = Run.resume(store, "A")
    assert resumed.isolation == "auto"
    resumed.close()
    store.close()



def _live_with(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as st:
                            if st.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                                found.append(pid)
            except (OSError, IndexError):
                continue
    return found


@pytest.mark.parametrize("isolation", ["auto", "unshare", "none"])  # auto: bwrap where it works
def test_the_same_limits_hold_in_every_available_mode(tmp_path: Path, isolation: str) -> None:
    """A representative subset of the sandbox's promises, in each mode this machine offers: exit status,
    workspace writes, the output cap, the CPU limit, a timeout that leaves nothing running."""
    if isolation != "auto":
        try:
            check_isolation(isolation, os.geteuid())
        except SandboxEnvironmentError as exc:
            pytest.skip(str(exc))
    (ws := tmp_path / "ws").mkdir()
    policy = SandboxPolicy(isolation=isolation, quotas=Quotas(cpu_seconds=1, output_bytes=64 * 1024))
    with Sandbox(ws, policy=policy, snapshot_dir=tmp_path / "snaps") as sb:
        done = sb.call("run_command", argv=["sh", "-c", "echo made > out.txt; echo hi; exit 3"])
        assert done.status == "error" and done.exit_status == 3 and (done.content or "").strip() == "hi"
        assert (ws / "out.txt").read_text() == "made\n"
        capped = sb.call("run_command", argv=["yes", "spam"], timeout=20)
        assert capped.data.get("truncated") is True and len(capped.content or "") == 64 * 1024
        spin = sb.call("run_command", argv=["sh", "-c", "while :; do :; done"], timeout=30)
        assert spin.status == "error" and spin.data.get("signal") in ("SIGXCPU", "SIGKILL"), spin
        marker = f"hl-mode-{isolation}-{os.getpid()}"
        late = sb.call("run_command", argv=["sh", "-c", f"sleep 30 {marker} 2>/dev/null & sleep 30"], timeout=1)
        assert late.status == "timeout"
        # what the command started is gone too (reaped at once with a pid namespace; polled briefly without)
        for _ in range(50):
            if not _live_with(marker):
                break
            time.sleep(0.02)
        assert _live_with(marker) == []


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from hide_wrappers(monkeypatch, "bwrap")


def test_without_bubblewrap_auto_falls_back_to_unshare_and_names_the_cpu_signal(tmp_path: Path,
                                                                                no_bwrap: None) -> None:
    """Debian 12 without bubblewrap: util-linux 2.38's unshare turned a CPU-limit kill into exit 1."""
    isolation_or_skip("unshare")
    (ws := tmp_path / "ws").mkdir()
    policy = SandboxPolicy(isolation="required", quotas=Quotas(cpu_seconds=1))
    with Sandbox(ws, policy=policy, snapshot_dir=tmp_path / "snaps") as sb:
        assert sb.capabilities["isolation"] == "unshare"
        spin = sb.call("run_command", argv=["sh", "-c", "while :; do :; done"], timeout=30)
        assert spin.data["isolation"] == "unshare" and spin.data.get("signal") in ("SIGXCPU", "SIGKILL"), spin


def test_the_cli_refuses_to_weaken_a_stored_runs_isolation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    isolation_or_skip()
    db = tmp_path / "runs.sqlite"
    store = SQLiteStore(db)
    run = Run(contract=_contract(decisions=3), proposer=ScriptedProposer(COMMANDS),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws",
              isolation="required", store=store, run_id="R")
    run.step()
    run.close()
    store.close()
    capsys.readouterr()
    assert main(["resume", "--db", str(db), "--run-id", "R", "--isolation", "none"]) == 2
    err = capsys.readouterr().err
    assert err == "harness-lab: error: run 'R': isolation 'none' would weaken the isolation 'required' this run must keep\n"
