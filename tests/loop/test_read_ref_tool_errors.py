"""read_ref as a tool: a wrong id is a refusal, a lost stored text is said to be the environment's fault,
and a range past the end says so with the output's length."""

from __future__ import annotations

from harness_lab.context import ContextManager
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.executor import Outbox, ToolExecutor
from harness_lab.records.actions import ReadRef

PAYLOAD = "line\n" * 1000  # 5000 characters


def _executor(ctx: ContextManager) -> ToolExecutor:
    return ToolExecutor(sandbox=None, evidence=EvidenceCatalogue({}), report_path="report.md",  # type: ignore[arg-type]
                        read_ref=ctx.read_ref, effects=Outbox())


def _stored() -> tuple[ContextManager, str]:
    ctx = ContextManager(output_cap_bytes=1024)
    item = ctx.add_interaction(1, "dump", PAYLOAD, source="run_command:dump")
    assert item.ref_id is not None
    return ctx, item.ref_id


def test_a_known_reference_whose_text_is_lost_says_the_store_lost_it() -> None:
    ctx, ref = _stored()
    lost = ContextManager.from_state(ctx.state(ref_texts=False), ref_loader=lambda sha: None)
    unknown = _executor(lost).execute(ReadRef(ref="ref_099"), "k")  # the model's mistake: a plain refusal
    assert unknown.reason == "no stored output with reference 'ref_099'"
    result = _executor(lost).execute(ReadRef(ref=ref), "k")
    assert not result.ok and result.reason is not None and result.hint is not None
    assert result.reason.startswith(f"{ref} exists but its stored text could not be loaded")
    assert "store does not hold it" in result.reason
    assert "lost this output" in result.hint


def test_a_range_past_the_end_gives_the_outputs_length() -> None:
    ctx, ref = _stored()
    inside = _executor(ctx).execute(ReadRef(ref=ref, start=4995), "k")
    assert inside.ok and inside.content == "line\n"
    result = _executor(ctx).execute(ReadRef(ref=ref, start=6000, end=7000), "k")
    assert not result.ok and result.reason is not None and result.hint is not None
    assert result.reason == f"start 6000 is past the end of {ref}, which holds 5000 characters"
    assert f"read_ref('{ref}', 3000, 5000)" in result.hint

