"""What outlives a process: resume in the seed's order, fork, heartbeat and the watchdog, the typed
checkpoint read back from a store, the stored context, and whether a process is alive.

Imports nothing itself, so that importing a module of this package never pulls in ``loop``
(``harness_lab`` re-exports the public names).
"""

__all__: list[str] = []  # the public names are re-exported by harness_lab, the facade
