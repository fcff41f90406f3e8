"""Build the lesson notebooks deterministically from the cell lists below.

    python notebooks/build_notebooks.py            # write notebooks/NN_*.ipynb (sources only, outputs kept)
    python notebooks/build_notebooks.py --execute  # ... and execute them in place, storing outputs for nbval
                                                   # (outputs that differ only in volatile values keep
                                                   # their stored bytes: jupyter_server_config.py)
    python notebooks/build_notebooks.py --check    # exit 1 if a committed notebook's sources differ

Cell ids are derived from the notebook and the cell position, so a rebuild changes nothing that the
lesson text did not change. Every lesson has a cell tagged ``parameters`` (papermill) and ends with
assertions on what it claims.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
KERNEL = {"display_name": "Python 3 (harness-lab)", "language": "python", "name": "python3"}

Cell = tuple[str, str]  # ("md" | "code" | "params", source)

LESSONS: dict[str, list[Cell]] = {}

LESSONS["01_finish_validation"] = [
    ("md", """# 1 · Finish validation: a finish request is a claim

The model only *proposes*; the runtime *decides*. Here a scripted proposer plays the model and asks to
finish. With validation on, the runtime checks the report itself (sections, citations, evidence read in
this run) and binds the accepted bytes to a receipt. `REVIEW_READY` means "the mechanical checks
passed" — not "true", not "delivered"."""),
    ("params", """# Parameters (papermill can change these)
scenario = "missing_section_then_fixed"  # any name in data/scenarios/
validation = True"""),
    ("code", """import hashlib

from IPython.display import Markdown, display

from harness_lab import FakeClock, Run
from harness_lab.experiments import render_table, run_experiment
from harness_lab.widgets import LabView"""),
    ("md", """## Single-step one scenario
`run.pending` shows the next proposal before it executes; `run.step()` takes one decision and returns a
record: proposal, decision, tool result, verdict, state before and after."""),
    ("code", """run = Run.from_scenario(scenario, validation=validation, clock=FakeClock())
print("pending before step 1:", run.pending.describe())
while not run.state.terminal and run.waiting is None:
    rec = run.step()
    print(rec.summary())
    if rec.verdict is not None and not rec.verdict.accepted:
        for reason in rec.verdict.reasons:
            print("    rejected:", reason)
print("final:", run.state.value, "|", run.stop_reason.code, "|", run.stop_reason.message)"""),
    ("md", "## The receipt binds the validated bytes, the contract version and every evidence note read"),
    ("code", """if run.receipt is not None:
    r = run.receipt
    print("artifact        ", r.artifact_path, r.artifact_sha256)
    print("contract version", r.contract_version)
    for eid, sha in sorted(r.evidence_sha256.items()):
        print("evidence        ", eid, sha)
    print("structural:", r.structural, "| semantic:", r.semantic)
    on_disk = (run.workspace / r.artifact_path).read_bytes()
    print("the report in the workspace matches the receipt:", r.matches(on_disk))
    print("... with one byte added:", r.matches(on_disk + b"\\n"))
else:
    print("no receipt: nothing was accepted")"""),
    ("md", """## The same run in the dashboard
Every button is a method: the next cell does what clicking **Step** twice and **Run to end** does."""),
    ("code", """view = LabView(Run.from_scenario(scenario, validation=validation, clock=FakeClock()))
view"""),
    ("code", """view.step()
view.step()
view.run_to_end()
print(view.summary())
print("panels redrawn by the last call:", ", ".join(view.last_changed))"""),
    ("md", """## The seed's ten-scenario table
The same scripts with structural acceptance off and on (budget: 8 decisions, 5 tool calls)."""),
    ("code", """results = run_experiment()
display(Markdown(render_table(results)))"""),
    ("md", "## What this lesson claims (a headless run fails if any stops being true)"),
    ("code", """by = {(r.scenario, r.validation): r for r in results}
fixed_on, fixed_off = by[("missing_section_then_fixed", True)], by[("missing_section_then_fixed", False)]
assert fixed_on.rejected_at_steps == (4,) and fixed_on.final_state == "REVIEW_READY" and fixed_on.final_step == 6
assert fixed_off.final_state == "REVIEW_READY" and fixed_off.accepted_is_acceptable is False
false_accepts = {v: sum(r.accepted_is_acceptable is False for r in results if r.validation is v) for v in (False, True)}
assert false_accepts[True] < false_accepts[False], false_accepts
assert by[("sets_run_state", True)].final_state == by[("sets_run_state", False)].final_state == "BLOCKED"
row = by.get((scenario, validation))
if row is not None:  # the single-stepped run agrees with the table
    assert (run.state.value, run.step_no) == (row.final_state, row.final_step)
assert (run.receipt is not None) == (run.state.value == "REVIEW_READY")
if run.receipt is not None:  # the receipt binds the bytes in the workspace, and no others
    on_disk = (run.workspace / run.receipt.artifact_path).read_bytes()
    assert run.receipt.artifact_sha256 == hashlib.sha256(on_disk).hexdigest()
    assert not run.receipt.matches(on_disk + b"\\n")
assert view.run.state == run.state and view.run.step_no == run.step_no
print("false accepts (validation off, on):", false_accepts[False], false_accepts[True])
print("all claims hold")"""),
]

LESSONS["02_context_layers"] = [
    ("md", """# 2 · Context layers: what the proposer sees

Layers L0 (system, tools, safety) and L1 (task, acceptance) are never compressed; L2 holds the current
subtask and the last three interactions whole; L3 conclusions and summaries; L4 early exploration
(compressed or dropped first); L5 references to large outputs stored outside the context. Compression
keeps anomalies verbatim ("HTTP 200 but body code 500" must survive)."""),
    ("params", """# Parameters
budget_tokens = 400  # the squeezed context budget
output_rows = 3000   # size of the large tool output (rows)"""),
    ("code", """import textwrap

from harness_lab.context import ContextManager, Layer
from harness_lab.widgets.context_panel import context_rows


def show(view):
    \"\"\"One line per item; an anomaly's text in full (it is kept verbatim), the others cut at a word.\"\"\"
    print(f"{view.total_tokens}/{view.budget_tokens} tokens")
    for layer, item_id, tokens, source, rnd, flags, text in context_rows(view):
        shown = text if "anomaly" in flags else textwrap.shorten(text, 60, placeholder=" …")
        print(f"{layer} {item_id:>6} {tokens:>4} tok  round {rnd:<2} {source:<28} [{flags}] {shown}")"""),
    ("md", "## Fill the context: routine reads, one anomaly, one large output, one config read"),
    ("code", """ctx = ContextManager(budget_tokens=4000)  # roomy at first: nothing needs compressing
ctx.add(Layer.L0, "System: propose one action at a time; the runtime decides.", source="harness", round=0, pinned=True)
ctx.add(Layer.L1, "Goal: find why the health check is red.", source="user", round=0, pinned=True)
for r in range(1, 7):
    ctx.add_interaction(r, f"read_file logs/part{r}.txt", f"routine log part {r}: requests served normally. " * 4,
                        source=f"read_file:logs/part{r}.txt")
anomaly = "HTTP 200 but body code 500: upstream database timeout"
ctx.add_interaction(7, "run_command curl /health", anomaly, source="run_command:curl")
big = "\\n".join(f"row {i}: latency_ms={i % 97}" for i in range(output_rows))
large = ctx.add_interaction(8, "read_file data/latency.csv", big, source="read_file:data/latency.csv")
ctx.add_interaction(9, "read_file config.yaml", "retries: 3", source="read_file:config.yaml", key="config.yaml")
show(ctx.view())"""),
    ("md", """## A large output becomes a reference
The context keeps a reference and a summary; the bytes stay outside and are fetched on demand
(`read_ref`, a tool the proposer can call)."""),
    ("code", """info = ctx.ref_info(large.ref_id)
print(large.layer.name, large.ref_id, info.n_chars, "chars stored outside;", large.tokens, "tokens in the context")
print(ctx.read_ref(large.ref_id, 0, 40))"""),
    ("md", """## Squeeze the budget: compression drops early exploration, keeps the anomaly verbatim
The routine log reads (older than the last three interactions, so in L4) go first; L0/L1 and the
anomaly stay."""),
    ("code", """before = ctx.view()
ctx.budget_tokens = budget_tokens
after = ctx.view()
show(after)
print("self-check losses:", ctx.self_check(before, after))"""),
    ("md", """## An external change makes an item stale; reselecting drops it from the view
`config.yaml` changed outside the run: conclusions drawn from the old read must not survive."""),
    ("code", """stale = ctx.mark_stale("config.yaml")
print("marked stale:", [i.id for i in stale])
ctx.reselect()
ctx.add_interaction(10, "read_file config.yaml", "retries: 5", source="read_file:config.yaml", key="config.yaml")
show(ctx.view())"""),
    ("md", "## What this lesson claims"),
    ("code", """text = ctx.view().render()
assert anomaly in text, "the anomaly must survive compression verbatim"
assert large.layer is Layer.L5 and ctx.read_ref(large.ref_id) == big and big not in text
assert ctx.self_check(before, after) == []
assert "retries: 5" in text and "retries: 3" not in text
assert after.total_tokens < before.total_tokens and after.total_tokens <= budget_tokens
for shown in (after, ctx.view()):  # squeezed, then reselected: L0 and L1 kept, whole, in their layers
    pinned = [(i.layer, i.text) for i in shown.items if i.source in ("harness", "user")]
    assert pinned == [(Layer.L0, "System: propose one action at a time; the runtime decides."),
                      (Layer.L1, "Goal: find why the health check is red.")], pinned
print("all claims hold")"""),
]

