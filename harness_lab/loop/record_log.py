"""``run.records`` and ``run.events`` of a run without a store: a list-like trace whose old entries are packed.

A run without a store keeps its whole trace in memory; as frozen pydantic objects a no-op step costs
~2.5 KiB (+24.7 MiB over 10,000 steps), and every full collection of the garbage collector walks them
again. :class:`RecordLog` keeps the newest entries as they were appended (the tail: what the loop, the
faults and the widgets read) and packs the oldest ones ``batch`` at a time, in one pass over plain tuples:

* a step record made the usual way (:mod:`harness_lab.loop._step_records`: its events the step's own
  ``proposed`` / ``tool_called`` of its proposal, decision and result) becomes one tuple of ints, floats
  and strings plus indexes into the log's table of the objects records share (decisions, tool results,
  states; proposals equal in every field are held once), made when its batch is packed; a batch's
  tuples become one ``marshal`` text, which the garbage collector never walks; events likewise;
* anything else (a record built by hand or read from a store, a note, a state change) is held as it was,
  in the table.

Reading an old entry rebuilds its batch (the last one rebuilt is cached: iterating is linear); what it
returns equals what was appended, field by field. A run with a store does not pack: it trims its trace
to a window, the rest is in the store.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

from ..records.events import Decision, Event, Proposed, StepRecord, ToolCalled
from ..records.flat import shared_fields
from ..records.proposal import Proposal, parse_proposal
from ._step_records import (
    _PROPOSED_SET,
    _STEP_SET,
    _TOOL_SET,
    _USAGE_SET,
    proposed,
    step_record,
    tool_called,
    usage,
)

__all__ = ["RecordLog", "trace_logs"]

# The fields set of a proposal that records.proposal's flat parse built (it alone builds them with this
# shared set): parse_proposal(its raw) gives it again, equal field by field, so its row holds only the raw.
_PARSED = shared_fields(("raw", "action", "claims"))

T = TypeVar("T")

# A packed batch: how many entries, the marshal text of their rows, the objects the rows index.
_Chunk = tuple[int, bytes, list[Any]]
Row = tuple[Any, ...]


class RecordLog(Sequence[T], Generic[T]):
    """A sequence read as a list (index, slice, iterate, ``len``, ``==`` a list), appended to at its end and
    trimmed (``del log[a:b]``) as a list is. With ``row`` (an entry to its row, plain data), ``unpack`` (rows
    back to entries) and ``objects`` (the list the rows index) it packs: once ``keep + batch`` entries are
    held whole, the oldest ``batch`` are made rows, in one loop, their rows one marshal text, and those
    entries are let go. Without them it never packs."""

    __slots__ = ("_batch", "_cached", "_chunks", "_keep", "_limit", "_objects", "_packed", "_row",
                 "_tail", "_unpack")

    def __init__(self, row: Callable[[T], Row] | None = None,
                 unpack: Callable[[list[Row], list[Any]], list[T]] | None = None, objects: list[Any] | None = None,
                 *, keep: int = 64, batch: int = 1024) -> None:
        if not (row is None) == (unpack is None) == (objects is None) or keep < 0 or batch < 1:
            raise ValueError("RecordLog: row, unpack and objects go together; keep >= 0, batch >= 1")
        self._row, self._unpack, self._objects, self._keep, self._batch = row, unpack, objects, keep, batch
        self._limit = keep + batch if unpack is not None else -1  # the tail's length that packs a batch
        self._chunks: list[_Chunk] = []
        self._packed = 0  # entries in _chunks, every chunk one full batch
        self._tail: list[T] = []
        self._cached: tuple[int, list[T]] = (-1, [])  # the last chunk rebuilt, by its number

    # -- writing --------------------------------------------------------------------------------
    def append(self, entry: T) -> None:
        tail = self._tail
        tail.append(entry)
        if len(tail) == self._limit:  # (-1 when not packing)
            self._pack_oldest()

    def _pack_oldest(self) -> None:
        size, row = self._batch, self._row
        assert row is not None
        # Made here, a batch at a time, not as each entry is appended: the loop's code and data stay in the
        # CPU's caches (a no-store step 2 µs less, measured), and an entry 16-48 steps old is still in them.
        rows = [row(entry) for entry in self._tail[:size]]
        try:
            text, objects = marshal.dumps(rows), self._objects
        except ValueError:  # a value marshal cannot hold (a record built by hand): the batch stays whole
            text, objects = marshal.dumps([(i,) for i in range(size)]), self._tail[:size]
        assert objects is not None
        self._chunks.append((size, text, objects))
        self._packed += size
        del self._tail[:size]

    def __delitem__(self, index: int | slice) -> None:
        start, stop, stride = (index if isinstance(index, slice) else slice(index, index + 1 or None)).indices(len(self))
        if stride == 1 and start >= self._packed:  # the usual: a stored run's window, an abandoned step's events
            cut = slice(start - self._packed, max(stop - self._packed, 0))
            del self._tail[cut]
            return
        whole = list(self)  # rare: the packed part is cut into; what is left is appended again
        del whole[index]
        self._chunks, self._packed, self._tail, self._cached = [], 0, [], (-1, [])
        for entry in whole:
            self.append(entry)

    def stop_packing(self) -> None:
        """Hold every entry as it is from now on, unpacked (a run given its store after it was made: the
        store holds its past and a window of it stays in memory; making rows for it was work for nothing)."""
        if self._packed:
            self._tail = list(self)
            self._chunks, self._packed, self._cached = [], 0, (-1, [])
        self._limit = -1

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._packed + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._tail) or self._packed > 0

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        packed = self._packed
        if isinstance(index, slice):
            start, stop, stride = index.indices(packed + len(self._tail))
            if stride == 1 and start >= packed:
                return self._tail[start - packed: max(stop - packed, 0)]
            return [self[i] for i in range(start, stop, stride)]
        if index >= packed:
            return self._tail[index - packed]  # IndexError past the end, as a list's
        if index < 0:
            if index >= -len(self._tail):
                return self._tail[index]
            index += packed + len(self._tail)
            if index < 0:
                raise IndexError("trace index out of range")
        return self._chunk(index // self._batch)[index % self._batch]

    def _chunk(self, number: int) -> list[T]:
        if self._cached[0] != number:
            assert self._unpack is not None
            _, text, objects = self._chunks[number]
            self._cached = (number, self._unpack(marshal.loads(text), objects))
        return self._cached[1]

    def __iter__(self) -> Iterator[T]:
        for number in range(len(self._chunks)):
            yield from self._chunk(number)
        yield from self._tail

    def __reversed__(self) -> Iterator[T]:
        yield from reversed(self._tail)
        for number in reversed(range(len(self._chunks))):
            yield from reversed(self._chunk(number))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordLog, list)):  # as a list: never equal to a tuple
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"RecordLog({len(self)} entries, {self._packed} packed)"

    @property
    def packed(self) -> int:
        """How many of the oldest entries are held packed."""
        return self._packed


def trace_logs(*, keep: int = 16, batch: int = 32,
               pack: bool = True) -> tuple[RecordLog[StepRecord], RecordLog[Event]]:
    """A run's ``records`` and ``events`` (``pack`` False: never packed, for a run whose store holds its
    past). Events: twice the records' sizes (a usual step makes two). ``batch`` 32: a usual step leaves ~13
    objects the collector tracks until its batch is packed, so 32 steps (~420) are let go before the youngest
    generation fills (700): they die young. At 64 they outlived a collection every ~100 steps and a full one every ~10,000
    (~4 µs a step of the garbage collector's, measured; 0.1 at 32)."""
    if not pack:
        return RecordLog(), RecordLog()
    table = _Table()  # what the rows of both share, held once
    records = RecordLog(table.record_row, table.unpack_records, table.objects, keep=keep, batch=batch)
    events = RecordLog(table.event_row, table.unpack_events, table.objects, keep=2 * keep, batch=2 * batch)
    return records, events


class _Table:
    """The objects a run's records and events share, each held once and named by its index in the rows:
    by identity, and a proposal also by content (a loop proposes the same call again and again: one equal
    object serves them all). Objects no row shares (a tool result of its own) are held here as they were.
    A row is a few dict lookups, and none for the objects the previous record named."""

    __slots__ = ("by_content", "by_id", "objects", "shared", "shared_at")

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.by_id: dict[int, int] = {}  # safe: every object named here stays alive in ``objects``
        # (a proposal's canonical JSON, its raw's keys in order) -> the last one held with them
        self.by_content: dict[tuple[Any, ...], int] = {}
        # The previous record's states, decision, result and verdict, and their indexes.
        self.shared: tuple[Any, ...] = ()
        self.shared_at: tuple[int, ...] = ()

    def ref(self, obj: object) -> int:
        at = self.by_id.get(id(obj))
        if at is None:
            at = self.by_id[id(obj)] = len(self.objects)
            self.objects.append(obj)
        return at

    def said(self, proposal: Any) -> Any:
        """A proposal in a row: its raw (a dict) when parsing it again gives it back, else its index."""
        if proposal.__pydantic_fields_set__ is _PARSED and type(proposal) is Proposal \
                and type(raw := proposal.__dict__["raw"]) is dict:
            return raw
        return self.proposal(proposal)

    def proposal(self, proposal: Any) -> int:
        at = self.by_id.get(id(proposal))
        if at is not None:
            return at
        d = proposal.__dict__
        action, raw, text = d["action"], d["raw"], d.get("canonical")
        plain = action is not None and d["error"] is None and not d["claims"] and type(raw) is dict
        key = (text, *raw) if plain and type(text) is str else None  # its canonical JSON (made by the gates), raw keys
        if key is not None:
            at = self.by_content.get(key)
            if at is not None:
                # Equal, field by field: the same raw (keys in order), the same action type and values, the
                # same fields sets; no error, no claims (as every proposal named in by_content).
                same = self.objects[at]
                was = same.__dict__
                if not (type(same) is type(proposal) and was["raw"] == raw and tuple(was["raw"]) == tuple(raw)
                        and type(was["action"]) is type(action) and was["action"].__dict__ == action.__dict__
                        and same.__pydantic_fields_set__ == proposal.__pydantic_fields_set__
                        and was["action"].__pydantic_fields_set__ == action.__pydantic_fields_set__):
                    at = None
        if at is None:
            at = len(self.objects)
            self.objects.append(proposal)
            if key is not None:
                self.by_content[key] = at
            else:
                self.by_id[id(proposal)] = at
        return at

    # The usual step record's row: (step, proposal (its raw, or its index), before, after, decision, result,
    # verdict, decisions, tool_calls, tokens, elapsed_s, events); its events: (seq, seq, tool) the step's own proposed and
    # tool_called, else one entry each: (seq,) a proposed, (seq, tool) a tool_called of the record's own
    # objects, (-1 - index,) any other. A row of one int: the record, whole, in the table.
    def record_row(self, record: StepRecord) -> Row:
        d = record.__dict__
        used = d["usage"]
        if type(record) is not StepRecord or record.__pydantic_fields_set__ is not _STEP_SET or \
                used.__pydantic_fields_set__ is not _USAGE_SET:
            return (self.ref(record),)
        step, proposal, decision, result = d["step"], d["proposal"], d["decision"], d["tool_result"]
        before, after, verdict, shared = d["state_before"], d["state_after"], d["verdict"], self.shared
        if not (shared and before is shared[0] and after is shared[1] and decision is shared[2]
                and result is shared[3] and verdict is shared[4]):
            ref = self.ref
            self.shared = (before, after, decision, result, verdict)
            self.shared_at = (ref(before), ref(after), ref(decision), ref(result), ref(verdict))
        if proposal is None:
            said: Any = -1
        elif not (proposal.__pydantic_fields_set__ is _PARSED and type(proposal) is Proposal
                  and type(said := proposal.__dict__["raw"]) is dict):  # (self.said, inline: every step)
            said = self.proposal(proposal)
        events = d["events"]
        listed: Row | None = None
        if len(events) == 2 and type(first := events[0]) is Proposed and type(then := events[1]) is ToolCalled:
            e, f = first.__dict__, then.__dict__  # the usual step: its proposal, then its tool's result
            if (e["proposal"] is proposal and e["decision"] is decision and f["result"] is result
                    and e["step"] == step == f["step"] and type(f["tool"]) is str
                    and first.__pydantic_fields_set__ is _PROPOSED_SET and then.__pydantic_fields_set__ is _TOOL_SET):
                listed = (e["seq"], f["seq"], f["tool"])
        if listed is None:
            listed = tuple([self._event_entry(event, step, proposal, decision, result) for event in events])
        u = used.__dict__
        return (step, said, *self.shared_at, u["decisions"], u["tool_calls"], u["tokens"], u["elapsed_s"], listed)

    def _event_entry(self, event: Event, step: int, proposal: Any, decision: Any, result: Any) -> Row:
        e, kind = event.__dict__, type(event)
        if kind is Proposed and e["proposal"] is proposal and e["decision"] is decision and e["step"] == step \
                and event.__pydantic_fields_set__ is _PROPOSED_SET:
            return (e["seq"],)
        if kind is ToolCalled and e["result"] is result and e["step"] == step and type(e["tool"]) is str \
                and event.__pydantic_fields_set__ is _TOOL_SET:
            return (e["seq"], e["tool"])
        return (-1 - self.ref(event),)

    @staticmethod
    def unpack_records(rows: list[Row], objects: list[Any]) -> list[StepRecord]:
        out: list[StepRecord] = []
        for row in rows:
            if len(row) == 1:
                out.append(objects[row[0]])
                continue
            step, said, before, after, decided, done, verdict, decisions, tool_calls, tokens, elapsed, listed = row
            proposal: Any = parse_proposal(said) if type(said) is dict else None if said < 0 else objects[said]
            decision, result = objects[decided], objects[done]
            if listed and type(listed[0]) is int:  # the usual pair
                events: tuple[Event, ...] = (proposed(listed[0], step, proposal, decision),
                                             tool_called(listed[1], step, listed[2], result))
            else:
                events = tuple([objects[-1 - entry[0]] if entry[0] < 0 else
                                proposed(entry[0], step, proposal, decision) if len(entry) == 1 else
                                tool_called(entry[0], step, entry[1], result) for entry in listed])
            out.append(step_record(step, objects[before], objects[after], proposal, decision, result,
                                   objects[verdict], usage(decisions, tool_calls, tokens, elapsed), events))
        return out

    # An event's row: (seq, step, proposal (raw or index), decision) a proposed, (seq, step, tool, result) a
    # tool_called (tool a str), (index,) any other, whole in the table.
    def event_row(self, event: Event) -> Row:
        kind, e = type(event), event.__dict__
        if kind is Proposed and event.__pydantic_fields_set__ is _PROPOSED_SET and type(e["decision"]) is Decision:
            return (e["seq"], e["step"], self.said(e["proposal"]), self.ref(e["decision"]))
        if kind is ToolCalled and event.__pydantic_fields_set__ is _TOOL_SET and type(e["tool"]) is str:
            return (e["seq"], e["step"], e["tool"], self.ref(e["result"]))
        return (self.ref(event),)

    @staticmethod
    def unpack_events(rows: list[Row], objects: list[Any]) -> list[Event]:
        out: list[Event] = []
        for row in rows:
            if len(row) == 1:
                out.append(objects[row[0]])
            elif type(said := row[2]) is str:
                out.append(tool_called(row[0], row[1], said, objects[row[3]]))
            else:
                proposal = parse_proposal(said) if type(said) is dict else objects[said]
                out.append(proposed(row[0], row[1], proposal, objects[row[3]]))
        return out
