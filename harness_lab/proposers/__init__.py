"""Proposers: scripted, plain function, OpenAI-compatible endpoint (the replay of a saved trace is
:mod:`harness_lab.persistence.replay`: it reads a store)."""

from .base import EndpointFailure, Proposer, ProposerOutput, StatefulProposer
from .scripted import FunctionProposer, ScriptedProposer

__all__ = ["EndpointFailure", "FunctionProposer", "Proposer", "ProposerOutput", "ScriptedProposer", "StatefulProposer"]
