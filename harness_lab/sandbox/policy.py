"""What a sandbox allows: mode, tools, network, timeouts per tool type and quotas.

A policy is a frozen record fixed when the sandbox is built; the model can never change it
(an action that tries is the runtime's business, not the sandbox's).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness_lab.sandbox.netallow import parse_allowlist

__all__ = [
    "FILE_TOOLS",
    "IRREVERSIBLE_TOOLS",
    "TOOLS",
    "ChangeTracking",
    "Isolation",
    "PathResolution",
    "Quotas",
    "SandboxMode",
    "SandboxPolicy",
    "isolation_at_least",
]

SandboxMode = Literal["workspace-write", "read-only"]
PathResolution = Literal["auto", "openat2", "walk"]
# "required": a namespace wrapper, whichever (bwrap, else unshare); refused where neither works.
Isolation = Literal["auto", "required", "bwrap", "unshare", "none"]
ChangeTracking = Literal["auto", "walk"]

FILE_TOOLS: frozenset[str] = frozenset({"read_file", "write_file", "list_dir", "delete_file"})
TOOLS: frozenset[str] = FILE_TOOLS | {"run_command"}
# Calls whose effect cannot be undone without a snapshot (write_file only when it overwrites).
IRREVERSIBLE_TOOLS: frozenset[str] = frozenset({"delete_file", "write_file", "run_command"})

_MIB = 1024 * 1024


class Quotas(BaseModel):
    """Limits applied to every ``run_command`` child (and, where they make sense, to file tools)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_seconds: int = Field(default=60, gt=0)  # RLIMIT_CPU
    memory_bytes: int = Field(default=2048 * _MIB, gt=0)  # RLIMIT_AS (address space)
    max_processes: int = Field(default=128, gt=0)  # RLIMIT_NPROC for the sandbox uid
    file_size_bytes: int = Field(default=256 * _MIB, gt=0)  # RLIMIT_FSIZE; also caps write_file
    open_files: int = Field(default=256, gt=3)  # RLIMIT_NOFILE
    output_bytes: int = Field(default=10 * _MIB, gt=0)  # stdout+stderr cap; also caps read_file, list_dir
    # The size of each private tmpfs a command gets (/tmp, /var/tmp, /dev/shm, /run): its pages are
    # memory not charged to RLIMIT_AS, so without a cap a command could fill the host's memory.
    scratch_bytes: int = Field(default=512 * _MIB, gt=0)
    # The workspace's total size (regular files): a write_file past it is refused; a command that leaves
    # the workspace past it has its changes rolled back before the snapshot store copies any of it.
    workspace_bytes: int = Field(default=1024 * _MIB, gt=0)


class SandboxPolicy(BaseModel):
    """The stated policy of one sandbox.

    ``timeouts`` maps a tool type to seconds; ``run_command(tool_type=...)`` picks one and a
    caller-supplied ``timeout`` may only shorten it. ``network_allow`` empty means the child gets
    a private network namespace with nothing in it; ``("127.0.0.1:8001", "example.org:443")`` keeps
    that namespace and makes only those TCP destinations reachable from it (see
    :mod:`harness_lab.sandbox.netallow`; refused in isolation "none"). ``run_as_uid`` is the
    unprivileged uid a root parent drops to (``None``: derived from the workspace path, see
    :mod:`harness_lab.sandbox.command`). ``change_tracking="auto"`` keeps a change journal
    (inotify) so rollback, ``workspace_hash`` and snapshots cost what changed; ``"walk"`` proves
    the workspace by walking it instead (see :mod:`harness_lab.sandbox.journal`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: SandboxMode = "workspace-write"
    allowed_tools: frozenset[str] = TOOLS
    network_allow: tuple[str, ...] = ()
    timeouts: dict[str, float] = Field(
        default_factory=lambda: {"default": 30.0, "install": 300.0, "query": 30.0, "build": 120.0}
    )
    quotas: Quotas = Field(default_factory=Quotas)
    run_as_uid: int | None = Field(default=None, gt=0)
    path_resolution: PathResolution = "auto"
    isolation: Isolation = "auto"
    change_tracking: ChangeTracking = "auto"

    @field_validator("allowed_tools")
    @classmethod
    def _known_tools(cls, value: frozenset[str]) -> frozenset[str]:
        unknown = sorted(value - TOOLS)
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {sorted(TOOLS)}")
        return value

    @field_validator("network_allow")
    @classmethod
    def _valid_destinations(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_allowlist(value)  # a one-line ValueError naming the first bad entry
        return value

    @field_validator("timeouts")
    @classmethod
    def _positive_timeouts(cls, value: dict[str, float]) -> dict[str, float]:
        if "default" not in value:
            raise ValueError("timeouts needs a 'default' entry")
        bad = sorted(k for k, v in value.items() if not v > 0)
        if bad:
            raise ValueError(f"timeouts must be > 0 seconds: {bad}")
        return value

    def allows(self, tool: str) -> bool:
        """True when ``tool`` may run at all under this policy (mode and allow-list)."""
        if tool not in self.allowed_tools:
            return False
        return not (self.mode == "read-only" and tool in ("write_file", "delete_file"))


def isolation_at_least(floor: Isolation, asked: Isolation) -> Isolation:
    """The isolation that honours ``floor`` (a contract's demand, or what a stored run recorded) and
    ``asked`` (the caller's choice). "auto" asks for nothing, so ``floor`` stands; a floor of "auto" or
    "none" demands nothing, so ``asked`` stands; "required" may be narrowed to a named wrapper. A
    ValueError (one line) when ``asked`` would weaken the floor or names the other wrapper."""
    if asked == "auto" or asked == floor:
        return floor
    if floor in ("auto", "none") or (floor == "required" and asked in ("bwrap", "unshare")):
        return asked
    raise ValueError(f"isolation {asked!r} would weaken the isolation {floor!r} this run must keep")
