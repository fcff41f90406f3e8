"""Checkpoint stores: embedded SQLite (the default) and an in-memory double.

``SQLiteStore("runs.sqlite")`` keeps every run's spec, one checkpoint row per step, the side-effect
ledger, heartbeats and progress reports; ``InMemoryStore()`` has the same semantics without a file.
"""

from .base import (
    SCHEMA_VERSION,
    EffectEntry,
    EffectStatus,
    Heartbeat,
    HistoryEntry,
    InMemoryStore,
    RunInfo,
    StepFiles,
    Store,
    StoredStep,
)
from .sqlite import SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "EffectEntry",
    "EffectStatus",
    "Heartbeat",
    "HistoryEntry",
    "InMemoryStore",
    "RunInfo",
    "SQLiteStore",
    "StepFiles",
    "Store",
    "StoredStep",
]