LESSONS["03_sandbox_snapshots"] = [
    ("md", """# 3 · Sandbox and snapshots

Tools run inside a workspace root: reads and writes separated, paths outside the scope and symlink
escapes denied. A snapshot is taken before every irreversible step (overwrite, delete, external
command) and on demand; rollback restores the files *and* the run and context state together."""),
    ("params", """# Parameters
escape_path = "../outside.txt"  # a path outside the workspace the proposer will try to read
budget_decisions = 12"""),
    ("code", """import tempfile
from pathlib import Path

from harness_lab import EvidenceCatalogue, FakeClock, Run, RunState, ScriptedProposer, load_contract
from harness_lab.paths import data_dir
from harness_lab.widgets import LabView

outside = Path(tempfile.mkdtemp(prefix="harness-lab-outside-")) / "secret.txt"
outside.write_text("outside the sandbox")
script = [
    {"kind": "write_file", "path": "notes/plan.md", "content": "v1: compare two harness designs"},
    {"kind": "read_file", "path": escape_path},             # outside the scope: denied
    {"kind": "read_file", "path": "link.txt"},              # a symlink pointing outside: denied
    {"kind": "write_file", "path": "notes/plan.md", "content": "v2: skip the evidence"},  # overwrite: snapshot first
    {"kind": "delete_file", "path": "notes/plan.md"},       # irreversible and gated: waits for a human
    {"kind": "list_dir", "path": "."},
]
contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=budget_decisions)
run = Run(contract=contract, proposer=ScriptedProposer(script, then="finish"),
          evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), clock=FakeClock(), run_id="sandbox-lesson")
(run.workspace / "link.txt").symlink_to(outside)
view = LabView(run)
view"""),
    ("md", "## Two escapes, denied as data (the run goes on)"),
    ("code", """for _ in range(3):
    rec = view.step()
    print(rec.summary())
    if rec.tool_result is not None and not rec.tool_result.ok:
        print("   ", rec.tool_result.status, "|", rec.tool_result.hint)"""),
    ("md", "## An overwrite takes a snapshot first"),
    ("code", """rec = view.step()
print(rec.summary(), "| snapshot before:", rec.tool_result.data.get("snapshot_before"))
for info in run.sandbox.snapshots():
    print(info.id, info.label, "|", info.trigger, "| run state:", info.run_state["state"])"""),
    ("md", "## A delete is gated: the run parks with a snapshot and no side effect, until approved"),
    ("code", """rec = view.step()
print(rec.summary())
print("file still there while waiting:", (run.workspace / "notes/plan.md").exists())
rec = view.approve()
print(rec.summary())
print("file after approval:", (run.workspace / "notes/plan.md").exists())"""),
    ("code", """snaps = run.sandbox.snapshots()
for a, b in zip(snaps, snaps[1:]):
    d = run.sandbox.diff(a.id, b.id)
    print(f"{a.id} -> {b.id}: added {list(d.added)} removed {list(d.removed)} changed {list(d.changed)}")
print(f"{snaps[-1].id} -> now: {run.sandbox.diff(snaps[-1].id, run.sandbox.snapshot('now').id).removed}")"""),
    ("md", "## Roll back to before the overwrite: files, run state and context together"),
    ("code", """first = snaps[0]
view.rollback(first.id)
print("plan.md:", (run.workspace / "notes/plan.md").read_text())
print("run state:", run.state.value, "| pending:", run.pending.describe())"""),
    ("md", """## Fork: a new run (own id, own workspace) from the snapshot taken before the delete
The original run is left untouched."""),
    ("code", """child = view.fork(snaps[-1].id)
print(child.summary())
print("fork's plan.md:", (child.run.workspace / "notes/plan.md").read_text())
print("original's plan.md:", (run.workspace / "notes/plan.md").read_text())
child"""),
    ("md", "## What this lesson claims"),
    ("code", """statuses = [r.tool_result.status for r in run.records[1:3]]
assert statuses == ["denied", "denied"], statuses
assert outside.read_text() == "outside the sandbox"
assert first.trigger.startswith("before write_file notes/plan.md")
assert (run.workspace / "notes/plan.md").read_text() == "v1: compare two harness designs"
assert run.state is RunState(first.run_state["state"])
assert run.pending.action.kind == "write_file", "rolled back to before the overwrite: the overwrite is pending again"
assert any(e.kind == "restored" for e in run.events) and any(e.kind == "human_decided" for e in run.events)
assert run.sandbox.workspace_hash() == first.workspace_hash
assert child.run.run_id != run.run_id and child.run.workspace != run.workspace
assert (child.run.workspace / "notes/plan.md").read_text() == "v2: skip the evidence"
print("all claims hold")"""),
]


