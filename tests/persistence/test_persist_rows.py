"""The compact forms a checkpoint row stores read back to exactly what was written."""

from __future__ import annotations

import itertools

from persisthelpers import CountingOutbox, push_run

from harness_lab import Run
from harness_lab.context import ContextItem, Layer
from harness_lab.persistence.row_text import dump_step_row
from harness_lab.records.events import load_step_row
from harness_lab.scenarios import list_scenarios


def test_every_step_record_of_every_scenario_reads_back_equal(tmp_path) -> None:
    records = []
    for name in list_scenarios():
        with Run.from_scenario(name, workspace=tmp_path / name) as run:
            run.run()
            records.extend(run.records)
    with push_run(tmp_path / "push", None, CountingOutbox()) as run:  # a gated push: human-decided events
        run.run()
        records.extend(run.records)
    assert len(records) > 40 and any(r.tool_result is None for r in records)
    shared = 0
    for record in records:
        row = dump_step_row(record)
        shared += row.count('"same":true')
        assert load_step_row(row) == record, record.summary()
        assert load_step_row(record.model_dump_json()) == record  # the plain form (older rows) still reads
        assert len(row) <= len(record.model_dump_json())
    assert shared >= len(records), "most steps' events repeat the record's proposal and result"


def test_an_item_at_its_defaults_is_stored_without_them_and_reads_back_equal() -> None:
    seen = 0
    for role, pinned, key, status, covers, segment in itertools.product(
            ["note", "interaction"], [False, True], [None, "file:a"], ["current", "superseded"], [(), ("c1",)], [0, 3]):
        item = ContextItem(id="c9", layer=Layer.L3, text="t", source="s", round=3, tokens=5, seq=1, role=role,
                           pinned=pinned, key=key, status=status, covers=covers, segment=segment)
        compact = item.to_dict(compact=True)
        assert list(compact)[:2] == ["kind", "id"]  # what the stored-text splitter keys on
        assert ContextItem.from_dict(compact) == item == ContextItem.from_dict(item.to_dict())
        assert set(item.to_dict()) - set(compact) == {
            name for name, value in item.to_dict().items()
            if name not in compact and value in ("note", False, None, "fresh", "current", [], 0)}
        seen += 1
    plain = ContextItem(id="c1", layer=Layer.L2, text="x", source="s", round=1, tokens=1, seq=1)
    assert set(plain.to_dict(compact=True)) == {"kind", "id", "layer", "text", "source", "round", "tokens", "seq"}
    assert seen == 64
