"""Hostile config paths, texts and output folders: one line naming the file, exit 2, nothing half-written.

The FIFO and ``/dev/zero`` cases run the command in a child process under an address-space limit: before
the loaders opened regular files only, the first hung forever and the second grew until MemoryError.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from harness_lab._files import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, MAX_CONFIG_VALUES, load_mapping
from harness_lab.cli import main
from harness_lab.contract import load_contract
from harness_lab.errors import ConfigError
from harness_lab.paths import data_dir
from harness_lab.scenarios import load_scenario
from harness_lab.validation import MAX_REPORT_BYTES

SCENARIO = data_dir() / "scenarios" / "conforming_report.yaml"
CONTRACT = data_dir() / "contracts" / "report_task.yaml"
REPORT = data_dir() / "reports" / "conforming.md"


def _hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero_link":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":  # valid YAML, one byte past the cap: it used to be parsed whole
        path.write_text("title: " + "x" * (MAX_CONFIG_BYTES - 7) + "\n")
    return path


def _limit_memory() -> None:  # in the child: a blow-up is a MemoryError, not the host swapping
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The timeout only stops a hang from hanging the suite; the assertions are on the answer.
    return subprocess.run([sys.executable, "-m", "harness_lab.cli", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120, preexec_fn=_limit_memory)


@pytest.mark.parametrize(("kind", "says"), [("fifo", "is a FIFO, not a regular file"),
                                            ("dev_zero_link", "is a character device, not a regular file")])
@pytest.mark.parametrize("loader", ["scenario", "contract", "report"])
def test_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path: Path, kind: str, says: str, loader: str) -> None:
    path = _hostile(tmp_path, kind)
    argv = {"scenario": ["run", str(path), "--db", "run.db"], "report": ["check-report", str(path)],
            "contract": ["check-report", str(REPORT), "--contract", str(path)]}[loader]
    try:
        done = _cli(*argv, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind}: the {loader} loader hung on it")
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr == f"harness-lab: error: {path}: {says}\n"
    assert not (tmp_path / "run.db").exists()


@pytest.mark.parametrize(("kind", "says"), [("directory", "is a directory, not a regular file"),
                                            ("huge", f"larger than {MAX_CONFIG_BYTES} bytes")])
@pytest.mark.parametrize("load", [load_scenario, load_contract])
def test_a_directory_or_a_file_past_the_cap_is_refused(tmp_path: Path, kind: str, says: str, load) -> None:
    path = _hostile(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"^{path}: {says}"):
        load(path)


def test_a_file_past_the_cap_is_read_only_up_to_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x" * (16 * MAX_CONFIG_BYTES))
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="larger than"):
            load_mapping(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_CONFIG_BYTES


def test_check_report_reads_a_huge_report_only_up_to_the_limit(tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.md"
    report.write_bytes(b"a" * (4 * MAX_REPORT_BYTES))
    tracemalloc.start()
    try:
        assert main(["check-report", str(report)]) == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert '"report_too_large"' in capsys.readouterr().out
    assert peak < 3 * MAX_REPORT_BYTES, f"{peak} bytes"


def test_a_scenario_file_whose_name_is_not_utf8_is_refused_before_the_store_is_made(tmp_path: Path, capsys) -> None:
    # The run records its scenario's path as text: the store's JSON refused it, with a traceback, after
    # --db had made its file.
    path = Path(os.fsdecode(os.fsencode(tmp_path) + b"/\xff.yaml"))
    shutil.copy(SCENARIO, path)
    db = tmp_path / "run.db"
    assert main(["run", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\\udcff.yaml" in err and "not UTF-8" in err
    assert not db.exists()


def test_a_scenario_whose_content_is_not_utf8_names_the_byte(tmp_path: Path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"id: a\xff\ntitle: t\n")
    assert main(["run", str(path), "--db", str(tmp_path / "run.db")]) == 2
    assert capsys.readouterr().err == f"harness-lab: error: {path}: not UTF-8: byte 0xff at offset 5\n"
    assert not (tmp_path / "run.db").exists()


def _bomb(levels: int) -> str:
    """Billion laughs: each level a list of nine aliases of the one before (9**levels strings)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1} "] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("load", [load_mapping, load_scenario, load_contract])
def test_a_yaml_alias_bomb_is_refused_in_bounded_cpu_time_and_memory(tmp_path: Path, load) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(f"{_bomb(10)}id: b\ntitle: t\nlabels: {{}}\nactions:\n- kind: finish\n  x: *l9\n")
    tracemalloc.start()
    cpu = time.process_time()
    try:
        with pytest.raises(ConfigError, match=f"more than {MAX_CONFIG_VALUES} values with its aliases expanded"):
            load(path)
        cpu = time.process_time() - cpu
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"{peak} bytes"
    assert cpu < 5, f"{cpu:.2f} s of CPU"  # a bound on work done (~0.1 s measured), not on the host's load


@pytest.mark.parametrize(("text", "says"), [
    ("x: &a [*a]\n", "nested deeper than 100 levels with its aliases expanded"),  # an anchor inside itself
    ("x: " + "[" * (MAX_CONFIG_DEPTH + 5) + "]" * (MAX_CONFIG_DEPTH + 5) + "\n", "nested deeper than"),
    ("x: " + "[" * 5000 + "\n", "not valid YAML"),
    ("x: 2001-13-45\n", "not valid YAML: a value cannot be read: month must be in 1..12"),
    ("x: " + "1" * 5000 + "\n", "not valid YAML: a value cannot be read: Exceeds the limit"),
])
def test_yaml_that_parses_but_cannot_be_used_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: .*{says}") as info:
        load_contract(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "says"), [
    ("[" * 5000 + "]" * 5000, "nested deeper than"),  # json recurses per level: a RecursionError
    ('{"x": ' + "1" * 5000 + "}", "not valid JSON: a value cannot be read"),
])
def test_json_that_parses_but_cannot_be_used_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: {says}"):
        load_contract(path)


