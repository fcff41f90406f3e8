"""The step's records, built without re-validation (``harness_lab.loop._step_records``), are the very
records the validated constructors make: equal, same dump, same set fields, same hash (or
the same refusal), frozen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from harness_lab import Run
from harness_lab.loop._step_records import proposed, step_record, tool_called, usage
from harness_lab.records.events import Proposed, StepRecord, ToolCalled, Usage

_SCENARIOS = ("conforming_report", "endless_tool_calls", "missing_section_then_fixed", "sets_run_state",
              "no_report_claims_done")


def _validated(record: BaseModel) -> BaseModel:
    """The same record through its class's validating constructor (the fields a keyword call names)."""
    names = [n for n in type(record).model_fields if n != "kind"]
    return type(record)(**{n: getattr(record, n) for n in names})


def _hash(record: BaseModel) -> object:
    try:
        return hash(record)
    except TypeError as err:  # a record holding a dict is unhashable either way
        return str(err)


def _same(built: BaseModel, made: BaseModel) -> None:
    assert type(built) is type(made)
    assert built == made
    assert built.model_dump(mode="json") == made.model_dump(mode="json")
    assert built.model_dump_json() == made.model_dump_json()
    assert built.model_fields_set == made.model_fields_set
    assert repr(built) == repr(made)
    assert _hash(built) == _hash(made)


@pytest.mark.parametrize("scenario", _SCENARIOS)
def test_a_runs_records_equal_their_validated_forms(tmp_path: Path, scenario: str) -> None:
    with Run.from_scenario(scenario, workspace=tmp_path / "ws") as run:
        run.run(max_steps=40)
        kinds: set[str] = set()
        for record in run.records:
            _same(record, _validated(record))
            _same(record.usage, _validated(record.usage))
            for event in record.events:
                if isinstance(event, (Proposed, ToolCalled)):
                    kinds.add(event.kind)
                    _same(event, _validated(event))
        assert kinds == {"proposed", "tool_called"}, "the run made both hot-path events"


def test_each_builder_matches_its_constructor(tmp_path: Path) -> None:
    with Run.from_scenario("conforming_report", workspace=tmp_path / "ws") as run:
        record = run.step()
    assert record.proposal is not None and record.tool_result is not None
    used = usage(3, 2, 120, 1)  # an int elapsed reads back as a float, as validation makes it
    _same(used, Usage(decisions=3, tool_calls=2, tokens=120, elapsed_s=1))
    assert type(used.elapsed_s) is float
    event = proposed(7, 2, record.proposal, record.decision)
    _same(event, Proposed(seq=7, step=2, proposal=record.proposal, decision=record.decision))
    called = tool_called(8, 2, "read_file", record.tool_result)
    _same(called, ToolCalled(seq=8, step=2, tool="read_file", result=record.tool_result))
    args: dict[str, Any] = {"step": 2, "state_before": record.state_before, "state_after": record.state_after,
                            "proposal": record.proposal, "decision": record.decision,
                            "tool_result": record.tool_result, "verdict": None, "usage": used,
                            "events": (event, called)}
    built = step_record(*args.values())
    _same(built, StepRecord(**args))
    assert StepRecord.model_validate(built.model_dump()) == built  # and it round-trips
    with pytest.raises(ValidationError):
        built.step = 3  # type: ignore[misc]  # frozen like the validated one


def test_records_built_alike_share_one_read_only_fields_set(tmp_path: Path) -> None:
    import copy
    import pickle

    from harness_lab.records.flat import SharedFieldsSet

    with Run.from_scenario("conforming_report", workspace=tmp_path / "ws") as run:
        first, second = run.step(), run.step()
    shared = first.model_fields_set
    assert isinstance(shared, SharedFieldsSet) and shared is second.model_fields_set  # one set, not one each
    assert first.proposal is not None and second.proposal is not None
    assert first.proposal.model_fields_set is second.proposal.model_fields_set
    for mutate in (lambda s: s.add("x"), lambda s: s.discard("step"), lambda s: s.update({"x"}), lambda s: s.clear()):
        with pytest.raises(TypeError, match="read-only"):
            mutate(shared)
    with pytest.raises(TypeError, match="read-only"):
        shared |= {"x"}
    assert shared == set(StepRecord.model_fields) - {"kind"}  # untouched by the attempts
    # pydantic's copies take a plain set of their own: an update changes the copy only
    changed = first.model_copy(update={"step": 99})
    assert changed.step == 99 and type(changed.model_fields_set) is set and "step" in changed.model_fields_set
    assert first.model_fields_set is shared and second.model_fields_set is shared
    deep = first.model_copy(deep=True)
    assert deep == first and type(deep.model_fields_set) is set
    for plain in (copy.copy(shared), copy.deepcopy(shared), shared.copy(), pickle.loads(pickle.dumps(shared))):
        assert type(plain) is set and plain == shared
    assert pickle.loads(pickle.dumps(first)) == first
