"""The dashboard shows no secret the store would not keep: the pending proposal (and its editor), the trace
table, the context panel's excerpts, the verdicts and the status line pass the run's redactor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness_lab.widgets import LabView

from harness_lab import EvidenceCatalogue, FakeClock, FunctionProposer, Run, load_contract
from harness_lab.paths import data_dir

AWS = "AKIA" + "QWERTYUIOPASDFGH"
GITHUB = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
PEM_BODY = "MIIEowIBAAKCAQEAz1Q2w3e4r5t6y7u8i9o0p"
PASSWORD = "hunter2-open-sesame"
SECRETS = (AWS, GITHUB, PEM_BODY, PASSWORD)
# The GitHub token first: the trace's one-line description of a write keeps only its first 60 characters,
# which once cut the token short of the length its pattern needs.
NOTES = (f"github {GITHUB}\naws id {AWS}\ndb password={PASSWORD}\n"
         f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n")
ACTIONS: list[dict[str, Any]] = [
    {"kind": "write_file", "path": "notes.txt", "content": NOTES},
    {"kind": "read_file", "path": "notes.txt"},
    {"kind": "run_command", "argv": ["cat", "notes.txt"]},
    {"kind": "write_report", "text": f"# Report\n\n## Conclusion\nsee [E:{GITHUB}] and password={PASSWORD}\n"},
    {"kind": "finish"},
]


def _texts(widget: Any) -> Iterator[str]:
    for name in ("value", "description", "tooltip", "placeholder"):
        if isinstance(value := getattr(widget, name, None), str):
            yield value
    for child in getattr(widget, "children", ()):
        yield from _texts(child)


def test_no_panel_shows_a_secret_the_store_would_redact(tmp_path: Any) -> None:
    def propose(view: object) -> dict[str, Any]:
        propose.n += 1  # type: ignore[attr-defined]
        if propose.n > len(ACTIONS):  # type: ignore[attr-defined]
            raise RuntimeError(f"the proposer broke: token={PASSWORD}")  # shown in the pending panel
        return ACTIONS[propose.n - 1]  # type: ignore[attr-defined]

    propose.n = 0  # type: ignore[attr-defined]
    run = Run(contract=load_contract(data_dir() / "contracts" / "report_task.yaml"), proposer=FunctionProposer(propose),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws", clock=FakeClock())
    view = LabView(run, plot=False)
    shown = ["\n".join(_texts(view.widget))]  # the pending write, before it runs
    for _ in range(len(ACTIONS) + 1):
        try:
            view.step()
        except RuntimeError:
            pass
        shown.append("\n".join(_texts(view.widget)))
    view.show_error(ValueError(f"bad input: {AWS}"))
    shown.append(view.status.value)
    everything = "\n".join(shown)
    for secret in SECRETS:
        assert secret not in everything, f"{secret[:8]}... shown in the dashboard"
    # each place did show the marks: the pending proposal and its editor, the trace, the context, the checks
    assert "[REDACTED]" in shown[0] and "[REDACTED]" in view.status.value
    assert "[REDACTED]" in view.trace.html.value and "[REDACTED]" in view.context.html.value
    assert any("the proposer broke: token=[REDACTED]" in s for s in shown)  # pending, then the stop reason
    assert "token=[REDACTED]" in view.state.html.value
    view.close()
    run.close()
