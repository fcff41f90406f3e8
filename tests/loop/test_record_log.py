"""``run.records`` / ``run.events`` of a run without a store pack their old entries
(harness_lab.loop.record_log): what they return after packing equals what was appended, field by field,
however it is read; a long no-op run holds them in a few bytes a step."""

from __future__ import annotations

import gc
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from loophelpers import GOOD, READ_A, READ_B, READ_C, WRITE_GOOD, contract, make_run

import harness_lab.loop.run
from harness_lab.loop.approval import AutoApprove
from harness_lab.loop.record_log import RecordLog, trace_logs
from harness_lab.records.events import Note
from harness_lab.store import SQLiteStore


class Shadowed(RecordLog[Any]):
    """A log that also keeps every entry as appended, in a plain list: what it must read back as."""

    __slots__ = ("shadow",)

    def append(self, entry: Any) -> None:
        self.shadow.append(entry)
        super().append(entry)

    def __delitem__(self, index: int | slice) -> None:
        del self.shadow[index]
        super().__delitem__(index)


def _shadowed(log: RecordLog[Any]) -> Shadowed:
    copy = Shadowed.__new__(Shadowed)
    for slot in RecordLog.__slots__:
        setattr(copy, slot, getattr(log, slot))
    copy.shadow = []
    return copy


def _small_shadowed_logs(monkeypatch: pytest.MonkeyPatch) -> list[Shadowed]:
    made: list[Shadowed] = []

    def logs(**given: Any) -> tuple[Any, Any]:
        pair = [_shadowed(log) for log in trace_logs(keep=3, batch=5, **given)]  # many batches in one short run
        made.extend(pair)
        return pair[0], pair[1]

    monkeypatch.setattr(harness_lab.loop.run, "trace_logs", logs)
    return made


def _script(seed: int) -> list[Any]:
    """Reads, writes, a refused action, a gated push, a rejected and an accepted report, finishing."""
    rnd = random.Random(seed)
    bad_report = {"kind": "write_report", "text": GOOD.replace("## ", "", 2)}
    pool = [READ_A, READ_B, READ_C, {"kind": "write_file", "path": "notes.md", "content": "n"},
            {"kind": "no_such_tool"}, {"kind": "push", "ref": "main"}, bad_report, {"kind": "finish"},
            {"kind": "think", "thought": "again", "verified": True}]  # a claim: a proposal held whole
    return [rnd.choice(pool) for _ in range(70)] + [WRITE_GOOD, {"kind": "finish"}]


def _assert_reads_as_appended(log: Shadowed) -> None:
    plain = log.shadow
    assert len(log) == len(plain) and bool(log) == bool(plain)
    assert list(log) == plain and log == plain and list(reversed(log)) == plain[::-1]
    assert [log[i] for i in range(-len(plain), len(plain))] == plain + plain
    for start, stop in [(0, 4), (2, None), (-7, -1), (None, None), (-3, None), (len(plain) + 3, None)]:
        assert log[start:stop] == plain[start:stop]
    assert log[::3] == plain[::3] and log[::-2] == plain[::-2]
    for got, want in zip(log, plain, strict=True):  # every field, nested ones too, and what was set
        assert type(got) is type(want) and got.model_dump() == want.model_dump()
        assert got.model_dump(exclude_unset=True) == want.model_dump(exclude_unset=True)
    for index in (len(plain), -len(plain) - 1):
        with pytest.raises(IndexError):
            log[index]