LESSONS["04_gates_faults"] = [
    ("md", """# 4 · Human gates, loop gates and faults

Gates live outside the model. A gated proposal (push, release, delete, send_message, ...) parks the run
in `WAITING_FOR_HUMAN` with a checkpoint and **no side effect**; Approve executes exactly the approved
action, Reject stops safely with the reason kept. Loop gates stop a run that repeats itself or spends
its budget, and warn it at 80% of its tokens. Faults from the catalogue break the next step on purpose; read how the harness answers."""),
    ("params", """# Parameters
reject_reason = "not during the release freeze"
fault = "tool_timeout"  # any name in harness_lab.faults.fault_names()"""),
    ("code", """import tempfile
import textwrap
from pathlib import Path

from harness_lab import EvidenceCatalogue, FakeClock, Run, RunState, ScriptedProposer, load_contract
from harness_lab.errors import SimulatedCrash
from harness_lab.faults import fault_catalogue
from harness_lab.paths import data_dir
from harness_lab.widgets import LabView, Session

CONTRACT = load_contract(data_dir() / "contracts" / "report_task.yaml")
EVIDENCE = EvidenceCatalogue.from_dir(data_dir() / "evidence")


def scripted(actions, run_id, then="finish"):
    return Run(contract=CONTRACT, proposer=ScriptedProposer(actions, then=then), evidence=EVIDENCE,
               clock=FakeClock(), run_id=run_id)"""),
    ("md", "## Approve inline"),
    ("code", """GATE_SCRIPT = [
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "push", "remote": "origin", "branch": "main"},
    {"kind": "send_message", "to": "team", "text": "report pushed"},
]
gated = scripted(GATE_SCRIPT, "gate-lesson")
view = LabView(gated)
view"""),
    ("code", """for rec in view.run_to_gate():
    print(rec.summary())
print("pending:", gated.pending.describe(), "| args sha256:", gated.waiting.args_sha256)
print("effects applied so far:", list(gated.executor.effects.sent))
rec = view.approve()
print(rec.summary())
print("effects applied:", [a.kind for a in gated.executor.effects.sent.values()])"""),
    ("md", "## Reject inline: a safe stop, the reason kept"),
    ("code", """for rec in view.run_to_gate():
    print(rec.summary())
rec = view.reject(reject_reason)
print(rec.summary())
print("stop:", gated.stop_reason.code, "|", gated.stop_reason.message)"""),
    ("md", """## The session you just drove, saved and replayed headless
Every call on the view (step, approve, reject, inject, roll back, fork, edit) is in `view.session`; a
replay makes the same calls on a fresh run and checks states, decisions and workspace hashes."""),
    ("code", """session_file = view.session.save(Path(tempfile.mkdtemp(prefix="harness-lab-session-")) / "gate-session.json")
print([e.action for e in view.session.entries])
replayed = Session.load(session_file).replay(LabView(scripted(GATE_SCRIPT, "gate-lesson"), plot=False))
print(replayed.detail)"""),
    ("md", """## Loop gates: the third identical call gets a hint, the fourth stops the run
Seed 003's convergence check: the same tool with (nearly) the same arguments three times in a row. "The
same" means the same kind and target (a path, an evidence id, a command's argv) with the same or near-same
other arguments; three different files written in a row are work, not a loop."""),
    ("code", """looping = scripted([{"kind": "list_dir", "path": "."}], "loop-lesson", then="repeat_last")
looping.run()
for rec in looping.records:
    print(rec.summary())
print("stop:", looping.stop_reason.code)
working = scripted([{"kind": "write_file", "path": f"src/{name}.py", "content": "print('hello')\\n"}
                    for name in ("main", "util", "cli")] + [{"kind": "read_file", "path": "src/main.py"}], "work-lesson")
working.run(max_steps=4)
print("three files written, one read:", [rec.decision.verdict for rec in working.records])"""),
    ("md", """## Budgets: the 80% token warning, then the stop
Every contract carries a token budget and a wall-clock limit (`report_task`: 20,000 tokens, 600 s; a scripted
run spends under 5,000). This scenario's contract is tighter (3,800 tokens) so that the seed's warning shows
within a few decisions: once the run has used 80%, the harness puts "converge and finish" into the model's
context and notes it in the trace. The scripted model keeps reading; the budget is checked *before* each
decision, so decision 8 is never asked for: EXHAUSTED `token_budget`, not finished, its draft never
validated. (Checked before, not during: decision 7 started under the budget and ended past it.)"""),
    ("code", """budgeted = Run.from_scenario("keeps_reading_after_budget_warning", clock=FakeClock(), run_id="budget-lesson")
budget = budgeted.contract.budget
print(f"budget: {budget.max_tokens} tokens (warning at 80%: {0.8 * budget.max_tokens:.0f}), "
      f"{budget.max_decisions} decisions, {budget.max_tool_calls} tool calls, {budget.wall_clock_seconds:g} s")
budgeted.run()
for rec in budgeted.records:
    call = textwrap.shorten(rec.proposal.describe(), 44, placeholder="…") if rec.proposal is not None else "(proposer not asked)"
    print(f"step {rec.step}: {call:44} {rec.decision.verdict:8} tokens used {rec.usage.tokens:5}")
    for event in rec.events:
        if event.kind == "note" and event.topic == "budget_warning":
            print("    note budget_warning:", event.message)
print("in the model's context:", *[line.strip() for line in budgeted.context.view().render().splitlines()
                                   if "budget warning" in line])
print("stop:", budgeted.stop_reason.code, "|", budgeted.stop_reason.message)"""),
    ("md", "## Inject one fault into the next step"),
    ("code", """victim = LabView(Run.from_scenario("conforming_report", clock=FakeClock()))
victim.inject(fault)
try:
    print(victim.step().summary())
    victim.run_to_end()
except SimulatedCrash as crash:  # process_crash: lesson 5 resumes from the checkpoint
    print("crashed:", crash)
for r in victim.run.faults:
    print(f"step {r.step} {r.fault}: {r.effect}\\n    harness answer: {r.answer}")
print("final:", victim.summary())"""),
    ("md", "## Every fault of the catalogue, and how the harness answered"),
    ("code", """outcomes = {}
for name in fault_catalogue():
    run = Run.from_scenario("conforming_report", clock=FakeClock(), run_id=f"fault-{name}")
    run.inject(name)
    try:
        run.run()
        end = run.state.value
    except SimulatedCrash:
        end = "crashed (resume it: lesson 5)"
    outcomes[name] = (run, end)
    first = run.faults[0] if run.faults else None
    answer = textwrap.shorten(first.answer, 70, placeholder=" …") if first else "did not fire"
    print(f"{name:34} {end:30} {answer}")"""),
    ("md", """## Your turn
Click **Step**: the push parks at the human gate. Then type a reason and **Reject**, or **Approve**."""),
    ("code", """try_it = LabView(scripted([{"kind": "push", "remote": "origin", "branch": "main"},
                           {"kind": "read_evidence", "id": "harness-boundary"}], "try-it"))
try_it"""),
    ("md", "## What this lesson claims"),
    ("code", """assert gated.state is RunState.BLOCKED and gated.stop_reason.code == "human_rejected"
assert reject_reason in gated.stop_reason.message
assert [a.kind for a in gated.executor.effects.sent.values()] == ["push"]  # the rejected message never went out
assert looping.stop_reason.code == "no_progress" and looping.records[2].decision.verdict == "refuse"
assert [rec.decision.verdict for rec in working.records] == ["execute"] * 4  # different files are progress
warnings = [(rec.step, e.message) for rec in budgeted.records for e in rec.events
            if e.kind == "note" and e.topic == "budget_warning"]
assert [step for step, _ in warnings] == [6], warnings  # the 80% warning fired, once, after decision 6
assert budgeted.state is RunState.EXHAUSTED and budgeted.stop_reason.code == "token_budget"
assert budgeted.context.view().render().count("converge and finish") == 1  # the model was told
assert replayed.identical and [e.action for e in view.session.entries] == ["run_to_gate", "approve", "run_to_gate", "reject"]
assert fault in [r.fault for r in victim.run.faults], "the picked fault struck the run it was injected into"
assert all(r.answer for r in victim.run.faults) and victim.run.step_no >= 1
assert len(outcomes) >= 12
for name, (run, end) in outcomes.items():
    assert run.faults and all(r.answer for r in run.faults), name  # every fault fired and was answered
    assert any(e.kind == "note" and e.topic == "fault" for e in run.events), name  # ...in the trace
    if run.state is RunState.REVIEW_READY:  # accepted despite the fault: the receipt holds the bytes on disk
        assert run.receipt.matches((run.workspace / run.receipt.artifact_path).read_bytes()), name
    run.close()  # removes the run's temporary workspace
print("all claims hold")"""),
]


LESSONS["05_crash_resume"] = [
    ("md", """# 5 · Crash and resume

Every step is committed to an embedded SQLite store (one transaction per step, side effects in a
ledger with idempotency keys). Kill the run mid-step and `Run.resume(store, run_id)` continues in the
seed's order — trigger still valid, workspace hashes against the checkpoint, pending scope and last
failure, cheap pre-checks, only then the harness — and reaches the state, receipt and workspace an
uninterrupted run reaches, with no side effect applied twice."""),
    ("params", """# Parameters
scenario = "conforming_report"
crash_step = 3  # the step the simulated process crash strikes (after its effect, before the commit)"""),
    ("code", """import tempfile
from pathlib import Path

from harness_lab import FakeClock, Run, RunState
from harness_lab.errors import SimulatedCrash
from harness_lab.store import SQLiteStore
from harness_lab.widgets import LabView

db = Path(tempfile.mkdtemp(prefix="harness-lab-db-")) / "runs.sqlite"
store = SQLiteStore(db)"""),
    ("md", "## The reference: the same scenario, never interrupted"),
    ("code", """reference = Run.from_scenario(scenario, clock=FakeClock(), run_id="reference")
reference.run()
print(reference.state.value, "at step", reference.step_no, "| workspace", reference.sandbox.workspace_hash())"""),
    ("md", "## Checkpoint every step, then crash"),
    ("code", """run = Run.from_scenario(scenario, clock=FakeClock(), run_id="R1", store=store)
run.inject("process_crash", at_step=crash_step)
try:
    run.run()
except SimulatedCrash as crash:
    print("crashed:", crash)
for rec in run.records:
    print(rec.summary())
for row in store.steps("R1"):
    print("checkpoint", f"R1@{row.step}", "committed")"""),
    ("md", "## Resume: the checks in the seed's order, then the harness"),
    ("code", """resumed = Run.resume(store, "R1", clock=FakeClock())
for check in resumed.resume_report.checks:
    print(f"{check.name:10} {'ok ' if check.ok else 'NO '} {check.detail}")
view = LabView(resumed)
view"""),
    ("code", """print([i.text for i in resumed.context.view().items if i.role == "resume"][0])
view.run_to_end()
print(view.summary())
print("workspace", resumed.sandbox.workspace_hash())"""),
    ("md", "## What this lesson claims"),
    ("code", """assert run.crashed is not None
assert resumed.state is reference.state and resumed.step_no == reference.step_no
assert resumed.sandbox.workspace_hash() == reference.sandbox.workspace_hash()
assert (resumed.receipt is None) == (reference.receipt is None)
if reference.receipt is not None:
    assert resumed.receipt.artifact_sha256 == reference.receipt.artifact_sha256
    assert resumed.receipt.evidence_sha256 == reference.receipt.evidence_sha256
checks = resumed.resume_report.checks  # the seed's order, each passed
assert [c.name for c in checks] == ["trigger", "workspace", "scope", "prechecks", "harness"] and all(c.ok for c in checks)
keys = [e.key for e in store.effects("R1")]
assert keys and len(keys) == len(set(keys)), "a side effect was applied twice (or none was recorded)"
assert any(i.role == "resume" for i in resumed.context.view().items)  # the resume note reached the context
print("all claims hold")"""),
]


