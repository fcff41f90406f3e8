"""Notebook UI for harness-lab (imports the runtime, never the reverse)."""
