"""Text that cannot be UTF-8 (lone surrogates, e.g. a file name with a non-UTF-8 byte decoded by
os.listdir) enters the context readable instead of crashing the step."""

from __future__ import annotations

import json

from harness_lab.context import ContextManager, Layer

BAD = "bad\udcff.txt"


def test_a_result_naming_a_non_utf8_file_is_added_with_a_replacement_character() -> None:
    ctx = ContextManager(output_cap_bytes=200)
    item = ctx.add_interaction(1, f"read_file {BAD}", f"listing: {BAD}", source=f"read_file:{BAD}", key=f"file:{BAD}")
    assert "\udcff" not in item.render() and "bad\ufffd.txt" in item.text
    view = ctx.view().render().encode("utf-8")  # the model's text is valid UTF-8
    assert b"bad\xef\xbf\xbd.txt" in view
    assert [i.id for i in ctx.mark_stale(f"file:{BAD}")] == [item.id]  # the same spelling still matches


def test_a_large_output_with_a_surrogate_is_stored_and_read_back() -> None:
    ctx = ContextManager(output_cap_bytes=100)
    item = ctx.add_interaction(1, "ls", f"{BAD}\n" * 50, source="run_command")
    assert item.layer is Layer.L5 and item.ref_id is not None
    assert ctx.read_ref(item.ref_id, 0, 9) == "bad\ufffd.txt\n"
    json.dumps(ctx.state()).encode("utf-8")


def test_every_entry_point_takes_such_text() -> None:
    ctx = ContextManager()
    ctx.add(Layer.L2, BAD, source=BAD, round=0, key=BAD)
    ctx.add_feedback(1, BAD, source=BAD, key=BAD)
    ctx.begin_subtask(BAD, BAD, round=1)
    ctx.finish_subtask(BAD, BAD, round=2)
    ctx.summarize(BAD, round=3, source=BAD, key=BAD)
    ctx.add_resume_note(BAD, round=4)
    assert "\udcff" not in ctx.view().render()
