"""A hand-made debugging session is recorded call by call and replays headless to the same states."""

from __future__ import annotations

import json

import pytest
from harness_lab.widgets import LabView, Session

from harness_lab import FakeClock, Run


def _fresh(tmp_path, name: str) -> LabView:
    return LabView(Run.from_scenario("missing_section_then_fixed", workspace=tmp_path / name, clock=FakeClock()),
                   plot=False)


def _debug_by_hand(view: LabView) -> None:
    view.step()
    view.inject("tool_timeout")
    view.step()  # the evidence read times out: the run goes on without it
    view.run_to_gate()
    view.run_to_end()
    first = view.run.sandbox.snapshots()[0].id
    view.rollback(first)
    view.step()


def test_every_call_is_recorded_with_what_it_led_to(tmp_path):
    view = _fresh(tmp_path, "a")
    _debug_by_hand(view)
    actions = [e.action for e in view.session.entries]
    assert actions == ["step", "inject", "step", "run_to_gate", "run_to_end", "rollback", "step"]
    inject = view.session.entries[1]
    assert inject.args == {"name": "tool_timeout"} and inject.step_after == 1
    assert view.session.entries[-1].state_after == view.run.state.value
    assert view.session.entries[-1].workspace_hash == view.run.sandbox.workspace_hash()
    # the decisions themselves are in the run's trace
    kinds = {(e.kind, getattr(e, "topic", "")) for e in view.run.events}
    assert ("note", "fault_armed") in kinds and ("restored", "") in kinds


def test_a_saved_session_replays_to_the_same_states_and_hashes(tmp_path):
    view = _fresh(tmp_path, "a")
    _debug_by_hand(view)
    saved = view.session.save(tmp_path / "session.json")
    replayed = Session.load(saved).replay(_fresh(tmp_path, "b"))
    assert replayed.identical, replayed.detail
    assert replayed.entries == 7


def test_a_replay_that_goes_another_way_names_the_first_differing_call(tmp_path):
    view = _fresh(tmp_path, "a")
    _debug_by_hand(view)
    text = view.session.to_json().replace('"tool_timeout"', '"malformed_proposal"')
    replayed = Session.from_json(text).replay(_fresh(tmp_path, "b"))
    assert not replayed.identical and replayed.diverged_at is not None and replayed.diverged_at >= 2
    assert f"entry {replayed.diverged_at}" in replayed.detail


@pytest.mark.parametrize(("text", "message"), [
    ("{", "s.json: not JSON"),
    ('{"kind": "trace", "entries": []}', "s.json: not a saved session"),
    ('{"kind": "session", "entries": [{"action": "explode", "state_after": "RUNNING", "step_after": 1, '
     '"workspace_hash": "x"}]}', "s.json: entry 0:"),
])
def test_a_bad_session_file_is_one_clear_error(text, message):
    with pytest.raises(ValueError) as info:
        Session.from_json(text, source="s.json")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_edit_button_replaces_the_pending_proposal_and_the_trace_says_so(tmp_path):
    view = _fresh(tmp_path, "a")
    assert "harness-boundary" in view.pending.editor.value
    view.pending.editor.value = '{"kind": "read_evidence", "id": "budget-gates"}'
    view.pending.edit_button.click()
    assert view.run.pending.describe() == "read_evidence(id='budget-gates')"
    assert "budget-gates" in view.pending.html.value
    rec = view.step()
    assert rec.tool_result is not None and "budget-gates" in view.run.executor.observed
    (note,) = [e for e in rec.events if e.kind == "note" and e.topic == "pending_edited"]
    assert note.data["before"]["id"] == "harness-boundary" and note.data["after"]["id"] == "budget-gates"
    assert [e.action for e in view.session.entries] == ["edit_pending", "step"]
    view.pending.editor.value = "{not json"
    view.pending.edit_button.click()
    assert "not JSON" in view.status.value


def test_an_edit_is_refused_while_a_human_gate_waits(make_run):
    from harness_lab import RunStateError

    view = LabView(make_run(), plot=False)
    view.run_to_gate()
    assert view.pending.edit_button.disabled
    with pytest.raises(RunStateError):
        view.edit_pending({"kind": "push", "remote": "elsewhere"})
    assert view.run.waiting is not None and view.run.pending.describe().startswith("push(args={'remote': 'origin'")


def test_a_session_with_an_edit_replays_identically(tmp_path):
    view = _fresh(tmp_path, "a")
    view.edit_pending({"kind": "read_evidence", "id": "budget-gates"})
    view.run_to_end()
    replayed = Session.from_json(view.session.to_json()).replay(_fresh(tmp_path, "b"))
    assert replayed.identical, replayed.detail


@pytest.mark.parametrize(("args", "message"), [
    ({}, "s.json: entry 0: reject needs argument 'reason'"),
    ({"reason": "x", "bogus": 1}, "s.json: entry 0: reject takes no argument 'bogus'"),
    ({"reason": 5}, "s.json: entry 0: reject argument 'reason' must be str, not int"),
])
def test_a_session_entry_with_arguments_its_call_cannot_take_is_refused_on_load(args, message):
    # was loaded, then failed mid-replay with a TypeError / AttributeError from inside LabView
    text = json.dumps({"kind": "session", "entries": [
        {"action": "reject", "args": args, "state_after": "BLOCKED", "step_after": 1, "workspace_hash": "x"}]})
    with pytest.raises(ValueError) as info:
        Session.from_json(text, source="s.json")
    assert str(info.value) == message


def test_a_bad_field_of_a_session_entry_is_named_with_pydantic_s_reason():
    text = ('{"kind": "session", "entries": [{"action": "explode", "state_after": "RUNNING", "step_after": 1, '
            '"workspace_hash": "x"}]}')
    with pytest.raises(ValueError) as info:
        Session.from_json(text, source="s.json")
    assert str(info.value).startswith("s.json: entry 0: action: Input should be 'step'")


def test_a_session_with_a_fault_object_injected_saves_loads_and_replays_with_its_parameters(tmp_path):
    # Before: it saved (the fault as its fields) but loading the file failed: "inject argument 'name'
    # must be str, not dict", so the session was lost.
    from harness_lab.faults import fault_catalogue

    slow = fault_catalogue()["tool_timeout"].model_copy(update={"seconds": 99.0})
    view = _fresh(tmp_path, "a")
    view.inject(slow)
    view.run_to_end()
    loaded = Session.load(view.session.save(tmp_path / "session.json"))
    fresh = _fresh(tmp_path, "b")
    replayed = loaded.replay(fresh)
    assert replayed.identical, replayed.detail
    armed = [e.data for e in fresh.run.events if e.kind == "note" and e.topic == "fault_armed"]
    assert armed == [e.data for e in view.run.events if e.kind == "note" and e.topic == "fault_armed"]
    assert "99" in str(armed)  # its own parameters, not the catalogue's


@pytest.mark.parametrize(("fault", "message"), [
    ({"kind": "fault", "name": "no_such_fault"}, "s.json: entry 0: inject: unknown fault 'no_such_fault'; choose one of"),
    ({"kind": "fault", "name": "tool_timeout", "seconds": -1}, "s.json: entry 0: inject: fault tool_timeout seconds:"),
])
def test_a_saved_fault_that_does_not_fit_is_refused_on_load(fault, message):
    text = json.dumps({"kind": "session", "entries": [
        {"action": "inject", "args": {"name": fault}, "state_after": "CREATED", "step_after": 0, "workspace_hash": "x"}]})
    with pytest.raises(ValueError) as info:
        Session.from_json(text, source="s.json")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
