"""A built wheel carries harness_lab.widgets (mapped from the top-level widgets/ folder) and imports.

Offline and fast: the wheel is built without build isolation (setuptools comes from the test extra)
from a copy of the sources, installed with --no-deps into a target directory, and imported from there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_and_imports_the_widgets(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("harness_lab", "widgets", "data"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    built = subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("harness_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"harness_lab/widgets/__init__.py", "harness_lab/widgets/view.py",
            "harness_lab/data/scenarios/conforming_report.yaml", "harness_lab/data/transcripts/07_real_model.json",
            "harness_lab/data/model/smollm2_tool_calls.jinja", "harness_lab/data/coding_scenarios/coding_honest_fix.yaml",
            "harness_lab/data/coding/stats/test_stats.py"} <= names
    target = tmp_path / "site"
    installed = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    code = ("import harness_lab.widgets as w, harness_lab\n"
            "from harness_lab import Run\n"
            "v = w.LabView(Run.from_scenario('conforming_report'), plot=False)\n"
            "v.run_to_end()\n"
            "print(w.__file__); print(harness_lab.__file__); print(v.summary())\n")
    env = {"PYTHONPATH": str(target), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    widgets_file, runtime_file, summary = ran.stdout.splitlines()
    assert widgets_file.startswith(str(target)) and runtime_file.startswith(str(target))
    assert summary == "conforming_report: REVIEW_READY (checks_passed) after step 4"
