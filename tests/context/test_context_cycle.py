"""The context cycle in a run (issue 18, seed 003 section 3): subtasks from the proposer's plan close into
L3 conclusions stamped with round and source, the close compresses and is self-checked, stored history is
found by relevance (search_history) and opened with read_ref, anomalies of a closed subtask survive."""

from __future__ import annotations

from pathlib import Path

from harness_lab.context import ContextItem, ContextManager, Layer
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.loop.run import Run
from harness_lab.paths import data_dir
from harness_lab.proposers.scripted import ScriptedProposer
from harness_lab.records.states import RunState
from harness_lab.records.tool_specs import tool_signatures

REPORT = """# Report: two harness designs

## Conclusion
Validating a finish request against the artifact keeps incomplete reports out of review [E:harness-boundary] [E:acceptance-snapshot].

## Evidence
- The runtime, not the model, decides which evidence moves the task state [E:harness-boundary].
- Acceptance binds the validated bytes to a receipt [E:acceptance-snapshot].

## Limitations
The evidence notes are test material, and structural checks do not show that the sources support the conclusion.
"""

PLAN = [
    {"kind": "begin_subtask", "name": "gather", "goal": "read the two evidence notes"},
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "finish_subtask", "conclusion": "both notes read: the runtime decides; acceptance binds bytes"},
    {"kind": "begin_subtask", "name": "write", "goal": "write the report"},
    {"kind": "write_report", "text": REPORT},
    {"kind": "finish_subtask"},  # no conclusion: the harness's digest of the process
    {"kind": "search_history", "query": "receipt validated bytes acceptance"},
    {"kind": "finish"},
]


