"""Proposers: scripted, plain function, replay of a saved trace, OpenAI-compatible endpoint."""

from .base import Proposer, ProposerOutput, StatefulProposer
from .scripted import FunctionProposer, ScriptedProposer

__all__ = ["FunctionProposer", "Proposer", "ProposerOutput", "ScriptedProposer", "StatefulProposer"]
