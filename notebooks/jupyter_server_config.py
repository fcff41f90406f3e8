"""JupyterLab's save, made quiet for the committed lessons: `make lab` links this file into its Jupyter config dir.

Running a lesson in the lab and saving it rewrites what the run made anew each time: the kernel's full
``language_info`` (its Python version), widget model ids, temporary paths, execution counts, timing and
scroll metadata. None of that is the lesson, and all of it shows in ``git status``. Before the lab writes
a lesson (``notebooks/NN_*.ipynb``), :func:`keep_stored` puts back the stored form of whatever differs from
the file on disk only in those volatile values: a cell whose source is unchanged and whose outputs equal the
stored ones once nbval's sanitize patterns (``nbval_sanitize.cfg``) are applied keeps its stored outputs and
execution count. An edited cell, or an output that says something else, is saved as the lab sends it.
"""

from __future__ import annotations

import json
import re
from configparser import ConfigParser
from pathlib import Path
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

# Volatile and view-only metadata: the kernel's version details, widget state, run timing, scroll/collapse, trust.
NOTEBOOK_VIEW_KEYS = ("kernelspec", "language_info", "widgets")
CELL_VIEW_KEYS = ("execution", "scrolled", "collapsed", "jupyter", "trusted")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
LESSON = re.compile(r"[0-9][0-9]_[^/]*\.ipynb")


def sanitizers(cfg: Path) -> list[tuple[re.Pattern[str], str]]:
    """nbval's patterns for values that differ run to run (the same file the notebook tests use)."""
    parser = ConfigParser()
    parser.read(cfg, encoding="utf-8")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _comparable(outputs: list[dict[str, Any]], subs: list[tuple[re.Pattern[str], str]]) -> str:
    """The outputs as nbval would compare them, plus every other mime type (an image is compared whole)."""
    def clean(text: str) -> str:
        for pattern, replace in subs:
            text = pattern.sub(replace, text)
        return text

    shown: list[dict[str, Any]] = []
    for out in outputs:
        out = dict(out)
        out.pop("execution_count", None)
        if "text" in out:
            out["text"] = clean(_text(out["text"]))
        if out.get("output_type") == "stream" and shown and shown[-1].get("name") == out.get("name") \
                and shown[-1].get("output_type") == "stream":
            # how a run's prints fall into stream messages depends on timing; the lab shows them merged
            shown[-1]["text"] += out["text"]
            continue
        data = dict(out.get("data", {}))
        for mime, value in data.items():
            if mime == WIDGET_VIEW:  # a fresh model id every run; the view itself is the same
                data[mime] = {k: v for k, v in value.items() if k != "model_id"}
            elif mime.startswith("text/") or mime.endswith("json"):
                data[mime] = clean(_text(value) if not isinstance(value, dict) else json.dumps(value, sort_keys=True))
        out["data"] = data
        shown.append(out)
    return json.dumps(shown, sort_keys=True)


def _source_key(cell: dict[str, Any]) -> tuple[str, str, str]:
    meta = {k: v for k, v in cell.get("metadata", {}).items() if k not in CELL_VIEW_KEYS}
    return cell.get("cell_type", ""), _text(cell.get("source", "")), json.dumps(meta, sort_keys=True)


def restore_stored(new: dict[str, Any], stored: dict[str, Any], subs: list[tuple[re.Pattern[str], str]]) -> None:
    """Give ``new`` (a notebook as the lab sends it) the stored form of every value that differs only in
    volatile details from ``stored`` (the notebook on disk). Changes ``new`` in place."""
    meta, old_meta = new.setdefault("metadata", {}), stored.get("metadata", {})
    for key in NOTEBOOK_VIEW_KEYS:
        same_kernel = key != "kernelspec" or meta.get(key, {}).get("name") == old_meta.get(key, {}).get("name")
        if key in old_meta and same_kernel:
            meta[key] = old_meta[key]
        elif key not in old_meta and key != "kernelspec":
            meta.pop(key, None)
    old_cells = {c.get("id"): c for c in stored.get("cells", [])}
    for cell in new.get("cells", []):
        old = old_cells.get(cell.get("id"))
        cell_meta = cell.setdefault("metadata", {})
        for key in CELL_VIEW_KEYS:
            if old is not None and key in old.get("metadata", {}):
                cell_meta[key] = old["metadata"][key]
            else:
                cell_meta.pop(key, None)
        if old is None or _source_key(cell) != _source_key(old) or cell.get("cell_type") != "code":
            continue
        if _comparable(cell.get("outputs", []), subs) == _comparable(old.get("outputs", []), subs):
            cell["outputs"], cell["execution_count"] = old.get("outputs", []), old.get("execution_count")


def keep_stored(model: dict[str, Any], path: str, contents_manager: Any, **_: Any) -> None:
    """The lab's pre-save hook: for a lesson in the lessons folder, :func:`restore_stored` against the
    file on disk. Anything else is saved untouched."""
    root = Path(contents_manager.root_dir)
    target = root / path
    cfg = target.parent / "nbval_sanitize.cfg"
    if model.get("type") != "notebook" or not LESSON.fullmatch(target.name) or not cfg.is_file() \
            or not target.is_file():
        return
    stored = json.loads(target.read_text(encoding="utf-8"))
    restore_stored(model["content"], stored, sanitizers(cfg))


class LessonContentsManager(AsyncLargeFileManager):
    """The lab's default contents manager with :func:`keep_stored` registered (set through the
    ``pre_save_hook`` option, jupyter_server assigns it twice and warns that it overrides itself)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.register_pre_save_hook(keep_stored)


if "get_config" in globals():  # loaded by Jupyter as a config file
    c = get_config()  # type: ignore[name-defined]  # noqa: F821
    c.ServerApp.contents_manager_class = LessonContentsManager
