"""A wrong-type argument to the manager's public methods is a one-line ValueError naming it, not an
AttributeError or a slicing TypeError from deep inside (and True is not an offset)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness_lab.context import ContextManager, Layer


def _with_ref() -> tuple[ContextManager, str]:
    ctx = ContextManager(output_cap_bytes=1024)
    item = ctx.add_interaction(1, "dump", "line\n" * 1000, source="run_command:dump")
    assert item.ref_id is not None
    return ctx, item.ref_id


def _not_none(value: object) -> object:
    return 1.5 if value is None else value  # (None is a valid key: "no key")


CALLS: dict[str, tuple[Callable[[ContextManager, Any], object], str]] = {
    "mark_stale": (lambda c, v: c.mark_stale(v), "key_or_source"),
    "add_feedback text": (lambda c, v: c.add_feedback(1, v, source="validate"), "text"),
    "add_feedback source": (lambda c, v: c.add_feedback(1, "failed", source=v), "source"),
    "add_feedback key": (lambda c, v: c.add_feedback(1, "failed", source="validate", key=_not_none(v)), "key"),
    "add text": (lambda c, v: c.add(Layer.L1, v, source="task", round=0), "text"),
    "begin_subtask": (lambda c, v: c.begin_subtask(v, "goal", round=1), "name"),
    "finish_subtask": (lambda c, v: c.finish_subtask("s", v, round=1), "conclusion"),
    "summarize": (lambda c, v: c.summarize(v, round=1, source="s"), "text"),
    "add_resume_note": (lambda c, v: c.add_resume_note(v, round=1), "text"),
    "add_interaction action": (lambda c, v: c.add_interaction(1, v, "ok", source="s"), "action"),
    "add_interaction result": (lambda c, v: c.add_interaction(1, "a", v, source="s"), "result"),
    "add_interaction source": (lambda c, v: c.add_interaction(1, "a", "ok", source=v), "source"),
    "add_interaction key": (lambda c, v: c.add_interaction(1, "a", "ok", source="s", key=_not_none(v)), "key"),
    "add_interaction non-ascii action": (lambda c, v: c.add_interaction(1, "é", v, source="s"), "result"),
}


@pytest.mark.parametrize("value", [None, 3, b"bytes"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_text_argument_that_is_not_a_str_is_refused_by_name(call: str, value: object) -> None:
    fn, name = CALLS[call]
    ctx = ContextManager()
    with pytest.raises(ValueError, match=rf"^{name} must be a str, got "):
        fn(ctx, value)
    assert ctx.total_tokens == 0  # nothing was half-added
    fn(ctx, "ok")  # a str is taken


@pytest.mark.parametrize(("start", "end", "name"), [("a", None, "start"), (True, None, "start"), (1.5, None, "start"),
                                                    (0, "9", "end"), (0, False, "end"), (None, None, "start")])
def test_read_ref_offsets_must_be_ints(start: object, end: object, name: str) -> None:
    ctx, ref = _with_ref()
    with pytest.raises(ValueError, match=rf"^{name} must be an int"):
        ctx.read_ref(ref, start, end)  # type: ignore[arg-type]


@pytest.mark.parametrize("ref", [None, 1, b"ref_001"])
def test_read_ref_id_must_be_a_str(ref: object) -> None:
    ctx, good = _with_ref()
    with pytest.raises(ValueError, match="^ref_id must be a str"):
        ctx.read_ref(ref, 0, 5)  # type: ignore[arg-type]
    assert ctx.read_ref(good, 5, 15) == ("line\n" * 1000)[5:15] and ctx.read_ref(good, -5) == "line\n"