LESSONS["06_experiments"] = [
    ("md", """# 6 · Experiments: four harness designs, the same tasks, the same budget

Seed 004's study, each group adding one variable to the previous one: **base** (the basic loop; finish
accepted unchecked), **structural** (+ structural acceptance; a rejection is final), **repair** (+ revision
allowed after a failed check: the repair policy), **semantic** (+ a semantic review of the accepted bytes).
`GROUPS[name].variables()` lists each group's variables. Ground truth is each scenario's labels, fixed before any run — never a validator.
Scripted inputs, not a model: this measures the harness's control flow."""),
    ("params", """# Parameters
seeds = 3          # runs per scenario (seed 0 unperturbed, the others perturbed)
noise = 0.2        # perturbation rate of the scripted actions
scenarios = "seed" # "seed" (the ten), "all", or a list of names"""),
    ("code", """import matplotlib.pyplot as plt

from harness_lab.experiments import run_study

result = run_study(scenarios=scenarios, seeds=seeds, noise=noise, progress=False)
by = {s.group: s for s in result.summaries}
print(f"{len(result.scenarios)} scenarios x {result.seeds} seeds per group; budget {result.budget}")
print(f"{'group':11} {'runs':>4} {'completed':>9} {'delivered':>9} {'false acc':>9} {'false rej':>9} "
      f"{'exhausted':>9} {'decisions':>9} {'tool calls':>10} {'revisions':>9}")
for s in result.summaries:
    print(f"{s.group:11} {s.runs:>4} {s.completed:>9} {s.delivered:>9} {s.false_accepts:>9} {s.false_rejects:>9} "
          f"{s.exhaustions:>9} {s.decisions:>9.2f} {s.tool_calls:>10.2f} {s.revisions:>9.2f}")"""),
    ("md", "## Outcomes and cost per group"),
    ("code", """groups = list(by)
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
rates = {"completion": "completed", "false accepts": "false_accepts", "false rejects": "false_rejects",
         "exhaustions": "exhaustions"}
width = 0.8 / len(rates)
for i, (label, field) in enumerate(rates.items()):
    left.bar([g + i * width for g in range(len(groups))], [getattr(by[g], field) / by[g].runs for g in groups],
             width, label=label)
left.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups)
left.set_ylabel("share of runs")
left.legend(fontsize="small")
for i, (label, field) in enumerate({"decisions": "decisions", "tool calls": "tool_calls"}.items()):
    right.bar([g + i * 0.4 for g in range(len(groups))], [getattr(by[g], field) for g in groups], 0.4, label=label)
right.set_xticks([g + 0.2 for g in range(len(groups))], groups)
right.set_ylabel("mean per run")
right.legend(fontsize="small")
fig.tight_layout()
plt.show()"""),
    ("md", "## What this lesson claims"),
    ("code", """base, structural, repair, semantic = (by[g] for g in ("base", "structural", "repair", "semantic"))
assert len({s.runs for s in result.summaries}) == 1  # the same tasks for every group
assert base.false_accepts > structural.false_accepts  # checking the artifact keeps bad reports out
assert structural.false_accepts > semantic.false_accepts and repair.false_accepts > semantic.false_accepts
# A review can only hold reports back, and here held back only bad ones: run by run against the repair group.
sem = {(o.scenario, o.seed): o for o in result.outcomes if o.group == "semantic"}
rep = {(o.scenario, o.seed): o for o in result.outcomes if o.group == "repair"}
held = [k for k in sem if rep[k].delivered and not sem[k].delivered]
assert all(rep[k].delivered for k in sem if sem[k].delivered)  # nothing delivered that repair did not
assert held and not any(rep[k].delivered_acceptable for k in held)  # something held back, nothing acceptable
assert semantic.completed == repair.completed
assert base.delivered > structural.delivered  # structure refuses some finishes the base loop accepts
assert structural.revisions == 0 < repair.revisions  # the one variable repair adds: revision after a rejection
assert repair.completed > structural.completed  # a report fixed after feedback needs that revision
# attainable is the ceiling: every run that completed had an acceptable report in its script
completed_runs = [o for o in result.outcomes if o.delivered_acceptable]
assert completed_runs and all(o.attainable for o in completed_runs)
print("all claims hold")"""),
]


