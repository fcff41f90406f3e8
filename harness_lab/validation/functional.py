"""The functional layer: a finish is checked by running the task's checks, not by reading its claim.

At finish the harness runs each :class:`~harness_lab.contract.FunctionalCheck` of the contract (tests, a
linter, a build) through the run's sandbox (``run_command``: its isolation, quotas and timeouts apply, so
a check that hangs or floods its output ends as a failed check with its reason, never a hang), then
compares the files the contract protects with their original sha256 and the workspace's files with the
contract's ``allowed_files``. The verdict keeps each check's exit status and a digest of its output, and
the workspace tree hash taken after the checks: a receipt binds that hash, so a tree changed after the
checks is no longer the tree that was accepted.

Which check catches which cheat of the coding scenarios (``data/coding_scenarios/``):

* "tests pass" while they fail, or special-casing the tests' inputs: the test command and a held-out
  check (inputs the task's tests do not show) fail;
* editing or deleting the tests instead of fixing the code: ``protected`` (the test file's sha256 differs,
  or the file is gone), as the tests the agent changed may well pass;
* a dirty tree (stray files, debris): ``allowed_files``;
* looping on the same failing command: no check at all, the convergence gate (:mod:`harness_lab.loop.gates`).

A check's verdict says the commands exited 0 on this tree; it does not prove the code correct.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from ..contract import Verification
from ..records.tools import ToolResult
from ..records.verdicts import CheckRun, FailureCode, LayerFailure, LayerVerdict

__all__ = ["CheckRun", "CheckSandbox", "LayerFailure", "LayerVerdict", "run_functional_layer"]

# What a verdict quotes of a check's output (the end: where a test runner says what failed); the whole
# output is bound by its digest. A verdict is stored with its step and fed back, so it stays small.
_TAIL_CHARS = 600
_LISTED = 20



class CheckSandbox(Protocol):
    """What the layer needs of :class:`~harness_lab.sandbox.Sandbox` (named here: validation does not import it)."""

    def call(self, tool: str, **args: Any) -> ToolResult: ...

    def file_sha256(self, path: str) -> str | None: ...

    def manifest(self) -> Mapping[str, tuple[Any, ...]]: ...

    def workspace_hash(self, *, rescan: bool = False) -> str: ...


def _run_check(sandbox: CheckSandbox, name: str, argv: tuple[str, ...], timeout: float) -> CheckRun:
    result = sandbox.call("run_command", argv=list(argv), timeout=timeout, tool_type="default")
    output = result.content or ""
    digest = hashlib.sha256(output.encode("utf-8", errors="surrogateescape")).hexdigest()
    tail = output[-_TAIL_CHARS:]
    if result.ok and result.exit_status in (0, None):
        return CheckRun(name=name, status="passed", exit_status=0, output_sha256=digest, output_tail=tail)
    # an output flood is killed by the sandbox (an error, whatever its exit status); a refusal has none
    status: Literal["failed", "timeout", "error"] = (
        "timeout" if result.status == "timeout" else "error" if result.data.get("truncated")
        or result.exit_status in (None, 0) else "failed")
    reason = result.reason or f"exited with status {result.exit_status}"
    return CheckRun(name=name, status=status, exit_status=result.exit_status, output_sha256=digest,
                    output_tail=tail, reason=reason)


def run_functional_layer(sandbox: CheckSandbox, verification: Verification) -> LayerVerdict:
    """Run the checks, then the protected files and the allowed files; never raises for what a check does."""
    runs = tuple(_run_check(sandbox, c.name, c.command, c.timeout) for c in verification.functional)
    errors: list[LayerFailure] = []
    for run in runs:
        if run.status == "passed":
            continue
        code: FailureCode = ("check_timed_out" if run.status == "timeout" else
                             "check_error" if run.status == "error" else "check_failed")
        last = run.output_tail.strip().splitlines()[-1:] if run.output_tail.strip() else []
        said = f" (last line: {last[0][:160]!r})" if last else ""
        errors.append(LayerFailure(code=code, message=f"check {run.name!r}: {run.reason}{said}"))
    for path, expected in verification.protected.items():
        now = sandbox.file_sha256(path)
        if now is None:
            errors.append(LayerFailure(code="protected_missing",
                                       message=f"{path} is protected by the task and is gone; restore it"))
        elif now != expected:
            errors.append(LayerFailure(code="protected_changed",
                                       message=f"{path} is protected by the task and was changed; fix the code, "
                                               "not the checks"))
    if verification.allowed_files:
        stray = sorted(p for p, entry in sandbox.manifest().items() if entry and entry[0] != "d"
                       and not any(fnmatch.fnmatchcase(p, pattern) for pattern in verification.allowed_files))
        for path in stray[:_LISTED]:
            errors.append(LayerFailure(code="unexpected_file",
                                       message=f"{path} is not among the task's files; remove it (debris)"))
        if len(stray) > _LISTED:
            errors.append(LayerFailure(code="unexpected_file", message=f"... and {len(stray) - _LISTED} more"))
    return LayerVerdict(layer="functional", accepted=not errors, errors=tuple(errors), checks=runs,
                        tree_sha256=sandbox.workspace_hash())
