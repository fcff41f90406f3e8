"""The proposer protocol: anything that maps the context view to a raw proposal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..context import ContextView
from ._counts import whole_count

__all__ = ["ProposerOutput", "Proposer", "StatefulProposer"]


@dataclass(frozen=True)
class ProposerOutput:
    """A raw proposal plus the tokens the proposer reports it spent (e.g. an endpoint's usage)."""

    raw: object
    tokens: int | None = None

    def __post_init__(self) -> None:
        # The run charges its budget with this count: a negative one would credit it, NaN would
        # switch the token budget off (nan >= limit is never true), a string would crash the step.
        tokens = self.tokens
        if tokens is not None and whole_count(tokens) is None:
            raise ValueError(f"ProposerOutput.tokens: must be a whole number >= 0 or None, got {tokens!r}")


class Proposer(Protocol):
    def propose(self, view: ContextView) -> object:
        """Return a raw proposal (a mapping with ``kind``) or a :class:`ProposerOutput`."""
        ...


@runtime_checkable
class StatefulProposer(Protocol):
    """A proposer whose position can be checkpointed, rolled back and resumed."""

    def propose(self, view: ContextView) -> object: ...

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...
