"""Proposers: scripted, plain function, replay of a saved trace, OpenAI-compatible endpoint."""

from .base import EndpointFailure, Proposer, ProposerOutput, StatefulProposer
from .scripted import FunctionProposer, ScriptedProposer

__all__ = ["EndpointFailure", "FunctionProposer", "Proposer", "ProposerOutput", "ScriptedProposer", "StatefulProposer"]
