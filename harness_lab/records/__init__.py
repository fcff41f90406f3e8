"""The run's vocabulary: the records a step is made of, used by ``loop/``, ``faults/``, ``proposers/``,
``validation/`` and ``persistence/`` alike (so none of them has to import another for it).

Modules: ``actions`` (typed actions, one frozen record per kind; ``flat`` is their fast path for
all-string arguments), ``proposal`` (a raw proposal parsed into an action or a structured error),
``events`` (the frozen trace records a step makes), ``states`` (the run and external-loop state
machines), ``tools`` (the one result shape of a tool call), ``tool_specs`` (the tools a model is sent),
``effect_classes`` (what a resume does with an action in flight), ``redaction`` (secrets masked before
anything is stored or shown), ``verdicts`` and ``receipt`` (what a finish's validation gives, made by
``validation/``, which re-exports them).

``events``' names are not re-exported here (they were kept out while ``events`` imported the persistence
side; its store row is now spelled in ``persistence/row_text.py``). Take them from ``harness_lab.records.events``
(the facade ``harness_lab`` re-exports ``StepRecord`` and ``StopReason``).
"""

from .actions import (
    CONTEXT_KINDS,
    FORBIDDEN_KINDS,
    GATE_CATEGORIES,
    TOOL_KINDS,
    Action,
    ActionBase,
    BeginSubtask,
    DeleteFile,
    Finish,
    FinishSubtask,
    ForbiddenAction,
    GatedAction,
    ListDir,
    ReadEvidence,
    ReadFile,
    ReadRef,
    RunCommand,
    SearchHistory,
    Think,
    WriteFile,
    WriteReport,
)
from .effect_classes import EffectClass, effect_class, effect_of_tool
from .proposal import Proposal, ProposalError, parse_proposal
from .redaction import SECRET_CATEGORIES, Redactor, SecretMask, redact, redactor_for
from .states import LOOP_TRANSITIONS, RUN_TRANSITIONS, TERMINAL_STATES, LoopState, RunState, can_transition
from .tool_specs import TOOL_SCHEMAS, tool_names, tool_signatures
from .tools import ToolResult, ToolStatus

__all__ = [
    "CONTEXT_KINDS", "FORBIDDEN_KINDS", "GATE_CATEGORIES", "LOOP_TRANSITIONS", "RUN_TRANSITIONS",
    "SECRET_CATEGORIES", "TERMINAL_STATES", "TOOL_KINDS", "TOOL_SCHEMAS", "Action", "ActionBase", "BeginSubtask",
    "DeleteFile", "EffectClass", "Finish", "FinishSubtask", "ForbiddenAction", "GatedAction", "ListDir",
    "LoopState", "Proposal", "ProposalError", "ReadEvidence", "ReadFile", "ReadRef", "Redactor", "RunCommand",
    "RunState", "SearchHistory", "SecretMask", "Think", "ToolResult", "ToolStatus", "WriteFile", "WriteReport",
    "can_transition", "effect_class", "effect_of_tool", "parse_proposal", "redact", "redactor_for", "tool_names",
    "tool_signatures",
]
