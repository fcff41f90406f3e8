"""Checkpoint stores: embedded SQLite (default) and an in-memory double."""

__all__: list[str] = []
