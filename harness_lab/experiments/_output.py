"""Writing an output folder all at once: every file is made in a hidden staging folder first.

An interruption or a failure (Ctrl-C, a full disk, a read-only folder, a plot that fails) then leaves the
folder as it was, never a truncated ``results.json`` or new results beside an older run's plots; an
``OSError`` of the file system becomes one :class:`HarnessLabError` line naming the folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import HarnessLabError

__all__ = ["publish", "publish_texts"]


def publish(out: Path, make: Callable[[Path], Iterable[Path]], *, stale: Iterable[str] = ()) -> list[Path]:
    """Create ``out``, let ``make(staging)`` write its files, then move them into ``out``.

    ``stale`` names files of this output set that this run does not make (e.g. plots skipped):
    they are removed, so the folder never mixes two runs. Returns the paths in ``out``.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
    except OSError as exc:
        raise HarnessLabError(f"{out}: cannot write the output here: {exc.strerror or exc}") from None
    try:
        try:
            made = [Path(p) for p in make(staging)]
        except OSError as exc:  # a full disk, a quota: nothing has reached ``out`` yet
            raise HarnessLabError(f"{out}: cannot write the output here: {exc.strerror or exc} "
                                  "(nothing was written)") from None
        try:
            for name in stale:
                (out / name).unlink(missing_ok=True)
            for path in made:  # renames within one folder: each is atomic, all of them take microseconds
                os.replace(path, out / path.name)
        except OSError as exc:  # rare (a rename that must grow a full folder), and the folder is then mixed
            raise HarnessLabError(f"{out}: cannot finish the output: {exc.strerror or exc} (files of this "
                                  "run and of an earlier one may stand side by side)") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / p.name for p in made]


def publish_texts(out: Path, texts: dict[str, str]) -> list[Path]:
    """:func:`publish` of text files: file name -> its UTF-8 text."""

    def make(staging: Path) -> list[Path]:
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        return [staging / name for name in texts]

    return publish(out, make)
