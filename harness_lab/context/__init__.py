"""Layered context (seed 003, section 3): L0-L5 items, a token budget, stored references for large
outputs, and a compression whose self-check keeps anomalies, pinned facts and failure reasons.

Start at :class:`ContextManager`; the layers are described in :mod:`harness_lab.context.items`, the
policy in :mod:`harness_lab.context.compress`, retrieval of stored history by relevance in
:mod:`harness_lab.context.retrieval`, the token counter in :mod:`harness_lab.context.tokens`.
"""

from __future__ import annotations

from ._view import ContextView
from .anomaly import ANOMALY_PATTERN, anomaly_lines, is_anomalous, numeric_mismatch
from .changes import apply_changes
from .compress import COMPRESSION_ORDER, Summarizer, default_summarizer
from .items import ContextItem, Freshness, Layer, Role, Status
from .manager import INTERACTION_WINDOW, ContextManager
from .refs import RefInfo, RefStore
from .retrieval import HistoryHit, HistoryIndex
from .selfcheck import CompressionReport, find_losses
from .tokens import TokenCounter, approx_token_count, regex_token_count

__all__ = [
    "ANOMALY_PATTERN",
    "COMPRESSION_ORDER",
    "INTERACTION_WINDOW",
    "CompressionReport",
    "ContextItem",
    "ContextManager",
    "ContextView",
    "Freshness",
    "HistoryHit",
    "HistoryIndex",
    "Layer",
    "RefInfo",
    "RefStore",
    "Role",
    "Status",
    "Summarizer",
    "TokenCounter",
    "anomaly_lines",
    "apply_changes",
    "approx_token_count",
    "default_summarizer",
    "find_losses",
    "is_anomalous",
    "numeric_mismatch",
    "regex_token_count",
]