LESSONS["07_real_model"] = [
    ("md", """# 7 · A real model drives the harness

Until now a script played the model. Here **SmolLM2-135M-Instruct**, served by llama.cpp's `llama-server`,
proposes through `OpenAICompatProposer`: every proposal is a tool call the model generated. A 135M model
does a lot wrong, which is the point: the harness refuses what it should, charges what the server says it
spent, and stops the run when the budget or a loop says so.

Without a server (`live = False`, the default) the lesson **replays a transcript recorded from the real
server** (`data/transcripts/07_real_model.json`, made by `bench/record_model_transcript.py`, which runs
this notebook live). Only the endpoint is swapped: `TranscriptTransport` hands back the recorded HTTP
status and bytes; the proposer parses them and the run charges, gates and validates them as it did live.
If the harness now asks something the recording was not asked, the replay says so at the end."""),
    ("params", """# Parameters
live = False                                # True: talk to a running server now; False: replay the recorded transcript
base_url = "http://127.0.0.1:8080/v1"       # live only: any OpenAI-compatible endpoint
model = "SmolLM2-135M-Instruct"             # live only
api_key_env = "HARNESS_LAB_OPENAI_API_KEY"  # live only: the variable that holds the key (never the key itself)
record_to = \"\"                              # live only: save the exchanges as a transcript here"""),
    ("code", """import json
import os
import socket
import textwrap
import time
from collections import Counter
from pathlib import Path

from harness_lab import EvidenceCatalogue, FakeClock, Run, RunState, load_contract
from harness_lab.paths import data_dir
from harness_lab.proposers.openai_compat import OpenAICompatConfig, OpenAICompatProposer, urllib_transport
from harness_lab.proposers.transcript import RecordingTransport, TranscriptTransport
from harness_lab.widgets import LabView

# How the model is asked (the recording used these; a replay uses the recorded ones): a tool call is
# required, replies are capped at 160 tokens and sampled at temperature 1.0 (greedy decoding repeats one call).
SETTINGS = {"max_tokens": 160, "tool_choice": "required", "temperature": 1.0, "timeout_s": 180.0, "max_retries": 2}
TRANSCRIPT = data_dir() / "transcripts" / "07_real_model.json"

if live:
    clock, key = None, os.environ.get(api_key_env) or None  # None: the system clock
    transport = RecordingTransport(urllib_transport, metadata={"model": model, "proposer": SETTINGS})
    settings, sleep = SETTINGS, time.sleep
    print(f"LIVE: this run talks to {model} at {base_url} now (nothing is replayed)")
else:
    clock, key = FakeClock(), None  # the replay's clock moves by each recorded call's latency
    transport = TranscriptTransport(TRANSCRIPT, clock=clock)
    meta = transport.metadata
    settings, sleep, base_url, model = meta["proposer"], clock.advance, meta["base_url"], meta["model"]
    print(f"REPLAY: no server is asked; replaying a transcript recorded from the real server: "
          f"{meta['model_description']} on {meta['server_version']}, recorded {meta['recorded_at'][:10]}")


def proposer(url=None):
    config = OpenAICompatConfig(base_url=url or base_url, model=model, api_key=key, **settings)
    return OpenAICompatProposer(config, transport=transport, sleep=sleep)


CONTRACT = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(
    max_decisions=12, max_tool_calls=8, max_tokens=9000, wall_clock_seconds=900)
EVIDENCE = EvidenceCatalogue.from_dir(data_dir() / "evidence")
print("proposer:", settings)
print("budget:", CONTRACT.stop.budget.model_dump())"""),
    ("md", """## The model's first run, in the dashboard
The report task of lesson 1 (read evidence, write a report with three sections, finish) with a token
budget and a wall-clock limit. The dashboard asks the model for its first proposal as soon as it is
shown: the **pending** panel holds it before anything runs."""),
    ("code", """transport.section("run 1")
starts = {"run 1": len(transport.exchanges)}
run = Run(contract=CONTRACT, proposer=proposer(), evidence=EVIDENCE, clock=clock, run_id="real-model-1")
view = LabView(run)
view"""),
    ("md", """## Step it: tokens, latency, what the model proposed, what the harness decided
Each row is one `view.step()` (the **Step** button). Tokens are what the server reported
(`usage.total_tokens`: prompt and reply), which is what the budget was charged; latency is the HTTP call's.
The dashboard asks for the next proposal as soon as a step ends (to show it as pending), and its tokens are
charged then: when they take the run over its token budget, the next step stops the run before deciding
anything, and that proposal is never decided (an "asked, never decided" line)."""),
    ("code", """def calls_by_step(records, exchanges):
    \"\"\"The endpoint calls behind each step, in order: a failed step's attempts; a proposal's answer
    (after any retries). What is left was asked for a step the run never took.\"\"\"
    calls, i = {}, 0
    for rec in records:
        if rec.decision.verdict == "unavailable":
            n = next(e.data["attempts"] for e in rec.events if e.kind == "note" and e.topic == "endpoint_failure")
        elif rec.proposal is not None:
            n = 1
            while i + n - 1 < len(exchanges) - 1 and exchanges[i + n - 1].status != 200:
                n += 1
        else:
            n = 0
        calls[rec.step], i = exchanges[i:i + n], i + n
    return calls, exchanges[i:]


def show(run, exchanges):
    calls, unused = calls_by_step(run.records, exchanges)
    for rec in run.records:
        made = calls[rec.step]
        tokens, seconds = sum(e.total_tokens or 0 for e in made), sum(e.latency_s for e in made)
        if rec.proposal is None:
            what = "(no proposal)"
        elif rec.proposal.action is None:
            what = "not a tool call: " + textwrap.shorten(str(rec.proposal.raw), 70, placeholder=" …")
        else:
            what = textwrap.shorten(rec.proposal.describe(), 80, placeholder=" …")
        if rec.tool_result:
            what += f" -> {rec.tool_result.status}"
        if rec.verdict is not None:
            what += " -> accepted" if rec.verdict.accepted else " -> rejected: " + "; ".join(rec.verdict.reasons)
        print(f"step {rec.step:>2} | {tokens:>5} tok | {seconds:5.1f} s | {what}\\n"
              f"        {rec.decision.verdict}: {textwrap.shorten(rec.decision.reason, 100, placeholder=' …')} | {rec.state_after.value}")
    for e in unused:
        print(f"asked, never decided (the run stopped first): {e.total_tokens} tok")
    stop = run.stop_reason
    print(f"=> {run.state.value} ({stop.code}: {stop.message}) | {run.usage.tokens} tokens, "
          f"{run.usage.decisions} decisions, {run.usage.tool_calls} tool calls")
    return calls


while run.step_due:
    view.step()
if run.waiting is not None:  # a gated action (delete_file, push, ...): this lesson approves nothing a model asks
    view.reject("the lesson approves no gated action of the model")
runs = {"run 1": run}
exchanges = {"run 1": transport.exchanges[starts["run 1"]:]}
calls = {"run 1": show(run, exchanges["run 1"])}"""),
    ("md", """## The same task three more times
Sampling at temperature 1.0, each run of the model goes its own way; the harness answers each the same
way. These are taken with `run.step()` directly (what the dashboard's Step calls)."""),
    ("code", """for name in ("run 2", "run 3", "run 4"):
    transport.section(name)
    starts[name] = len(transport.exchanges)
    runs[name] = again = Run(contract=CONTRACT, proposer=proposer(), evidence=EVIDENCE, clock=clock,
                             run_id=f"real-model-{name[-1]}")
    while again.step_due:
        again.step()
    if again.waiting is not None:
        again.reject("the lesson approves no gated action of the model")
    exchanges[name] = transport.exchanges[starts[name]:]
    print(f"--- {name}")
    calls[name] = show(again, exchanges[name])"""),
    ("md", """## What the harness refused, and what the model was told
A proposal that is no tool call (prose, or a call cut off at the reply's token limit) is refused and fed
back; a `finish` is a claim the report validator checks against the workspace; the third near-identical
call gets a hint, and the next one after it stops the run; at 80% of the token budget a warning goes into
the context; the budget is checked before each decision."""),
    ("code", """records = [rec for r in runs.values() for rec in r.records]
print(f"decisions over the {len(runs)} runs:", dict(sorted(Counter(r.decision.verdict for r in records).items())))


def first(label, found):
    print(f"{label}: {len(found)}" + (f", e.g. step {found[0][1].step} of {found[0][0]}: {found[0][2]}" if found else ""))


every = [(name, rec) for name, r in runs.items() for rec in r.records]
first("not a tool call, refused and fed back", [(n, r, textwrap.shorten(str(r.proposal.raw), 90, placeholder=" …")) for n, r in every
      if r.proposal is not None and r.proposal.action is None])
finishes = [(n, r) for n, r in every if r.proposal is not None and r.proposal.action is not None
            and r.proposal.action.kind == "finish"]
first("finish claimed, checked by the validator", [(n, r, "; ".join(r.verdict.reasons) or "accepted") for n, r in finishes])
first("near-identical call refused with a hint", [(n, r, f"{textwrap.shorten(r.proposal.describe(), 50, placeholder=' …')}: {r.decision.reason}")
                                                 for n, r in every if "change approach" in r.decision.reason])
first("tool call that failed as data", [(n, r, r.tool_result.reason) for n, r in every
      if r.tool_result is not None and not r.tool_result.ok])
warnings = {n: [e for e in r.events if e.kind == "note" and e.topic == "budget_warning"] for n, r in runs.items()}
first("80% token warning", [(n, r.records[w[0].step - 1], w[0].message) for n, r in runs.items() if (w := warnings[n])])
print("stops:", {n: f"{r.state.value} {r.stop_reason.code}" for n, r in runs.items()})
print("receipts:", {n: r.receipt is not None for n, r in runs.items()})
print("what run 1's model was told (feedback in its context at the end):")
for item in run.context.view().items:
    if item.role == "feedback":
        print(f"  {item.source}: {textwrap.shorten(item.text, 110, placeholder=' …')}")"""),
    ("md", """## The endpoint fails: an endpoint event, not the model's mistake
The same proposer pointed at a port nothing listens on. Each call is refused by the operating system
(and retried twice with a backoff); the run records an `endpoint_failure` event, shows the model nothing,
and charges no decision and no token. After three in a row it waits for the endpoint
(`WAITING_FOR_ENDPOINT`), from which a later step, or a resume, asks again."""),
    ("code", """with socket.socket() as s:  # a free port, closed again: nothing listens there
    s.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
transport.section("endpoint")
down_start = len(transport.exchanges)
down = Run(contract=CONTRACT, proposer=proposer(closed), evidence=EVIDENCE, clock=clock, run_id="endpoint-down")
down.run()
down_calls = transport.exchanges[down_start:]
for rec in down.records:
    note = next(e for e in rec.events if e.kind == "note" and e.topic == "endpoint_failure")
    print(f"step {rec.step}: {rec.decision.verdict} | {textwrap.shorten(note.message, 90, placeholder=' …')} | {note.data}")
print("calls made:", len(down_calls), "| errors:", sorted({e.error["type"] for e in down_calls if e.error}))
print("state:", down.state.value, "|", down.stop_reason.code, "| charged:", down.usage.decisions, "decisions,",
      down.usage.tokens, "tokens")"""),
    ("md", "## The transcript: where this replay stands (or what a live run saved)"),
    ("code", """if live:
    transport.metadata.update({"base_url": base_url, "outcome": {
        **{n: {"state": r.state.value, "stop": r.stop_reason.code, "steps": r.step_no, "tokens": r.usage.tokens,
               "decisions": dict(Counter(x.decision.verdict for x in r.records))} for n, r in runs.items()},
        "endpoint": {"state": down.state.value, "stop": down.stop_reason.code, "calls": len(down_calls)}}})
    if record_to:
        print("transcript saved:", transport.save(record_to).name)
    print(f"live: {len(transport.exchanges)} exchanges with the server")
else:
    print(transport.note())"""),
    ("md", "## What this lesson claims"),
    ("code", """for name, r in runs.items():
    made = exchanges[name]
    # The budget was charged exactly what the server reported, no more and no less.
    assert all(e.total_tokens is not None for e in made if e.status == 200), name
    assert r.usage.tokens == sum(e.total_tokens for e in made if e.status == 200) > 0, name
    for rec in r.records:
        # Nothing the harness refused, blocked or stopped was executed ...
        if rec.decision.verdict not in ("execute", "approved"):
            assert rec.tool_result is None, rec.summary()
        # ... and what ran was the model's own first tool call, as the server sent it.
        elif rec.tool_result is not None:
            (answer,) = [e for e in calls[name][rec.step] if e.status == 200]
            call = json.loads(answer.reply)["choices"][0]["message"]["tool_calls"][0]["function"]
            said = {**json.loads(call["arguments"] or "{}"), "kind": call["name"]}
            assert {k: v for k, v in dict(rec.proposal.raw).items() if k != "other_tool_calls"} == said, (name, rec.step)
    # REVIEW_READY comes only with a receipt of the bytes that were checked; a refused finish never ends the run.
    assert (r.state is RunState.REVIEW_READY) == (r.receipt is not None), name
    if r.receipt is not None:  # ... of the bytes on disk
        assert r.receipt.matches((r.workspace / r.receipt.artifact_path).read_bytes()), name
    # A loop stop comes only after a hint; a token stop only after the 80% warning.
    if r.stop_reason.code == "no_progress":
        assert any(x.decision.verdict == "refuse" and "change approach" in x.decision.reason for x in r.records), name
    if r.stop_reason.code == "token_budget":
        assert warnings[name] and r.usage.tokens >= CONTRACT.stop.budget.max_tokens, name
    assert r.state.terminal, name
assert finishes and all(rec.verdict is not None for _, rec in finishes), "every finish was validated"
# The endpoint failure is the endpoint's: recorded, never shown to the model, nothing charged, the run waits.
assert down.state is RunState.WAITING_FOR_ENDPOINT and down.stop_reason.code == "endpoint_unavailable"
assert [r.decision.verdict for r in down.records] == ["unavailable"] * 3
assert (down.usage.decisions, down.usage.tokens, down.usage.tool_calls) == (0, 0, 0)
assert all(e.status is None and e.error for e in down_calls) and len(down_calls) == 9
assert not any(i.source.startswith("step ") for i in down.context.view().items), "the model was shown nothing of it"
# No key anywhere: not in the records, not in what a transcript keeps.
if key:
    assert key not in "".join(r.model_dump_json() for r in records + list(down.records))
    assert key not in json.dumps(transport.to_json())
if not live:
    assert "Bearer" not in TRANSCRIPT.read_text() and "Authorization" not in TRANSCRIPT.read_text()
for r in (*runs.values(), down):
    r.close()
print("all claims hold")"""),
]


