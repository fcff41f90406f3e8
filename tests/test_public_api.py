"""Every module's ``__all__`` names real objects, and the runtime never imports Jupyter."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import harness_lab

RUNTIME_MODULES = sorted(
    m.name for m in pkgutil.walk_packages(harness_lab.__path__, "harness_lab.")
    if not m.name.startswith(("harness_lab.widgets", "harness_lab.data"))
)


def test_every_public_name_exists() -> None:
    missing = []
    for name in ["harness_lab", *RUNTIME_MODULES]:
        module = importlib.import_module(name)
        if name.rsplit(".", 1)[-1].startswith("_"):
            continue
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        missing += [f"{name}.{n}" for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


def test_runtime_imports_no_jupyter_package() -> None:
    code = (
        "import sys, importlib\n"
        f"for m in {RUNTIME_MODULES!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'ipywidgets','IPython','ipykernel','jupyter_client','nbformat','matplotlib','traitlets'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"runtime imported: {out}"


def test_every_runtime_subpackage_is_listed_for_the_wheel() -> None:
    """pyproject lists packages by hand: a subpackage left out is missing from a non-editable install."""
    from pathlib import Path

    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "harness_lab").rglob("__init__.py")}
    assert sorted(found - listed) == []