def _run(tmp_path: Path, actions: list[dict[str, object]]) -> Run:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=30, max_tool_calls=30)
    return Run(contract=contract, proposer=ScriptedProposer(actions, then="finish"),
               evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws")


def _l3(run: Run) -> list[ContextItem]:
    return [i for i in run.context.view().items if i.layer == Layer.L3 and i.role == "conclusion"]


def test_a_scripted_report_run_with_subtasks_has_l3_conclusions(tmp_path: Path) -> None:
    run = _run(tmp_path, PLAN)
    assert run.run() is RunState.REVIEW_READY
    gather, write = _l3(run)
    # stamped with the round it closed in and the rounds and sources of its process
    assert gather.text.startswith("[round 4 conclusion of subtask gather, from rounds 1-3 of subtask:gather, "
                                  "step 2:read_evidence, step 3:read_evidence]")
    assert gather.text.endswith("both notes read: the runtime decides; acceptance binds bytes")
    assert gather.source == "subtask:gather" and gather.round == 4
    assert write.text.startswith("[round 7 conclusion of subtask write, from rounds 5-6 of ")
    assert "step 6:write_file" in write.text  # the digest the harness made of the process
    # the process left the view: the evidence texts are no longer whole in it
    assert not any(i.role == "interaction" and i.round in (2, 3, 6) for i in run.context.view().items)
    closed = [e for e in run.events if getattr(e, "topic", None) == "finish_subtask"]
    assert [e.data["subtask"] for e in closed] == ["gather", "write"]
    assert all(e.data["report"]["residual"] == [] for e in closed)


def test_search_history_finds_a_closed_subtasks_process_and_read_ref_opens_it(tmp_path: Path) -> None:
    run = _run(tmp_path, PLAN)
    run.run()
    searched = next(r for r in run.records if r.tool_result is not None and r.tool_result.tool == "search_history")
    assert searched.tool_result is not None and searched.tool_result.ok
    hits = searched.tool_result.data["hits"]
    top = hits[0]
    assert top["why"] == "subtask process" and top["source"] == "step 3:read_evidence"
    note = EvidenceCatalogue.from_dir(data_dir() / "evidence").get("acceptance-snapshot")
    assert note is not None and note.text in run.context.read_ref(top["id"])
    # the hits reach the model as an interaction naming the ids
    assert f"{top['id']} (round 3, from step 3:read_evidence; subtask process)" in run.context.view().render()


def test_subtask_mistakes_are_structured_tool_errors(tmp_path: Path) -> None:
    run = _run(tmp_path, [
        {"kind": "finish_subtask", "conclusion": "nothing open"},
        {"kind": "begin_subtask", "name": "a", "goal": "first"},
        {"kind": "begin_subtask", "name": "b", "goal": "second"},
        {"kind": "search_history", "query": "zebra"},
    ])
    results = [run.step().tool_result for _ in range(4)]
    assert [r.status if r else None for r in results] == ["error", "ok", "error", "ok"]
    assert results[0] is not None and results[0].reason == "no subtask is open"
    assert results[2] is not None and results[2].reason == "subtask 'a' is still open"
    assert results[3] is not None and results[3].data["hits"] == []
    assert run.context.current_subtask == "a"


def test_the_tools_are_listed_in_l0_from_the_one_source() -> None:
    signatures = tool_signatures()
    for tool in ("begin_subtask(name, goal)", "finish_subtask(conclusion)", "search_history(query, k)"):
        assert tool in signatures


def _filled(summarizer: object = None) -> ContextManager:
    ctx = ContextManager(budget_tokens=4000) if summarizer is None else ContextManager(
        budget_tokens=4000, summarizer=summarizer)  # type: ignore[arg-type]
    ctx.add(Layer.L1, "task: check the loader", source="task", round=0, pinned=True)
    for n in range(1, 6):  # before any subtask: 2 of these move to L4
        listing = "\n".join(f"src/module_{n}_{k}.py" for k in range(12))
        ctx.add_interaction(n, f"list_dir {n}", f"listed 12 files in src/\n{listing}", source=f"step {n}")
    return ctx


def test_closing_a_subtask_compresses_l4_though_the_context_fits() -> None:
    ctx = _filled()
    assert ctx.total_tokens < ctx.budget_tokens
    early = [i.id for i in ctx.view().items if i.layer == Layer.L4]
    assert len(early) == 2
    ctx.begin_subtask("load", "load the users table", round=6)
    ctx.add_interaction(7, "run_command load", "loaded table users", source="step 7")
    done = ctx.finish_subtask("load", "table loaded", round=8)
    report = ctx.last_report
    assert report is not None and report.created[0] == done.id
    assert set(early) <= set(report.summarized)  # the milestone folded the early exploration too
    assert not [i for i in ctx.view().items if i.layer == Layer.L4 and i.role == "interaction"]
    assert report.ok


def test_anomalies_of_every_new_kind_survive_a_subtask_close_verbatim() -> None:
    ctx = _filled()
    ctx.begin_subtask("load", "load the users table", round=6)
    lines = ["0 rows; 120 expected", "make: exit status 2", "Expected: 120", '  File "load.py", line 3, in main']
    for n, line in enumerate(lines, start=7):
        ctx.add_interaction(n, f"run_command step{n}", f"running step {n}\n{line}", source=f"step {n}")
    ctx.add_interaction(11, "think", "looks done", source="step 11")
    ctx.finish_subtask("load", "table loaded", round=12)
    rendered = ctx.view().render()
    for line in lines:
        assert line in rendered
    assert ctx.last_report is not None and ctx.last_report.ok


def test_the_close_self_check_reports_an_anomaly_a_summarizer_dropped() -> None:
    def forgetful(items: list[ContextItem]) -> str:
        return "nothing of note"

    ctx = ContextManager(budget_tokens=4000, summarizer=forgetful)
    ctx.add(Layer.L1, "task", source="task", round=0, pinned=True)
    ctx.add_interaction(1, "run_command count", "count 0 != 120", source="step 1")
    for n in range(2, 6):
        ctx.add_interaction(n, f"think {n}", f"plain {n}", source=f"step {n}")
    ctx.begin_subtask("s", "goal", round=6)
    ctx.finish_subtask("s", "done", round=7)
    report = ctx.last_report
    assert report is not None
    assert report.lost_anomalies and "count 0 != 120" in report.lost_anomalies[0]  # the self-check fired
    assert report.ok and "count 0 != 120" in ctx.view().render()  # and the anomaly was re-pinned


def test_a_subtask_open_at_a_checkpoint_closes_after_resume(tmp_path: Path) -> None:
    from harness_lab.store import SQLiteStore

    store = SQLiteStore(tmp_path / "runs.sqlite")
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
        max_decisions=30, max_tool_calls=30)
    evidence = EvidenceCatalogue.from_dir(data_dir() / "evidence")
    run = Run(contract=contract, proposer=ScriptedProposer(PLAN, then="finish"), evidence=evidence,
              workspace=tmp_path / "ws", run_id="R1", store=store)
    run.run(max_steps=3)  # the gather subtask is open, its two reads done
    run.close()
    resumed = Run.resume(store, "R1", proposer=ScriptedProposer(PLAN, then="finish"), evidence=evidence)
    assert resumed.context.current_subtask == "gather"
    assert resumed.run() is RunState.REVIEW_READY
    gather = _l3(resumed)[0]
    assert gather.text.startswith("[round 4 conclusion of subtask gather, from rounds 1-3 of subtask:gather, "
                                  "step 2:read_evidence, step 3:read_evidence]")
    resumed.close()
    store.close()
