"""harness-lab runtime."""
