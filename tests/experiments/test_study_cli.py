"""`harness-lab study`: the table, the definitions, the plots; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_lab.cli import main
from harness_lab.experiments import METRIC_DEFINITIONS


def test_study_writes_table_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    out = tmp_path / "study"
    code = main(["study", "--groups", "base,structural,repair,semantic", "--scenarios", "seed", "--seeds", "2",
                 "--workers", "2", "--quiet", "--output", str(out)])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "scenarios.md", "study.png", "study.svg", "table.md"]
    assert (out / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (out / "study.svg").read_bytes()[:2000]
    data = json.loads((out / "results.json").read_text())
    assert data["definitions"] == METRIC_DEFINITIONS
    assert [s["group"] for s in data["summaries"]] == ["base", "structural", "repair", "semantic"]
    assert len(data["outcomes"]) == 4 * 10 * 2
    printed = capsys.readouterr().out
    assert printed.startswith("| group | runs | completion |") and "false accepts" in printed


@pytest.mark.parametrize(("args", "message"), [
    (["--groups", "base,bogus"], "--groups: unknown group(s) bogus"),
    (["--scenarios", "conforming_report,nope"], "--scenarios: unknown scenario(s) nope"),
    (["--seeds", "0"], "--seeds: must be >= 1"),
    (["--noise", "2"], "--noise: must lie in [0, 1]"),
    (["--workers", "0"], "--workers: must be >= 1"),
    (["--max-decisions", "0"], "--max-decisions: must be >= 1, got 0"),
    # counted twice, a group's runs (or a scenario's weight) would double in every rate
    (["--groups", "base,structural,base"], "--groups: base given twice"),
    (["--scenarios", "conforming_report,empty_report,conforming_report"], "--scenarios: conforming_report given twice"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], message: str) -> None:
    out = tmp_path / "never"
    assert main(["study", "--seeds", "1", "--no-plots", "--quiet", *args, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_output_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("keep me")
    assert main(["study", "--seeds", "1", "--no-plots", "--quiet", "--output", str(target)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err and target.read_text() == "keep me"


def test_output_that_cannot_be_created_is_refused_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import harness_lab.experiments as experiments

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the study ran before its output was known to be writable")

    monkeypatch.setattr(experiments, "run_study", never)
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    assert main(["study", "--seeds", "1", "--no-plots", "--quiet", "--output", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--output" in err and str(blocker / "sub") in err and "Traceback" not in err
    assert blocker.read_text() == "keep me"


@pytest.mark.parametrize("inside_a_file", [False, True])
def test_experiment_output_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               inside_a_file: bool) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    target = blocker / "sub" if inside_a_file else blocker
    assert main(["experiment", "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--output" in err and str(target) in err
    assert blocker.read_text() == "keep me"



@pytest.mark.parametrize(("groups", "scenarios"), [(["base", "base"], ["conforming_report"]),
                                                   (["base"], ["conforming_report", "conforming_report"])])
def test_study_tasks_refuse_repeats(groups: list[str], scenarios: list[str]) -> None:
    from harness_lab.experiments import study_tasks

    with pytest.raises(ValueError, match="given twice"):
        study_tasks(groups, scenarios, 1)


@pytest.fixture(scope="module")
def small_result():  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    from harness_lab.experiments import run_study

    with ThreadPoolExecutor(1) as pool:
        return run_study(["base"], ["conforming_report"], 1, executor=pool, progress=False)


def _old_study(out: Path) -> dict[str, str]:
    out.mkdir()
    old = {name: f"old {name}" for name in ("results.json", "table.md", "scenarios.md", "study.png", "study.svg")}
    for name, text in old.items():
        (out / name).write_text(text)
    return old


def test_a_write_that_fails_midway_leaves_the_previous_study_whole(tmp_path: Path, small_result,  # type: ignore[no-untyped-def]
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import harness_lab.experiments.plots as plots
    from harness_lab.experiments import write_study

    out = tmp_path / "study"
    old = _old_study(out)

    def broken(*args: object, **kwargs: object) -> list[Path]:
        raise RuntimeError("the plot failed")

    monkeypatch.setattr(plots, "plot_study", broken)
    with pytest.raises(RuntimeError):
        write_study(small_result, out, plots=True)
    # Not a new results.json beside old plots: the directory still holds one study, the old one.
    assert {p.name: p.read_text() for p in out.iterdir()} == old


def test_no_plots_does_not_leave_an_older_studys_plots_beside_new_results(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          small_result) -> None:
    from harness_lab.experiments import write_study

    out = tmp_path / "study"
    _old_study(out)
    write_study(small_result, out, plots=False)
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "scenarios.md", "table.md"]
    assert json.loads((out / "results.json").read_text())["seeds"] == 1


def test_an_experiment_write_that_fails_midway_leaves_the_previous_one_whole(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import harness_lab.experiments.seed_table as seed_table

    out = tmp_path / "experiment"
    out.mkdir()
    (out / "results.json").write_text("old results")
    (out / "table.md").write_text("old table")

    def broken(results: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(seed_table, "render_table", broken)
    monkeypatch.setattr(seed_table, "run_experiment", lambda: [])
    with pytest.raises(KeyboardInterrupt):
        seed_table.write_experiment(out)
    assert {p.name: p.read_text() for p in out.iterdir()} == {"results.json": "old results", "table.md": "old table"}


def test_a_bad_dask_address_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("dask.distributed", reason="the dask extra is not installed")
    out = tmp_path / "never"
    assert main(["study", "--seeds", "1", "--no-plots", "--quiet", "--dask", "nonsense", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dask: cannot reach a scheduler at 'nonsense'" in err
    assert not out.exists()


@pytest.mark.parametrize("command", [["study", "--seeds", "1", "--no-plots", "--quiet"], ["experiment"]])
def test_an_empty_output_is_refused_not_the_current_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    # `--output "$OUT"` with OUT unset used to write results.json and tables into the current folder.
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--output", ""]) == 2
    assert "--output: empty path" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_the_experiment_states_the_budget_its_contract_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # results.json and table.md used to say 8 decisions / 5 tool calls whatever the contract said.
    import shutil

    from harness_lab.experiments import write_experiment
    from harness_lab.paths import data_dir

    data = tmp_path / "data"
    shutil.copytree(data_dir(), data)
    contract = data / "contracts" / "report_task.yaml"
    text = contract.read_text(encoding="utf-8")
    assert "max_decisions: 8\n" in text and "max_tool_calls: 5\n" in text
    contract.write_text(text.replace("max_decisions: 8\n", "max_decisions: 9\n")
                        .replace("max_tool_calls: 5\n", "max_tool_calls: 4\n"), encoding="utf-8")
    monkeypatch.setenv("HARNESS_LAB_DATA", str(data))
    payload = write_experiment(tmp_path / "out")
    assert payload["budget"] == {"max_decisions": 9, "max_tool_calls": 4}
    assert json.loads((tmp_path / "out" / "results.json").read_text())["budget"] == payload["budget"]
    assert "Budget: 9 decisions, 4 tool calls" in (tmp_path / "out" / "table.md").read_text()


@pytest.mark.parametrize(("groups", "scenarios"), [([], ["conforming_report"]), (["base"], [])])
def test_run_study_with_nothing_to_run_says_so(groups: list[str], scenarios: list[str]) -> None:
    # Was an IndexError (tasks[0]) after an empty sweep.
    from harness_lab.experiments import run_study

    with pytest.raises(ValueError, match="no (groups|scenarios) to run"):
        run_study(groups, scenarios, 1, progress=False)


def test_run_study_takes_a_single_name_as_one_name_not_its_letters() -> None:
    # Was "scenario(s) n, o, r given twice" / "unknown group(s) b, a, s, e": a str is a sequence of letters.
    from concurrent.futures import ThreadPoolExecutor

    from harness_lab.experiments import run_study

    with ThreadPoolExecutor(1) as pool:
        result = run_study("base", "conforming_report", 1, executor=pool, progress=False)
    assert result.groups == ("base",) and result.scenarios == ("conforming_report",)
    assert len(result.outcomes) == 1 and result.outcomes[0].scenario == "conforming_report"
