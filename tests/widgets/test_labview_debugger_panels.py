"""The dashboard's panels as a debugger reads them: the context readable (full texts, L5 references,
anomalies), the current step named after every call, trace rows that open, a re-sent effect shown as
already applied, a budget plot with integer steps."""

from __future__ import annotations

from harness_lab.widgets import LabView
from harness_lab.widgets._panel import esc
from harness_lab.widgets.context_panel import context_rows, excerpt

LONG = "word " * 60 + "the tail end of a long item"


def test_every_context_item_is_in_the_panel_whole_and_a_long_one_opens_from_its_opening(make_run):
    run = make_run([{"kind": "write_file", "path": "a.txt", "content": "x"}])
    view = LabView(run)
    view.step()
    html = view.context.html.value
    items = run.context.view().items
    assert html.count("<tr class='hl-ctx-item") == len(items)
    for item in items:  # the whole text, not ~90 characters of it
        assert esc(item.text) in html
    # L0's text is longer than the opening: it opens on a click, from its opening cut at a word
    l0 = items[0].text
    assert len(l0) > 240 and f"<summary class='hl-ctx-text'>{esc(excerpt(l0, 240))}</summary>" in html
    # the item's metadata takes one narrow column, the text column the rest of the width
    assert "<colgroup><col style='width:17em'><col></colgroup>" in html


def test_an_excerpt_is_cut_at_a_word_never_inside_one():
    cut = excerpt("alpha beta gamma delta epsilon", 14)
    assert cut == "alpha beta …"
    assert excerpt("short", 90) == "short"
    (row,) = [r for r in context_rows(_View(LONG)) if r]
    assert row[-1].endswith(" …") and not row[-1].endswith("tail …")


class _Item:
    def __init__(self, text: str) -> None:
        self.text, self.layer, self.id, self.tokens, self.source, self.round = text, _L, "c9", 3, "t", 1
        self.freshness, self.status, self.pinned, self.anomaly, self.ref_id = "fresh", "current", False, False, None


class _L:
    name = "L2"


class _View:
    def __init__(self, text: str) -> None:
        self.items = (_Item(text),)


def test_an_l5_reference_opens_to_its_stored_text_and_an_anomaly_is_highlighted(make_run):
    big = "line of stored output\n" * 2000  # over the output cap: stored as an L5 reference
    run = make_run([{"kind": "write_file", "path": "big.txt", "content": big},
                    {"kind": "read_file", "path": "big.txt"}])
    view = LabView(run)
    view.run_to_end(max_steps=2)
    refs = [i.ref_id for i in run.context.view().items if i.ref_id]
    assert refs, "the big read should be stored as a reference"
    html = view.context.html.value
    assert f"<details class='hl-ref'><summary>open {refs[0]} (" in html
    assert "line of stored output\nline of stored output" in html  # the stored text itself, not the stub


def test_a_rejected_finish_is_highlighted_as_an_anomaly(make_run):
    run = make_run(scenario="missing_section_then_fixed")
    view = LabView(run)
    view.run_to_gate()
    html = view.context.html.value
    assert "hl-ctx-item hl-ctx-anomaly' style='background:#fff3e0'" in html
    assert "<b class='hl-anomaly' style='color:#c62828'>anomaly</b>" in html


def test_the_state_panel_names_the_current_step_after_every_call(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    for n in (1, 2, 3):
        view.step()  # plain steps: the state stays RUNNING, the step moves on
        assert f"at step {n};" in view.state.html.value


def test_trace_rows_open_to_the_whole_event(make_run):
    run = make_run(scenario="conforming_report")
    view = LabView(run)
    view.step()
    html = view.trace.html.value
    assert html.count("<details class='hl-trace-row'>") == len(run.events)
    # the tool result's whole text, not only the one-line detail
    assert "TEST MATERIAL for harness-lab scenarios" in html


def test_a_re_sent_idempotent_effect_reads_already_applied_not_a_second_effect(make_run):
    run = make_run()  # read, push (gated), read
    view = LabView(run)
    view.step()
    view.step()
    (gate,) = run.sandbox.snapshots()
    view.approve()
    view.rollback(gate.id)
    view.approve()  # the same push again, under the key it already ran with
    pushes = [e for e in run.events if e.kind == "tool_called" and e.tool == "push"]
    assert [p.result.content for p in pushes] == ["push applied", "already applied (idempotent replay)"]
    html = view.trace.html.value
    assert html.count("push: already applied, not a second effect") == 1
    assert html.count("push: ok") == 1


def test_the_budget_plot_has_integer_steps_and_a_sensible_empty_axis(make_run):
    from harness_lab.widgets import budget_figure

    run = make_run(scenario="conforming_report")
    ax = budget_figure(run).axes[0]
    assert ax.get_xlim() == (0.0, 1.5)  # an empty run: steps 0-1, not matplotlib's -0.05..0.05
    view = LabView(run)
    view.run_to_end(max_steps=3)
    ax = budget_figure(run).axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert view.plot is not None
    panel_ticks = [t for t in view.plot._ax.get_xticks() if 0 <= t <= 3]
    assert panel_ticks and all(float(t).is_integer() for t in panel_ticks)
