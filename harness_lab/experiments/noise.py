"""What a study's seed varies: seeded perturbations of a scenario's scripted actions.

The scripted scenarios are deterministic, so repeating one twenty times would measure nothing.
A seed draws a perturbed copy of the script with ``random.Random(f"{scenario}:{seed}")`` (string
seeds hash with SHA-512, so the draw is the same in every process and on every executor):

* ``drop_read``      - a ``read_evidence`` action is left out (the report may then cite unread evidence);
* ``malformed_call`` - a malformed proposal (``read_evidence`` without an id) is inserted first;
* ``repeat_call``    - the action is proposed twice in a row;
* ``mutate_section`` - a ``write_report`` text loses one required section (heading and body).

Seed 0 is the unperturbed script, i.e. the seed's own table. Ground truth does not move with the
noise: a scenario's labels name the acceptable report *bytes*, fixed before any run; a mutated text
lacks a required section, so it is never among them, and no other perturbation changes a text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["NoisyScript", "Perturbation", "PerturbationKind", "perturb_script"]

PerturbationKind = Literal["drop_read", "malformed_call", "repeat_call", "mutate_section"]
_HEADING = re.compile(r"^#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$", re.MULTILINE)
_MALFORMED: dict[str, Any] = {"kind": "read_evidence"}  # no id: a bad_arguments proposal error
_REQUIRED = {"conclusion", "evidence", "limitations", "结论", "证据", "局限"}


class Perturbation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: PerturbationKind
    index: int  # position in the original script
    detail: str = ""


class NoisyScript(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int
    rate: float
    actions: tuple[dict[str, Any], ...]
    perturbations: tuple[Perturbation, ...] = ()


def perturb_script(actions: Sequence[dict[str, Any]], *, scenario: str, seed: int, rate: float) -> NoisyScript:
    """A perturbed copy of ``actions``; each action is perturbed with probability ``rate``."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"noise rate must lie in [0, 1], got {rate}")
    if seed == 0 or rate == 0.0:
        return NoisyScript(seed=seed, rate=rate, actions=tuple(dict(a) for a in actions))
    rng = random.Random(f"{scenario}:{seed}")
    out: list[dict[str, Any]] = []
    applied: list[Perturbation] = []
    for index, action in enumerate(actions):
        # Draw both numbers for every action so one perturbation never shifts later draws' meaning.
        hit, pick = rng.random() < rate, rng.random()
        options = _options(action)
        if not hit or not options:
            out.append(dict(action))
            continue
        kind = options[int(pick * len(options))]
        detail = ""
        if kind == "drop_read":
            detail = str(action.get("id", ""))
        elif kind == "malformed_call":
            out += [dict(_MALFORMED), dict(action)]
        elif kind == "repeat_call":
            out += [dict(action), dict(action)]
        else:
            text, detail = _drop_section(str(action["text"]), rng)
            out.append({**action, "text": text})
        applied.append(Perturbation(kind=kind, index=index, detail=detail))
    if not out:  # a script of one dropped read: keep something to propose
        out.append(dict(_MALFORMED))
    return NoisyScript(seed=seed, rate=rate, actions=tuple(out), perturbations=tuple(applied))


def _options(action: dict[str, Any]) -> list[PerturbationKind]:
    kind = action.get("kind")
    options: list[PerturbationKind] = ["malformed_call", "repeat_call"]
    if kind == "read_evidence":
        options.insert(0, "drop_read")
    if kind == "write_report" and _required_headings(str(action.get("text", ""))):
        options.append("mutate_section")
    return options


def _required_headings(text: str) -> list[re.Match[str]]:
    return [m for m in _HEADING.finditer(text) if m.group(1).strip().casefold() in _REQUIRED]


def _drop_section(text: str, rng: random.Random) -> tuple[str, str]:
    headings = list(_HEADING.finditer(text))
    required = _required_headings(text)
    victim = required[int(rng.random() * len(required))]
    following = [m.start() for m in headings if m.start() > victim.start()]
    end = following[0] if following else len(text)
    return (text[: victim.start()] + text[end:]).rstrip() + "\n", victim.group(1).strip()
