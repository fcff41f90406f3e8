"""Opening, running and saving a lesson in JupyterLab leaves ``git status`` clean.

The lab saves through jupyter_server's contents manager (``AsyncLargeFileManager`` by default); `make lab`
links ``notebooks/jupyter_server_config.py`` into its Jupyter config dir, whose pre-save hook keeps a lesson's
stored form where a run changed only volatile values. Here a lesson is read through that manager, executed
as a kernel does (nbclient: full ``language_info``, widget state, timing metadata, fresh widget model ids,
new temporary paths), sent back as the browser sends it (JSON) and saved: the file must be byte-identical.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
CONFIG = NOTEBOOKS / "jupyter_server_config.py"


def _manager(root: Path, hooked: bool) -> AsyncLargeFileManager:
    """The contents manager the lab's server makes: the config file's class, or the default one."""
    config = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    cls = config.ServerApp.contents_manager_class if hooked else AsyncLargeFileManager
    assert issubclass(cls, AsyncLargeFileManager)
    manager: AsyncLargeFileManager = cls(root_dir=str(root), config=Config())
    return manager


def _lessons_folder(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(NOTEBOOKS / "nbval_sanitize.cfg", root)
    for name in names:
        shutil.copy(NOTEBOOKS / name, root)
    return root


def _open(manager: AsyncLargeFileManager, name: str) -> dict[str, Any]:
    model: dict[str, Any] = asyncio.run(manager.get(name))
    return model


def _save(manager: AsyncLargeFileManager, name: str, content: Any) -> None:
    # what the browser sends: the notebook as JSON, sources as single strings
    sent = json.loads(json.dumps(content))
    asyncio.run(manager.save({"type": "notebook", "format": "json", "content": sent}, name))


def _run_like_the_lab(content: Any, cwd: Path) -> Any:
    from nbclient import NotebookClient

    nb = nbformat.from_dict(content)
    # store_widget_state and record_timing: what the lab's "save widget state" and timing settings write
    NotebookClient(nb, kernel_name="python3", timeout=300, store_widget_state=True, record_timing=True,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.notebook
@pytest.mark.parametrize("name", ["01_finish_validation.ipynb", "05_crash_resume.ipynb"])
def test_running_and_saving_a_lesson_in_the_lab_leaves_it_byte_identical(name, tmp_path):
    committed = (NOTEBOOKS / name).read_bytes()
    root = _lessons_folder(tmp_path, name)
    plain, hooked = _manager(root, hooked=False), _manager(root, hooked=True)
    ran = _run_like_the_lab(_open(hooked, name)["content"], root)

    _save(plain, name, ran)  # without the hook: the run's volatile values land in the file
    churned = (root / name).read_bytes()
    assert churned != committed, "the run changed nothing: this test would prove nothing"
    (root / name).write_bytes(committed)

    _save(hooked, name, ran)
    assert (root / name).read_bytes() == committed
    assert json.loads(churned)["metadata"]["language_info"] != {"name": "python"}  # what the hook put back


def test_an_edited_lesson_is_saved_as_edited(tmp_path):
    name = "01_finish_validation.ipynb"
    root = _lessons_folder(tmp_path, name)
    manager = _manager(root, hooked=True)
    content = _open(manager, name)["content"]
    params = next(c for c in content["cells"] if "parameters" in c["metadata"].get("tags", []))
    params["source"] = params["source"].replace("validation = True", "validation = False")
    shown = next(c for c in content["cells"] if c["cell_type"] == "code" and c["outputs"]
                 and c["outputs"][0]["output_type"] == "stream")
    shown["outputs"][0]["text"] = "a different answer\n"  # an output that says something else
    _save(manager, name, content)
    saved = nbformat.read(root / name, as_version=4)
    assert "validation = False" in next(c for c in saved.cells if c.id == params["id"]).source
    assert next(c for c in saved.cells if c.id == shown["id"]).outputs[0]["text"] == "a different answer\n"


def test_only_lessons_are_touched(tmp_path):
    root = _lessons_folder(tmp_path, "01_finish_validation.ipynb")
    shutil.copy(root / "01_finish_validation.ipynb", root / "scratch.ipynb")  # not NN_*.ipynb: the user's own
    manager = _manager(root, hooked=True)
    content = _open(manager, "scratch.ipynb")["content"]
    content["metadata"]["language_info"] = {"name": "python", "version": "3.11.2"}
    _save(manager, "scratch.ipynb", content)
    assert nbformat.read(root / "scratch.ipynb", as_version=4).metadata.language_info.version == "3.11.2"


def test_make_lab_links_the_config_into_its_jupyter_config_dir():
    plan = subprocess.run(["make", "-n", "lab"], cwd=REPO, capture_output=True,
                          text=True, timeout=60).stdout
    assert f"ln -sf {CONFIG} {REPO}/.scratch/jupyter-config/jupyter_server_config.py" in plan
    assert "JUPYTER_CONFIG_DIR=" + str(REPO / ".scratch" / "jupyter-config") in plan


def test_prints_split_across_stream_messages_and_new_counts_keep_the_stored_cell(tmp_path):
    name = "01_finish_validation.ipynb"
    committed = (NOTEBOOKS / name).read_bytes()
    root = _lessons_folder(tmp_path, name)
    manager = _manager(root, hooked=True)
    content = _open(manager, name)["content"]
    cell = next(c for c in content["cells"] if c["cell_type"] == "code" and c["outputs"]
                and c["outputs"][0]["output_type"] == "stream" and c["outputs"][0]["text"].count("\n") > 2)
    first, rest = cell["outputs"][0]["text"].split("\n", 1)
    # a kernel flushes a cell's prints as it goes: one run's lines can arrive as two stream messages
    cell["outputs"][:1] = [{"output_type": "stream", "name": "stdout", "text": first + "\n"},
                           {"output_type": "stream", "name": "stdout", "text": rest}]
    for n, c in enumerate(c for c in content["cells"] if c["cell_type"] == "code"):
        c["execution_count"] = 40 + n  # run out of order, or twice
    _save(manager, name, content)
    assert (root / name).read_bytes() == committed
