"""Fuzzing the scenario and contract loaders: every text loads or is one ConfigError line, in linear time.

Random texts, YAML built from its own hostile tokens (anchors, aliases, merge keys, tags, nesting) and
structured and byte-level mutations of the shipped files. Fixed example budgets, derandomized, no
deadline (a loaded host is slow, not wrong); the time checks compare CPU time of n and 4n, never a bound.
"""

from __future__ import annotations

import gc
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_lab import _files
from harness_lab._files import MAX_CONFIG_BYTES, load_mapping, shown_path
from harness_lab.contract import load_contract
from harness_lab.errors import ConfigError
from harness_lab.paths import data_dir
from harness_lab.scenarios import load_scenario

SHIPPED = sorted((data_dir() / "scenarios").glob("*.yaml")) + sorted((data_dir() / "contracts").glob("*.yaml"))
LOADERS: dict[str, Callable[[Path], Any]] = {"scenario": load_scenario, "contract": load_contract}
FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="loader-fuzz-") as name:
        yield Path(name)


def _loads_or_refuses(folder: Path, data: bytes, suffix: str, loader: str) -> None:
    """The one property: the loader returns, or raises a one-line ConfigError naming the file."""
    path = folder / f"fuzzed{suffix}"
    path.write_bytes(data)
    try:
        LOADERS[loader](path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{shown_path(path)}: ") and "\n" not in message, message


# YAML's own syntax, the pieces most likely to reach odd corners of a parser and a validator.
TOKENS = ["&a ", "&b ", "*a", "*b", "*c", "[", "]", "{", "}", ", ", ": ", "- ", "\n", "  ", "? ", "<<: ", "!!set ",
          "!!python/object:os.system ", "!!binary ", "!!timestamp ", "'", '"', "#", "|", ">", "---\n", "...\n",
          "%YAML 1.1\n", "\t", "\\", "\x00", "\ufeff", "\u2028", "~", "1", "0x1F", "1e999", ".nan", "2001-13-45",
          "2001-12-14", "yes", "id", "title", "actions", "labels", "contract", "kind", "write_report", "text",
          "acceptable_reports", "name", "goal", "verification", "stop", "budget", "max_decisions",
          "human_gate", "required_for", "x" * 300]
yaml_texts = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)


@FUZZ
@given(text=st.text(max_size=400) | yaml_texts, suffix=st.sampled_from([".yaml", ".json"]),
       loader=st.sampled_from(sorted(LOADERS)), pure_python=st.booleans())
def test_random_texts_load_or_are_one_line(folder: Path, text: str, suffix: str, loader: str,
                                           pure_python: bool) -> None:
    # PyYAML's own parser too: a machine whose PyYAML lacks libyaml uses it (it recurses, libyaml does not)
    before = _files._LOADER
    _files._LOADER = yaml.SafeLoader if pure_python else before
    try:
        _loads_or_refuses(folder, text.encode("utf-8", "surrogatepass"), suffix, loader)
    finally:
        _files._LOADER = before


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _paths(child, (*prefix, key))


@st.composite
def mutated_documents(draw: st.DrawFn) -> tuple[Path, Any]:
    """A shipped file's data with one to three edits: a value replaced, a key dropped or renamed."""
    source = draw(st.sampled_from(SHIPPED))
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(list(_paths(document))))
        if not where:
            continue
        parent = document
        for key in where[:-1]:
            parent = parent[key]
        edit = draw(st.sampled_from(["replace", "drop", "rename"]))
        if edit == "replace":
            parent[where[-1]] = draw(json_values)
        elif edit == "drop":
            del parent[where[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = parent.pop(where[-1])
    return source, document


@FUZZ
@given(mutated=mutated_documents(), as_json=st.booleans())
def test_mutated_shipped_files_load_or_are_one_line(folder: Path, mutated: tuple[Path, Any], as_json: bool) -> None:
    source, document = mutated
    loader = source.parent.name.rstrip("s")  # scenarios -> scenario, contracts -> contract
    text = json.dumps(document) if as_json else yaml.safe_dump(document, allow_unicode=True)
    _loads_or_refuses(folder, text.encode("utf-8", "surrogatepass"), ".json" if as_json else ".yaml", loader)


@FUZZ
@given(source=st.sampled_from(SHIPPED), edits=st.lists(st.tuples(st.floats(0, 1), st.binary(max_size=8)), max_size=5),
       cut=st.integers(0, 16))
def test_byte_edits_of_shipped_files_load_or_are_one_line(folder: Path, source: Path,
                                                          edits: list[tuple[float, bytes]], cut: int) -> None:
    data = bytearray(source.read_bytes())
    for where, new in edits:  # each edit overwrites a few bytes at a relative position (not UTF-8, often)
        at = int(where * len(data))
        data[at:at + cut] = new
    _loads_or_refuses(folder, bytes(data), ".yaml", source.parent.name.rstrip("s"))


def _cpu(load: Callable[[Path], Any], path: Path, repeat: int) -> float:
    """The least CPU time of three rounds of ``repeat`` loads (CPU time: another process's load is not ours).

    The cyclic garbage collector is off while it counts: its passes over the whole heap come at moments
    that depend on everything allocated before, and made 4x the text cost up to 10x on a busy host.
    """
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            start = time.process_time()
            for _ in range(repeat):
                try:
                    load(path)
                except ConfigError:
                    pass
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


# Shapes that make a parser or a validator quadratic if anything does: many lines, one long line, long
# scalars, many anchors and aliases, many scripted actions. Each is n KiB of text, n = 32 and 128.
SHAPES: dict[str, Callable[[int], str]] = {
    "many keys": lambda n: "".join(f"k{i}: {i}\n" for i in range(n * 1024 // 10)),
    "one flow list": lambda n: "x: [" + "1, " * (n * 1024 // 3) + "]\n",
    "long scalars": lambda n: "".join(f"k{i}: '{'y' * 1000}'\n" for i in range(n)),
    "many aliases": lambda n: "a: &a [1, 2]\nx: [" + "*a , " * (n * 1024 // 5) + "]\n",
    "many actions": lambda n: "id: s\ntitle: t\nlabels: {}\nactions:\n" + "".join(
        f"- {{kind: read_evidence, id: e{i}}}\n" for i in range(n * 1024 // 34)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_loading_is_linear_in_the_size_of_the_text(folder: Path, shape: str) -> None:
    small, large = folder / "small.yaml", folder / "large.yaml"
    small.write_text(SHAPES[shape](32))
    large.write_text(SHAPES[shape](128))
    ratio = _cpu(load_scenario, large, 1) / max(_cpu(load_scenario, small, 1), 1e-3)
    assert ratio < 8, f"{shape}: 4x the text took {ratio:.1f}x the CPU time"


def test_a_file_past_the_cap_costs_the_same_at_4_and_16_mib(folder: Path) -> None:
    small, large = folder / "small.yaml", folder / "large.yaml"
    small.write_bytes(b"x: [" + b"1, " * (4 * MAX_CONFIG_BYTES // 3))
    large.write_bytes(b"x: [" + b"1, " * (16 * MAX_CONFIG_BYTES // 3))
    ratio = _cpu(load_mapping, large, 20) / max(_cpu(load_mapping, small, 20), 1e-3)
    assert ratio < 8, f"4x the file took {ratio:.1f}x the CPU time"