def test_a_key_with_a_newline_is_named_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CONTRACT.read_text(encoding="utf-8") + '"bad\\nkey": 1\n')
    with pytest.raises(ConfigError, match=r"field 'bad\\nkey': Extra inputs are not permitted") as info:
        load_contract(path)
    assert "\n" not in str(info.value)


def _can_mount() -> str:
    """Why a private mount namespace cannot be made here ("" when it can): chmod alone stops no root."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) for a read-only bind mount / a small tmpfs in a private namespace"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                           capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"unshare -m cannot mount here: {probe.stderr.strip()[:100]}"


def _in_namespace(setup: str, *argv: str, cwd: Path, after: str = "true") -> subprocess.CompletedProcess[str]:
    """The command in a private mount namespace after ``setup``; ``after`` runs there too, before it ends."""
    command = " ".join([sys.executable, "-m", "harness_lab.cli", *argv])
    script = f"{setup} && {{ {command}; rc=$?; {after}; exit $rc; }}"
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(bool(_can_mount()), reason=_can_mount() or "-")
def test_experiment_into_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    done = _in_namespace("mount --bind ro ro && mount -o remount,bind,ro ro", "experiment", "--output", "ro",
                         cwd=tmp_path, after="ls -A ro > listing")
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr == "harness-lab: error: ro: cannot write the output here: Read-only file system\n"
    assert (tmp_path / "listing").read_text() == ""


@pytest.mark.skipif(bool(_can_mount()), reason=_can_mount() or "-")
@pytest.mark.parametrize("output", ["full", "full/sub"])
def test_study_onto_a_full_disk_is_one_line_and_writes_nothing(tmp_path: Path, output: str) -> None:
    (tmp_path / "full").mkdir()
    # A 16 KiB tmpfs, 9000 bytes of it taken: the study's files do not fit; `old` must come out as it went in.
    setup = "mount -t tmpfs -o size=16k tmpfs full && head -c 9000 /dev/zero > full/old"
    done = _in_namespace(setup, "study", "--output", output, "--seeds", "1", "--no-plots", "--quiet",
                         "--scenarios", "conforming_report", cwd=tmp_path, after="ls -A full > listing")
    assert done.returncode == 2, done.stderr[-500:]
    assert done.stderr == (f"harness-lab: error: {output}: cannot write the output here: No space left on device "
                           "(nothing was written)\n")
    assert (tmp_path / "listing").read_text() == "old\n"


@pytest.mark.parametrize(("text", "says"), [
    ("x: !!timestamp\n", "AttributeError"),  # PyYAML's constructors trust an explicit tag's text
    ("x: !!bool maybe\n", "KeyError: 'maybe'"),
])
def test_a_tagged_value_that_cannot_be_built_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: not valid YAML: a tagged value cannot be read .*{says}"):
        load_contract(path)


@pytest.mark.parametrize(("kind", "says"), [("fifo", "is a FIFO, not a regular file"),
                                            ("dev_zero_link", "is a character device, not a regular file")])
def test_an_evidence_note_that_is_a_fifo_or_a_device_is_refused(tmp_path: Path, kind: str, says: str) -> None:
    evidence = tmp_path / "evidence"
    shutil.copytree(data_dir() / "evidence", evidence)
    note = evidence / "hostile.md"
    os.mkfifo(note) if kind == "fifo" else note.symlink_to("/dev/zero")
    try:
        done = _cli("check-report", str(REPORT), "--evidence", str(evidence), cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind}: reading the evidence folder hung on it")
    assert done.stderr == f"harness-lab: error: {note}: cannot read evidence note: {says}\n"


def test_a_rename_that_fails_while_publishing_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from harness_lab.errors import HarnessLabError
    from harness_lab.experiments import _output, write_experiment

    real, out, calls = os.replace, tmp_path / "out", []

    def second_fails(src, dst) -> None:  # a rename that must grow a full folder: ENOSPC after the first
        if Path(dst).parent == out:  # os is one module: the runs' own renames pass
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(src, dst)

    monkeypatch.setattr(_output.os, "replace", second_fails)
    with pytest.raises(HarnessLabError, match="cannot finish the output: No space left on device") as info:
        write_experiment(out)
    assert "\n" not in str(info.value)
    assert not [p for p in out.iterdir() if p.name.startswith(".partial-")]


def test_study_refuses_more_workers_than_the_machine_can_hold(tmp_path: Path, monkeypatch, capsys) -> None:
    import importlib

    sweep = importlib.import_module("harness_lab.experiments.sweep")  # the package exports a function of that name

    def no_pool(max_workers: int | None = None) -> None:  # a pool of 100000 forks would be made at once
        raise AssertionError(f"a pool of {max_workers} workers was asked for")

    monkeypatch.setattr(sweep, "local_pool", no_pool)
    argv = ["study", "--output", str(tmp_path / "out"), "--seeds", "1", "--no-plots", "--quiet",
            "--scenarios", "conforming_report", "--workers", "100000"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness-lab: error: --workers: at most ") and err.endswith(", got 100000\n")
    assert not (tmp_path / "out").exists()
