"""Where the shipped data lives (contracts, scenarios, evidence), in a checkout or an installed wheel."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir"]


def data_dir() -> Path:
    """``$HARNESS_LAB_DATA`` if set, else the ``data/`` folder shipped with the package."""
    override = os.environ.get("HARNESS_LAB_DATA")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[1] / "data"
    if (checkout / "scenarios").is_dir():
        return checkout
    # Installed wheel: data/ is packaged as harness_lab/data.
    return Path(__file__).resolve().parent / "data"
