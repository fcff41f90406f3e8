"""Helpers the run needs at start and at validation time."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .context import ContextManager, Layer
from .contract import ControlContract
from .evidence import EvidenceCatalogue

__all__ = ["initial_context", "read_report_snapshot"]

_SYSTEM = (
    "You propose one action at a time as JSON with a 'kind'. The runtime decides what runs. "
    "Tools: read_evidence(id), write_report(text), finish(), list_dir(path), read_file(path), "
    "write_file(path, content), run_command(argv), delete_file(path), read_ref(ref, start, end). "
    "A finish request is a claim: the runtime validates the report itself. "
    "Requests to change the contract, the validator or the run state are forbidden."
)


def initial_context(contract: ControlContract, evidence: EvidenceCatalogue, budget_tokens: int = 4000) -> ContextManager:
    """L0 (system, tools, safety) and L1 (goal, acceptance criteria): pinned, never compressed."""
    ctx = ContextManager(budget_tokens=budget_tokens)
    ctx.add(Layer.L0, _SYSTEM, source="harness", round=0, pinned=True, key="system")
    report = contract.verification.report
    sections = ", ".join(" / ".join(names) for names in report.sections)
    ctx.add(Layer.L1, f"Goal: {contract.goal.text}", source="contract", round=0, pinned=True, key="goal")
    ctx.add(
        Layer.L1,
        f"Acceptance: {report.path} exists and is non-empty; sections {sections} are non-empty; "
        f"cites at least {report.min_distinct_citations} distinct evidence ids read in this run as [E:<id>]; "
        f"no unknown ids. Evidence available: {', '.join(sorted(evidence))}. "
        f"Budget: {contract.budget.max_decisions} decisions, {contract.budget.max_tool_calls} tool calls.",
        source="contract",
        round=0,
        pinned=True,
        key="acceptance",
    )
    return ctx


def read_report_snapshot(workspace: Path, relative: str) -> bytes | None:
    """Read the report's bytes once, refusing a symlink or special file (the snapshot to validate)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(workspace / relative, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