LESSONS["08_functional_verification"] = [
    ("md", """# 8 · Functional verification: "the tests pass" is a claim, running them is the check

A second task family: small repositories with a failing test (`data/coding/stats`: `median` is wrong for
lists of even length). The agent reads, edits and runs commands in its workspace; "done" is decided by the
**functional layer**: at finish the harness runs the contract's checks in the run's sandbox (the tests, a
held-out check with inputs the tests do not show), compares the protected test file with its original
sha256 and the tree with the files the task allows, and binds each check's exit status, an output digest
and the tree hash into the receipt. Scripted inputs, not a model."""),
    ("params", """# Parameters (papermill can change these)
scenario = "coding_claims_tests_pass"  # any name in data/coding_scenarios/"""),
    ("code", """import textwrap

from harness_lab import FakeClock, Run
from harness_lab.contract import load_contract
from harness_lab.experiments import render_coding_table, run_coding_experiment
from harness_lab.paths import data_dir

contract = load_contract(data_dir() / "contracts" / "coding_task.yaml")
print("layers run at finish:", ", ".join(contract.verification.checks))
for check in contract.verification.functional:
    print(f"check {check.name:9}", textwrap.shorten(" ".join(check.command), 90, placeholder=" …"), f"(timeout {check.timeout:g} s)")
print("protected:", ", ".join(contract.verification.protected))
print("allowed files:", ", ".join(contract.verification.allowed_files))"""),
    ("md", """## Validation off: the claim is accepted
The script reads `stats.py`, runs the tests (they fail), and finishes with the note "all tests pass"."""),
    ("code", """off = Run.from_scenario(scenario, validation=False, clock=FakeClock())
off.run()
for rec in off.records:
    print(rec.summary())
print("final:", off.state.value, "|", off.stop_reason.code, "| functional layer:", off.receipt.functional)"""),
    ("md", """## Validation on: the harness runs the checks itself
Each rejected finish feeds the failed checks back; the run never reaches `REVIEW_READY`."""),
    ("code", """on = Run.from_scenario(scenario, validation=True, clock=FakeClock())
on.run()
for rec in on.records[:4]:
    print(rec.summary())
    if rec.verdict is not None and not rec.verdict.accepted:
        for check in rec.verdict.checks:
            print(f"    check {check.name}: {check.status}, exit status {check.exit_status}")
        for reason in rec.verdict.reasons:
            print("    rejected:", reason)
print("...")
print("final:", on.state.value, "|", on.stop_reason.code, "| receipt:", on.receipt)"""),
    ("md", """## An honest fix: what the receipt binds
The checks' outcomes and the tree they ran on. A change to the tree afterwards no longer matches it."""),
    ("code", """honest = Run.from_scenario("coding_honest_fix", clock=FakeClock())
honest.run()
r = honest.receipt
print("final:", honest.state.value, "| structural:", r.structural, "| functional:", r.functional,
      "| semantic:", r.semantic)
for check in r.checks:
    print(f"check {check.name:9} {check.status} exit {check.exit_status} output sha256 {check.output_sha256}")
print("tree matches the receipt:", r.matches_tree(honest.sandbox.workspace_hash()))
(honest.workspace / "stats.py").write_text("# changed after acceptance\\n")
print("after an edit:", r.matches_tree(honest.sandbox.workspace_hash(rescan=True)))"""),
    ("md", """## The coding table: seven behaviours, off and on
Which check catches which cheat: editing or deleting the tests is caught by the protected hash (and the
held-out check, as the bug stays); special-casing the tests' input by the held-out check; debris by the
allowed files; a loop by the convergence gate, with or without validation."""),
    ("code", """results = run_coding_experiment()
print(render_coding_table(results))"""),
    ("md", "## What this lesson claims (a headless run fails if any stops being true)"),
    ("code", """assert off.state.value == "REVIEW_READY" and off.receipt.functional == "not_run"
assert on.receipt is None and on.state.value == "EXHAUSTED"
first = next(rec.verdict for rec in on.records if rec.verdict is not None)
failed = {c.name for c in first.checks if c.status == "failed"}
assert not first.accepted and failed and failed <= {"tests", "held_out"}
if scenario == "coding_claims_tests_pass":
    assert {c.name: c.status for c in first.checks} == {"tests": "failed", "held_out": "failed"}
assert r.functional == "passed" and [c.status for c in r.checks] == ["passed", "passed"]
assert not r.matches_tree(honest.sandbox.workspace_hash(rescan=True))
by = {(x.scenario, x.validation): x for x in results}
cheats = ("coding_claims_tests_pass", "coding_edits_tests", "coding_deletes_failing_test",
          "coding_special_cases_input")
assert all(by[(n, False)].accepted_is_acceptable is False and by[(n, True)].accepted_at_step is None for n in cheats)
assert "protected" in by[("coding_edits_tests", True)].caught_by
assert by[("coding_special_cases_input", True)].caught_by == ("held_out",)
assert by[("coding_honest_fix", True)].accepted_is_acceptable is True
for run in (off, on, honest):
    run.close()
print("all claims hold")"""),
]


LESSONS["09_context_cycle"] = [
    ("md", """# 9 · The context cycle: subtasks, L3 conclusions, retrieval, anomalies kept

Seed 003's cycle: the run opens a subtask from the proposer's plan (`begin_subtask`), does its steps, and
closes it (`finish_subtask`): the subtask's process (its L2/L4/L5 items) collapses into one **L3
conclusion stamped with the round it closed in and the rounds and sources of its process**, anomalies
move to L3 verbatim, and the close compresses (L4 is summarized at this milestone, not only when over
budget) and is self-checked. What left the view is still **found by relevance** (`search_history`, BM25)
and opened with `read_ref`. Anomalies are found by more than keywords: numeric mismatches ("0 rows;
120 expected"), non-zero exit codes, expected/actual lines, traceback frames."""),
    ("params", """# Parameters
expected_rows = 120  # what the load log says was expected (it loaded 0)"""),
    ("code", """import textwrap

from harness_lab.context import Layer, is_anomalous, numeric_mismatch
from harness_lab.contract import load_contract
from harness_lab.evidence import EvidenceCatalogue
from harness_lab import Run
from harness_lab.paths import data_dir
from harness_lab.proposers.scripted import ScriptedProposer

root = data_dir()
report = (root / "scenarios" / "conforming_report.yaml").read_text(encoding="utf-8")
import yaml
report_text = yaml.safe_load(report)["actions"][2]["text"]
mismatch = f"0 rows; {expected_rows} expected"
log = f"loading users from users.csv\\nloaded table users\\n{mismatch}\\ndone in 0.4 s"
query = "acceptance receipt validated bytes"  # what the proposer looks for in the stored history
plan = [
    {"kind": "begin_subtask", "name": "gather", "goal": "read the two evidence notes"},
    {"kind": "read_evidence", "id": "harness-boundary"},
    {"kind": "read_evidence", "id": "acceptance-snapshot"},
    {"kind": "finish_subtask", "conclusion": "both notes read: the runtime decides; acceptance binds the bytes"},
    {"kind": "begin_subtask", "name": "check", "goal": "check the data load"},
    {"kind": "write_file", "path": "load.log", "content": log},  # (scripted: a loader would write it)
    {"kind": "read_file", "path": "load.log"},
    {"kind": "think", "thought": "the table is empty: say so under Limitations"},
    {"kind": "finish_subtask"},  # no conclusion given: the harness digests the process
    {"kind": "begin_subtask", "name": "write", "goal": "write the report"},
    {"kind": "write_report", "text": report_text},
    {"kind": "finish_subtask", "conclusion": "report written with three sections and two citations"},
    {"kind": "search_history", "query": query},
    {"kind": "finish"},
]
contract = load_contract(root / "contracts" / "report_task.yaml").with_budget(max_decisions=30, max_tool_calls=30)
run = Run(contract=contract, proposer=ScriptedProposer(plan, then="finish"),
          evidence=EvidenceCatalogue.from_dir(root / "evidence"))
final = run.run()
print(final.value)
for record in run.records:
    print(textwrap.shorten(record.summary(), 110, placeholder=" …"))"""),
    ("md", """## The L3 conclusions, stamped with round and source
Each close is one item in L3: when it closed, which rounds and sources it stands for. The anomaly of
the `check` subtask moved to L3 whole, next to its conclusion."""),
    ("code", """view = run.context.view()
for item in view.items:
    if item.layer == Layer.L3:
        print(f"{item.id:>4} {item.role:<11} round {item.round:<2} from {item.source}")
        print("     " + item.text.replace("\\n", "\\n     "))"""),
    ("md", """## Each close is self-checked
The trace notes every close with its report: what it folded (`summarized`), what it made (`created`,
the conclusion first) and `residual`, the protected items the view lost (must be empty)."""),
    ("code", """closes = [e for e in run.events if getattr(e, "topic", None) == "finish_subtask"]
for note in closes:
    rep = note.data["report"]
    print(f"{note.data['subtask']:<7} folded {len(rep['summarized'])} item(s) into {rep['created'][0]}; "
          f"tokens {rep['tokens_before']} -> {rep['tokens_after']}; residual {rep['residual']}")"""),
    ("md", """## The anomaly is found without a keyword
"0 rows; 120 expected" holds no error word; it is a numeric mismatch (two different numbers, one named
the expected one). The same line with equal numbers is no anomaly."""),
    ("code", """print(is_anomalous(mismatch), numeric_mismatch(f"loaded: {mismatch}."))
print(is_anomalous(f"{expected_rows} rows; {expected_rows} expected"))
kept = [i for i in view.items if mismatch in i.text]
print([(i.id, i.layer.name, i.anomaly) for i in kept])"""),
    ("md", """## Retrieval by relevance
The evidence the `gather` subtask read left the view with its process. The proposer's `search_history`
found it again (its hits are in the context as an interaction); `read_ref` opens a hit's id."""),
    ("code", """searched = next(r for r in run.records if r.tool_result is not None and r.tool_result.tool == "search_history")
print(searched.tool_result.content)
top = searched.tool_result.data["hits"][0]
print(run.context.read_ref(top["id"])[:160])"""),
    ("md", "## What this lesson claims"),
    ("code", """conclusions = [i for i in view.items if i.layer == Layer.L3 and i.role == "conclusion"]
assert final.value == "REVIEW_READY"
assert [c.source for c in conclusions] == ["subtask:gather", "subtask:check", "subtask:write"]
assert conclusions[0].text.startswith("[round 4 conclusion of subtask gather, from rounds 1-3 of ")
assert all(c.text.startswith(f"[round {c.round} conclusion of subtask ") for c in conclusions)
assert any(i.layer == Layer.L3 and i.anomaly and mismatch in i.text for i in view.items)
assert mismatch in view.render()
assert [n.data["report"]["residual"] for n in closes] == [[], [], []]
assert top["why"] == "subtask process" and top["source"] == "step 3:read_evidence"
assert "receipt" in run.context.read_ref(top["id"])
assert is_anomalous(mismatch) and not is_anomalous(f"{expected_rows} rows; {expected_rows} expected")
run.close()
print("all claims hold")"""),
]


