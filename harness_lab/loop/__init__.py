"""The run loop: the single-steppable ``Run`` (propose -> gate -> execute -> observe -> validate), its
private bookkeeping, crash and Ctrl-C handling and restorable state, the human gate and the finish check,
approval, repair, triggers, stop rules and the external loop.

Imports nothing itself, so that importing a module of this package never pulls in ``persistence``
(``harness_lab`` re-exports the public names).
"""

__all__: list[str] = []  # the public names are re-exported by harness_lab, the facade
