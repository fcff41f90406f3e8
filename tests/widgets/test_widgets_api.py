"""The widget package's public names exist, and it is importable as harness_lab.widgets (editable)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import harness_lab.widgets

REPO = Path(__file__).resolve().parents[2]


def test_every_widget_module_declares_real_public_names():
    names = ["harness_lab.widgets"] + [m.name for m in pkgutil.iter_modules(harness_lab.widgets.__path__, "harness_lab.widgets.")]
    assert "harness_lab.widgets.view" in names
    missing = []
    for name in names:
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"
        missing += [f"{name}.{n}" for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


def test_the_editable_install_maps_the_top_level_widgets_folder():
    assert Path(harness_lab.widgets.__file__).resolve() == REPO / "widgets" / "__init__.py"