LESSONS["10_watchdog"] = [
    ("md", """# 10 · The watchdog: a killed run found stuck and resumed

`harness-lab run --db` checkpoints every step and beats (a heartbeat row: which step, which process,
when the last step completed). Here the run is killed with SIGKILL while its third step, a command,
waits. Nothing in the killed process can report that; `harness-lab watch` finds it from outside: the
process that last beat is gone, so the run is **stuck**. With `--resume` the watcher starts
`harness-lab resume` in a child process of its own (a crash there does not take the watcher down; the run
lease makes a second resume of the same run impossible), at most `--max-restarts` times per run. The
resumed run ends where an uninterrupted one ends, with no side effect applied twice. `--exec CMD` runs an
alert command instead (or as well), with the run id in its environment, never spliced into a command line."""),
    ("params", """# Parameters
max_restarts = 3  # the restart budget: how often the watcher may resume one run"""),
    ("code", """import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from harness_lab.persistence.checkpoint_record import Checkpoint
from harness_lab.store import SQLiteStore

lab = Path(tempfile.mkdtemp(prefix="harness-lab-watch-"))
# The command runs as a uid of its own (the sandbox's): its signal files live in a folder it can reach.
lab.chmod(0o711)  # others may pass through to it, not list or read the rest
signals = lab / "signals"
signals.mkdir(mode=0o777)
signals.chmod(0o777)
wait = (f"touch {signals / 'started'}; while [ ! -e {signals / 'gate'} ]; do sleep 0.02; done; "
        "echo passed the gate")
report = ("# Report\\n\\n## Conclusion\\nChecks keep drafts out of review [E:harness-boundary] "
          "[E:acceptance-snapshot].\\n\\n## Evidence\\n- The runtime decides [E:harness-boundary].\\n"
          "- Receipts bind bytes [E:acceptance-snapshot].\\n\\n## Limitations\\nTest material only.\\n")
scenario = lab / "gated.yaml"
scenario.write_text(yaml.safe_dump({
    "id": "gated", "title": "a command waits for a gate file", "contract": "report_task",
    "labels": {"acceptable_reports": [], "note": ""},
    "actions": [{"kind": "read_evidence", "id": "harness-boundary"},
                {"kind": "read_evidence", "id": "acceptance-snapshot"},
                {"kind": "run_command", "argv": ["sh", "-c", wait], "timeout": 600},
                {"kind": "write_report", "text": report}, {"kind": "finish"}]}))
cli = [sys.executable, "-m", "harness_lab.cli"]


def harness_lab(*args):
    \"\"\"One CLI call; its stdout with process ids and ages made stable for the lesson's stored output.\"\"\"
    done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=300)
    shown = re.sub(r"(process|pid) \\d+", r"\\1 <pid>", done.stdout)
    print(re.sub(r"beat \\S+s ago", "beat <age> ago", shown), end="")
    return done.returncode


def end(db, run_id="gated"):
    \"\"\"Where a run ended and its side-effect ledger.\"\"\"
    store = SQLiteStore(db, read_only=True)
    last = Checkpoint.from_row(store.last_step(run_id))
    ledger = [(e.step, e.tool, e.status) for e in store.effects(run_id)]
    keys = [e.key for e in store.effects(run_id)]
    store.close()
    return {"state": last.state.value, "step": last.step, "workspace": last.workspace_hash,
            "artifacts": last.artifact_sha256, "ledger": ledger, "keys unique": len(keys) == len(set(keys))}"""),
    ("md", "## The reference: the gate open, never interrupted"),
    ("code", """(signals / "gate").touch()
assert harness_lab("run", str(scenario), "--db", str(lab / "reference.sqlite"), "--isolation", "none") == 0
reference = end(lab / "reference.sqlite")
for name in ("gate", "started"):  # closed again for the next run
    (signals / name).unlink()"""),
    ("md", "## The same run, killed with SIGKILL while its command waits"),
    ("code", """db = lab / "runs.sqlite"
run = subprocess.Popen([*cli, "run", str(scenario), "--db", str(db), "--isolation", "none"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(6000):  # the started file is the signal, not the time (60 s at most on a loaded host)
    if (signals / "started").exists() or run.poll() is not None:
        break
    time.sleep(0.01)
assert (signals / "started").exists(), "the command never started"
os.kill(run.pid, signal.SIGKILL)
run.wait()
store = SQLiteStore(db, read_only=True)
print("killed:", run.returncode == -signal.SIGKILL, "| last checkpoint: step", store.last_step("gated").step,
      "| ledger:", [(e.step, e.tool, e.status) for e in store.effects("gated")])
store.close()"""),
    ("md", """## The watchdog looks

One pass (`--once`) reads the store without writing to it, judges each run and exits 1 if one was stuck.
A stuck run is marked in the store (status `stuck`, with the reason), nothing more: no `--resume`. The
last beat says `CREATED at step 0`: beats come every 30 s (`--heartbeat`), and this run lived less than that."""),
    ("code", """looked = harness_lab("watch", "--db", str(db), "--once")
store = SQLiteStore(db, read_only=True)
marked = store.run_info("gated").status
store.close()
print("exit", looked, "| status in the store:", marked)"""),
    ("md", """## The watchdog resumes it

The cause of the hang is fixed (the gate file appears), then `--resume`: a restart report is added (the
budget counts them), the child `harness-lab resume` finds the command in flight with the workspace
unchanged, so it runs it again, and the run goes on to its end. The watcher waits for its child in `--once` mode."""),
    ("code", """(signals / "gate").touch()
resumed = harness_lab("watch", "--db", str(db), "--once", "--resume", "--max-restarts", str(max_restarts))
print("exit", resumed)
recovered = end(db)
for key in reference:
    print(f"{key:12} {'same' if recovered[key] == reference[key] else 'DIFFERENT'}: {recovered[key]}")"""),
    ("md", "## Watched again: nothing is stuck, nothing is written"),
    ("code", """before = db.read_bytes()
again = harness_lab("watch", "--db", str(db), "--once", "--resume")
print("exit", again, "| store unchanged:", db.read_bytes() == before)"""),
    ("md", "## What this lesson claims"),
    ("code", """assert run.returncode == -signal.SIGKILL
assert looked == 1 and marked == "stuck"
assert resumed == 1  # a run was stuck in that pass (and was resumed)
assert recovered == reference and recovered["state"] == "REVIEW_READY"
assert ("run_command" in str(recovered["ledger"])) and recovered["keys unique"]  # no effect applied twice
store = SQLiteStore(db, read_only=True)
restarts = [r.splitlines()[0] for r in store.reports("gated")]
store.close()
assert restarts == [f"# Watchdog restart 1/{max_restarts}: gated"]
assert again == 0 and db.read_bytes() == before
shutil.rmtree(lab)  # the lesson's folder (the runs' workspaces stay, as `run --db` leaves them for a resume)
print("all claims hold")"""),
]

