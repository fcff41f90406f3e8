"""The workspace hash: a multiset hash over manifest entries, updatable in time proportional to change.

The hash of a manifest is the sum mod 2**256 of sha256(path, kind, digest, mode) over its entries
(specials excluded). A sum rather than one sha256 over the sorted lines so that the scanner and the
snapshot store can move it from one state to the next by subtracting the lines that went and
adding the lines that came; it is meant to detect change, not to resist a forger.
"""

from __future__ import annotations

import hashlib

__all__ = ["hex_sum", "line_hash", "manifest_hash"]

_MOD = 1 << 256

Entry = tuple[str, str, int]


def line_hash(path: str, entry: Entry) -> int:
    """One entry's term of the sum."""
    kind, digest, mode = entry
    line = f"{path}\0{kind}\0{digest}\0{mode:o}\n".encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.sha256(line).digest(), "big")


def hex_sum(total: int) -> str:
    return f"{total % _MOD:064x}"


def manifest_hash(entries: dict[str, Entry], memo: dict[str, tuple[Entry, int]] | None = None) -> str:
    """Hash of a whole manifest. ``memo`` keeps each path's last term between calls."""
    return hex_sum(manifest_sum(entries, memo))


def manifest_sum(entries: dict[str, Entry], memo: dict[str, tuple[Entry, int]] | None = None) -> int:
    if memo is None:
        return sum(line_hash(p, e) for p, e in entries.items() if e[0] != "s")
    total = 0
    for p, e in entries.items():
        if e[0] == "s":
            continue
        hit = memo.get(p)
        if hit is None or hit[0] != e:
            hit = memo[p] = (e, line_hash(p, e))
        total += hit[1]
    if len(memo) > 2 * len(entries) + 64:  # forget paths that are long gone
        for p in memo.keys() - entries.keys():
            del memo[p]
    return total
