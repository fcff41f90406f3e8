"""The proposer protocol: anything that maps the context view to a raw proposal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..context import ContextView
from ._counts import whole_count

__all__ = ["EndpointFailure", "ProposerOutput", "Proposer", "StatefulProposer"]


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


@dataclass(frozen=True)
class EndpointFailure:
    """The endpoint behind a proposer failed, not the model: no proposal this time.

    A run records it as an endpoint event, never as the model's output: it is not fed back into the
    context, charges no decision and no tokens; consecutive failures park the run WAITING_FOR_ENDPOINT
    (``endpoint_unavailable``), from which a later step, or a resume, asks again."""

    reason: str  # one line, any key masked
    status: int | None = None  # the HTTP status; None when no HTTP reply came (down, timeout, not HTTP)
    attempts: int = 1  # calls made for this proposal, retries included
    retryable: bool = True  # False: asking again will not help (a wrong key, an unknown model or URL)

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError(f"EndpointFailure.reason: a non-empty text, got {self.reason!r}")
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"EndpointFailure.attempts: a whole number >= 1, got {self.attempts!r}")


class Proposer(Protocol):
    def propose(self, view: ContextView) -> object:
        """Return a raw proposal (a mapping with ``kind``), a :class:`ProposerOutput`, or an
        :class:`EndpointFailure` when the endpoint behind it (not the model) failed."""
        ...


@runtime_checkable
class StatefulProposer(Protocol):
    """A proposer whose position can be checkpointed, rolled back and resumed."""

    def propose(self, view: ContextView) -> object: ...

    def state(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...