@pytest.mark.parametrize("with_store", [False, True], ids=["no_store", "store"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_packed_records_and_events_read_back_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   with_store: bool, seed: int) -> None:
    logs = _small_shadowed_logs(monkeypatch)
    store = SQLiteStore(tmp_path / "store.sqlite") if with_store else None
    run = make_run(tmp_path, _script(seed), contract_=contract(max_decisions=200, max_tool_calls=200, max_tokens=None),
                   approver=AutoApprove(), store=store)
    for at, fault in [(3, "tool_timeout"), (9, "tool_exception"), (14, "empty_result"), (20, "stale_context"),
                      (26, "malformed_proposal")]:
        run.inject(fault, at_step=at)
    while not run.state.terminal and run.step_no < 80:
        run.step()
    run._emit(Note, topic="after", message="a note no record holds yet", data={"n": 1})
    records, events = logs
    assert run.records is records and run.events is events
    kinds = {e.kind for e in events.shadow}
    assert {"proposed", "tool_called", "human_decided", "note", "state_changed"} <= kinds, kinds
    assert any(r.verdict is not None and not r.verdict.accepted for r in records.shadow)
    assert any(e.kind == "note" and e.topic == "fault" for e in events.shadow)
    assert (records.packed > 0 and events.packed > 0) != with_store, "packed without a store, never with one"
    for log in logs:
        _assert_reads_as_appended(log)
    run.close()
    if store is not None:
        store.close()


def test_the_usual_records_are_packed_as_plain_data(tmp_path: Path) -> None:
    """A repeating loop's records hold no object of their own once packed: its few decisions, results and
    equal proposals are held once, the rest is marshal text the collector never walks."""
    records, events = trace_logs(keep=2, batch=8)
    run = make_run(tmp_path, [{"kind": "think", "thought": "a"}, {"kind": "think", "thought": "b"}] * 40, contract_=contract(max_decisions=100, max_tool_calls=100,
                                                                         max_tokens=None))
    plain = [run.step() for _ in range(60)]
    for record in plain:
        records.append(record)
        for event in record.events:
            events.append(event)
    assert records.packed == 56 and events.packed == 112
    for log in (records, events):
        chunks = log._chunks
        assert all(type(text) is bytes and not gc.is_tracked(text) for _, text, _ in chunks)
        shared = chunks[-1][2]
        assert all(table is shared for _, _, table in chunks), "one table"
        # two proposals, their decision and result, the states, the first step's state change: not one per step
        assert len(shared) <= 8, shared
    assert list(records) == plain and list(events) == [e for r in plain for e in r.events]
    run.close()


def test_cutting_into_the_packed_part_keeps_the_rest(tmp_path: Path) -> None:
    records, _ = trace_logs(keep=2, batch=3)
    run = make_run(tmp_path, [READ_A, READ_B] * 10)
    plain = [run.step() for _ in range(11)]
    for record in plain:
        records.append(record)
    assert records.packed == 9
    del records[:4]
    del plain[:4]
    assert list(records) == plain and records.packed == 3  # held again as objects, then packed anew
    del records[-2:]
    del plain[-2:]
    assert records == plain
    del records[1]
    del plain[1]
    assert records == plain and records != tuple(plain)
    run.close()


def test_a_record_marshal_cannot_hold_keeps_its_batch_whole(tmp_path: Path) -> None:
    class Count(int):
        pass

    records, _ = trace_logs(keep=1, batch=2)
    run = make_run(tmp_path, [READ_A, READ_B] * 5)
    plain = [run.step() for _ in range(4)]
    odd = plain[0].model_copy(update={"step": Count(1)})
    odd.__pydantic_fields_set__ = plain[0].__pydantic_fields_set__  # as the run's own builder leaves it
    for record in [odd, *plain[1:]]:
        records.append(record)
    assert records.packed == 2 and records[0] is odd and list(records) == [odd, *plain[1:]]
    run.close()


def test_a_long_run_without_a_store_holds_a_few_bytes_a_step(tmp_path: Path) -> None:
    run = make_run(tmp_path, [{"kind": "think", "thought": "a"}, {"kind": "think", "thought": "b"}] * 600,
                   contract_=contract(max_decisions=2000, max_tool_calls=2000, max_tokens=None))
    for _ in range(1100):
        run.step()
    assert isinstance(run.records, RecordLog) and run.records.packed >= 1000 and run.events.packed >= 2000
    held = sum(sys.getsizeof(text) for log in (run.records, run.events) for _, text, _ in log._chunks)
    assert held / run.records.packed < 200, held  # bytes a step, records and events (as objects: ~2,500)
    assert run.records[5].step == 6 and run.records[-1].step == 1100
    run.close()


def test_proposals_with_one_canonical_form_but_another_raw_are_held_apart(tmp_path: Path) -> None:
    """``list_dir`` and ``list_dir(path=".")`` are one call (one canonical JSON) but not one proposal: a
    packed record gives back the raw its proposer sent, keys in order."""
    script = [{"kind": "list_dir"}, {"kind": "list_dir", "path": "."}, {"path": ".", "kind": "list_dir"},
              {"kind": "think", "thought": "x"}] * 6
    records, events = trace_logs(keep=1, batch=4)
    run = make_run(tmp_path, script, contract_=contract(max_decisions=50, max_tool_calls=50, max_tokens=None))
    plain = [run.step() for _ in range(24)]
    assert len({r.proposal.canonical for r in plain if r.proposal is not None}) == 2
    for record in plain:
        records.append(record)
        for event in record.events:
            events.append(event)
    assert records.packed == 20
    for got, want in zip(records, plain, strict=True):
        assert got == want and got.proposal is not None and want.proposal is not None
        assert list(got.proposal.raw.items()) == list(want.proposal.raw.items())
    for got, want in zip(events, [e for r in plain for e in r.events], strict=True):
        assert got == want and list(got.model_dump()) == list(want.model_dump())
        if got.kind == "proposed":
            assert list(got.proposal.raw.items()) == list(want.proposal.raw.items())
    run.close()


def test_proposals_built_by_hand_are_held_once_when_equal_and_apart_when_not() -> None:
    """A proposal the flat parse did not build is held in the table: once for equal ones (a loop's repeats),
    apart when only the canonical form is the same (``list_dir`` and ``list_dir(path=".")``, keys in order)."""
    from harness_lab.loop._step_records import proposed
    from harness_lab.records.actions import ListDir
    from harness_lab.records.events import Decision
    from harness_lab.records.proposal import Proposal

    raws = [{"kind": "list_dir"}, {"kind": "list_dir", "path": "."}, {"path": ".", "kind": "list_dir"}] * 4
    made = [Proposal(raw=dict(raw), action=ListDir(path=".")) for raw in raws]
    assert len({p.canonical for p in made}) == 1
    decision = Decision(verdict="execute", reason="r")
    _, events = trace_logs(keep=1, batch=2)
    plain = [proposed(i + 1, i + 1, proposal, decision) for i, proposal in enumerate(made)]
    for event in plain:
        events.append(event)
    assert events.packed == 8 and list(events) == plain
    for got, want in zip(events, plain, strict=True):
        assert list(got.proposal.raw.items()) == list(want.proposal.raw.items())
    assert sum(type(o) is Proposal for o in events._chunks[0][2]) == 3, "one per distinct proposal"


def test_rows_are_made_when_a_batch_is_packed_not_as_entries_are_appended() -> None:
    """An entry's row is made once, with its batch (one loop while the batch's entries are still in the
    CPU's caches), not in the step that appends it."""
    made: list[int] = []

    def row(entry: int) -> tuple[int]:
        made.append(entry)
        return (entry,)

    log: RecordLog[int] = RecordLog(row, lambda rows, objects: [r[0] for r in rows], [], keep=2, batch=3)
    for entry in range(4):
        log.append(entry)
    assert made == [] and log.packed == 0  # held whole: no row yet
    log.append(4)  # keep + batch entries held: the oldest batch is packed
    assert made == [0, 1, 2] and log.packed == 3
    assert list(log) == [0, 1, 2, 3, 4] and made == [0, 1, 2]  # reading rebuilds from the rows, makes none
