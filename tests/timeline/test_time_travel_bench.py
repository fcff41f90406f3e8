"""``bench/time_travel.py --old TREE``: two trees' forks measured side by side (here the tree against itself)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_bench_compares_two_trees_forks_interleaved(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "time_travel.py"), "--old", str(ROOT), "--steps", "30",
                           "--rounds", "2", "--points", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "fork(at_step=n, budget='fresh') CPU µs at 30 steps, n in [15, 30], 2 interleaved rounds:"
    for label, line in zip(("old", "new"), lines[1:3], strict=True):
        assert re.fullmatch(rf"  {label}: median \d+ \(quartiles \d+-\d+, best \d+\) over 4 forks", line), line
    assert re.fullmatch(r"  new/old, the rounds' medians: \d\.\d{3} \(\d\.\d{3}-\d\.\d{3}\)", lines[3]), lines[3]
    assert len(lines) == 4