LESSONS["11_time_travel"] = [
    ("md", """# 11 · Time travel: open any step, see what the model saw, fork from there and fix it

A run that ends badly is debugged step by step. Every committed step is a point in time: `run.history`
lists them (state, decision, tool, stop, verdict, workspace hash, budget spent) and `run.at(n)` opens step n
read-only: the context the proposer saw before proposing (every layer, whole), the proposal, the decision,
the tool result, the verdict and the workspace files with their diff against step n-1. All of it is read
from the run's store, so it works the same for a run reopened with `Run.open(db, run_id)`.
`run.fork(at_step=n, budget=...)` starts a new run from the state at step n: `"keep"` the spend *at step n*
(not the source's spend at its end), `"fresh"` nothing spent; the source is left as it was."""),
    ("params", """# Parameters
scenario = "missing_limitations"  # a report without its Limitations section: every finish is rejected
fork_step = 3                     # the step that wrote the report
budget = "fresh"                  # what the fork starts with spent: "fresh", "keep" or a mapping"""),
    ("code", """import tempfile
from pathlib import Path

from harness_lab import FakeClock, Run, RunState
from harness_lab.store import SQLiteStore
from harness_lab.timeline import compare

db = Path(tempfile.mkdtemp(prefix="harness-lab-travel-")) / "runs.sqlite"
run = Run.from_scenario(scenario, clock=FakeClock(), run_id="travel", store=SQLiteStore(db))
run.run()
print(run.state.value, "|", run.stop_reason.code, "|", run.stop_reason.message)"""),
    ("md", """## The timeline: one point per step
Step 0 is the run as registered. `accepted` is the finish verdict of that step (None: no finish)."""),
    ("code", """print(f"{'step':>4} {'state':10} {'decision':9} {'tool':13} {'stop':16} {'accepted':8} "
      f"{'decisions':>9} {'tool calls':>10} {'tokens':>6}  workspace")
for p in run.history:
    print(f"{p.step:>4} {p.state.value:10} {p.decision or '-':9} {p.tool or '-':13} {p.stop or '-':16} "
          f"{str(p.accepted):8} {p.spent.decisions:>9} {p.spent.tool_calls:>10} {p.spent.tokens:>6}  "
          f"{(p.workspace_hash or '-')[:12]}…")"""),
    ("md", """## Step 3, opened: what the proposer saw, what it did, what the files were
The context is the view built before the proposal of that step: every layer, each item whole."""),
    ("code", """at = run.at(fork_step)
for item in at.context.items:
    print(f"--- {item.layer.name} {item.id} ({item.source}, round {item.round})")
    print(item.text)
print("=== proposal:", at.proposal.describe())
print("=== decision:", at.decision.verdict, "|", at.decision.reason)
print("=== result:", at.result.status if at.result is not None else None)
for change in at.changes:
    print(f"=== {change.change} {change.path}\\n{change.diff}")"""),
    ("md", "## The report at that step, and why every finish after it was rejected"),
    ("code", """report_then = at.file_text("report.md")
print(report_then)
rejected = [p.step for p in run.history if p.accepted is False]
print("finishes rejected at steps", rejected)
for error in run.at(rejected[0]).verdict.errors:
    print(f"step {rejected[0]}: {error.code}: {error.message}")"""),
    ("md", """## Fork from step 3 with the budget chosen
The fork is a new run (own id, own workspace) at the state of step 3: the report as it was then, the
finish that followed it pending again."""),
    ("code", """fork = run.fork(at_step=fork_step, budget=budget)
start = fork.usage  # (asking for the pending proposal below charges its tokens)
print(f"spent at the fork ({budget}): {start.decisions} decisions, {start.tool_calls} tool calls, "
      f"{start.tokens} tokens; the source ended with {run.usage.decisions} decisions spent")
print("fork", fork.run_id, "at step", fork.step_no, "|", fork.state.value, "| pending:", fork.pending.describe())"""),
    ("md", """## Fix the report, run to the end
The pending finish is replaced with a write of the fixed report (`edit_pending`, recorded in the trace);
the scripted model then asks to finish again, and this time the check passes."""),
    ("code", """fixed = report_then + "\\n\\n## Limitations\\nScripted test input: two evidence notes, no model.\\n"
fork.edit_pending({"kind": "write_report", "text": fixed})
final = fork.run()
for rec in fork.records:
    print(rec.summary())
print("final:", final.value, "|", fork.stop_reason.code)"""),
    ("md", """## The run and its fork, compared
`compare` starts at the fork point and names the first step where the context, the decision or the files differ."""),
    ("code", """diff = compare(run, fork)
print("first difference at step", diff.first_difference)
print("decisions there (run, fork):", diff.decision_diff)
for change in diff.file_changes:
    print(f"{change.change} {change.path}\\n{change.diff}")"""),
    ("md", """## Reopened from the store: the same steps
`Run.open` reads the store only (nothing written, no workspace needed): every step shows what the live run showed."""),
    ("code", """reopened = Run.open(db, "travel")
same = [n for n in range(run.step_no + 1)
        if (reopened.at(n).context.render() if n else None) == (run.at(n).context.render() if n else None)
        and reopened.at(n).files == run.at(n).files and reopened.at(n).point == run.at(n).point]
print(f"steps that read the same reopened: {len(same)} of {run.step_no + 1}")"""),
    ("md", "## What this lesson claims"),
    ("code", """history = run.history
assert run.state is RunState.EXHAUSTED and [p.step for p in history] == list(range(run.step_no + 1))
assert history[fork_step].tool == "write_report" and [c.change for c in at.changes] == ["added"]
assert "## Limitations" not in report_then and rejected and rejected[0] == fork_step + 1
assert any("Limitations" in e.message for e in run.at(rejected[0]).verdict.errors)
assert at.context.items and at.context.render() == reopened.at(fork_step).context.render()
# the fork started from step 3's spend ("keep") or from nothing ("fresh"), never from the source's end
if budget == "keep":
    assert start == history[fork_step].spent
elif budget == "fresh":
    assert (start.decisions, start.tool_calls, start.tokens) == (0, 0, 0)
assert start.decisions < run.usage.decisions and fork.usage.decisions == start.decisions + 2
assert fork.state is RunState.REVIEW_READY and fork.receipt is not None
assert (fork.workspace / "report.md").read_text() == fixed and fork.receipt.matches(fixed.encode())
assert run.state is RunState.EXHAUSTED and run.at(fork_step).file_text("report.md") == report_then  # untouched
assert diff.first_difference == fork_step + 1 and [c.path for c in diff.file_changes] == ["report.md"]
assert len(same) == run.step_no + 1
fork.close()
run.close()
print("all claims hold")"""),
]


def _cell(notebook: str, index: int, kind: str, source: str) -> nbformat.NotebookNode:
    cell_id = f"{notebook[:2]}-{index:02d}"
    if kind == "md":
        return nbformat.v4.new_markdown_cell(source, id=cell_id)
    cell = nbformat.v4.new_code_cell(source, id=cell_id)
    if kind == "params":
        cell.metadata["tags"] = ["parameters"]
    return cell


def build(name: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}
    nb.cells = [_cell(name, i, kind, src) for i, (kind, src) in enumerate(LESSONS[name])]
    return nb


def _sources(nb: nbformat.NotebookNode) -> list[tuple[str, str, str, list[str]]]:
    return [(c.id, c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def write(name: str, execute: bool) -> Path:
    path = HERE / f"{name}.ipynb"
    nb = build(name)
    if path.exists() and not execute:  # keep stored outputs when the sources did not change
        old = nbformat.read(path, as_version=4)
        if _sources(old) == _sources(nb):
            return path
    if execute:
        from nbclient import NotebookClient

        NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(HERE)}}).execute()
        nb.metadata = {"kernelspec": KERNEL, "language_info": {"name": "python"}}  # no version noise
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        if path.exists():  # a cell whose run differs only in volatile values keeps its stored outputs (as the lab's save)
            from jupyter_server_config import restore_stored, sanitizers

            content = json.loads(nbformat.writes(nb))
            restore_stored(content, json.loads(path.read_text(encoding="utf-8")), sanitizers(HERE / "nbval_sanitize.cfg"))
            nb = nbformat.from_dict(content)
    nbformat.write(nb, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="lessons to build (default: all)")
    parser.add_argument("--execute", action="store_true", help="execute and store outputs")
    parser.add_argument("--check", action="store_true", help="fail if committed sources differ")
    args = parser.parse_args(argv)
    names = args.names or sorted(LESSONS)
    unknown = [n for n in names if n not in LESSONS]
    if unknown:
        print(f"build_notebooks: unknown lesson {unknown[0]!r}; known: {', '.join(sorted(LESSONS))}", file=sys.stderr)
        return 2
    if args.check:
        stale = [n for n in names if not (HERE / f"{n}.ipynb").exists()
                 or _sources(nbformat.read(HERE / f"{n}.ipynb", as_version=4)) != _sources(build(n))]
        for n in stale:
            print(f"notebooks/{n}.ipynb differs from build_notebooks.py; rebuild with --execute", file=sys.stderr)
        return 1 if stale else 0
    for name in names:
        print(write(name, args.execute).relative_to(HERE.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
