"""Stored history by relevance: BM25 over what left the view and the stored outputs; ids read_ref opens."""

from __future__ import annotations

import pytest

from harness_lab.context import ContextManager, HistoryIndex, Layer
from harness_lab.context.retrieval import HistoryDoc, tokenize


def _docs() -> list[HistoryDoc]:
    return [
        HistoryDoc("c1", "step 1", 1, "listed 12 files in src", "dropped"),
        HistoryDoc("c2", "step 2", 2, "config lives at config/settings.yaml\nport: 8080", "summarized"),
        HistoryDoc("c3", "step 3", 3, "the port of the admin server is 9090 port port", "dropped"),
        HistoryDoc("c4", "step 4", 4, "配置文件在 config/settings.yaml", "dropped"),
    ]


def test_the_most_relevant_document_ranks_first_with_its_best_line() -> None:
    hits = HistoryIndex(_docs()).search("where is the config settings file", k=3)
    assert [h.id for h in hits][:2] == ["c2", "c4"]
    assert hits[0].excerpt == "config lives at config/settings.yaml"
    assert hits[0].why == "summarized" and hits[0].round == 2


def test_term_frequency_and_rarity_decide_and_no_match_is_no_hit() -> None:
    index = HistoryIndex(_docs())
    assert [h.id for h in index.search("port")] == ["c3", "c2"]  # three mentions beat one
    assert index.search("zebra") == []
    assert [h.id for h in index.search("配置")] == ["c4"]  # CJK characters match without a segmenter
    assert tokenize("Port: 8080, 配置") == ["port", "8080", "配", "置"]


def test_search_history_covers_dropped_items_and_stored_outputs_and_read_ref_opens_both() -> None:
    ctx = ContextManager(budget_tokens=4000, output_cap_bytes=2048)
    ctx.add(Layer.L1, "task", source="task", round=0, pinned=True)
    ctx.add_interaction(1, "read_file settings.yaml", "database: postgres on db.internal", source="step 1")
    big = "\n".join(f"row {n}: user_{n}@example.org active" for n in range(200)) + "\nrow 200: quota exceeded"
    ctx.add_interaction(2, "run_command dump", big, source="step 2")
    ctx.begin_subtask("s", "inspect", round=3)
    ctx.add_interaction(4, "read_file notes.md", "the cache is redis on cache.internal", source="step 4")
    ctx.finish_subtask("s", "inspected", round=5)
    hits = ctx.search_history("redis cache host")
    assert hits[0].why == "subtask process" and hits[0].source == "step 4"
    assert ctx.read_ref(hits[0].id) == "> read_file notes.md\nthe cache is redis on cache.internal"
    stored = ctx.search_history("quota exceeded")
    assert stored[0].id == "ref_001" and stored[0].why == "stored output"
    assert stored[0].excerpt == "row 200: quota exceeded"
    assert ctx.read_ref(stored[0].id).endswith("quota exceeded")
    assert ctx.search_history("postgres") == []  # still whole in the view: not history


@pytest.mark.parametrize(("query", "k", "field"), [("", 5, "query"), ("x", 0, "k"), (3, 5, "query")])
def test_bad_search_input_is_one_line_naming_the_argument(query: object, k: object, field: str) -> None:
    with pytest.raises((ValueError, TypeError)) as caught:
        ContextManager().search_history(query, k)  # type: ignore[arg-type]
    assert field in str(caught.value) and "\n" not in str(caught.value)
