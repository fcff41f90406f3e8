"""Shipped lab data: contracts, scenarios, evidence notes (test material), report samples."""
