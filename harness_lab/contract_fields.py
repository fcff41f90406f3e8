"""Contract fields that layers below the contract read too, parsed here with nothing of harness_lab.

* ``stop.success`` and ``stop.failure``: :func:`parse_success` and :func:`parse_failure` read the text
  ("all verification checks pass", "same root cause failed twice", "同一根因连续失败两次") or the
  structured forms (``{all_checks_pass: true}``, ``{same_root_cause: 2}``) as an :class:`AllChecksPass`
  and a :class:`SameRootCause`, which the loop uses (:mod:`harness_lab.loop.stop_rules` re-exports them,
  with who counts what);
* ``sandbox.network_allow``: :func:`parse_allowlist` checks ``host:port`` entries into
  :class:`Destination` entries, which the sandbox relays (:mod:`harness_lab.sandbox.netallow` re-exports them).

Bad input is a one-line ValueError naming the entry (the contract file's ConfigError names the field).
They sit beside the contract, below the loop and the sandbox: the contract checks its fields with them
and never imports either.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NAMES_NET", "AllChecksPass", "Destination", "SameRootCause", "parse_allowlist", "parse_failure",
           "parse_success"]


# -- stop.success and stop.failure ----------------------------------------------------------------------
@dataclass(frozen=True)
class SameRootCause:
    """Stop once the same root cause has failed ``times`` attempts in a row."""

    times: int = 2

    def fires(self, causes: Sequence[str]) -> bool:
        """True when the last ``times`` attempts (oldest first) all failed on the same root cause."""
        last = causes[-self.times:]
        return len(last) == self.times and len(set(last)) == 1

    def describe(self) -> str:
        return f"same root cause failed {_count_words(self.times)} in a row"


@dataclass(frozen=True)
class AllChecksPass:
    """Success is every verification check passing (the run reaches REVIEW_READY with a receipt)."""

    def describe(self) -> str:
        return "all verification checks pass"


_WORDS = {"once": 1, "twice": 2, "thrice": 3, "one time": 1, "two times": 2, "three times": 3}
_ZH = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5}
_EN = re.compile(r"same root cause (?:has )?(?:failed|fails|failing|fail) (?P<n>once|twice|thrice|(?:one|two|three) "
                 r"times|\d+ times?)(?: (?:in a row|consecutively))?")
_CN = re.compile(r"同一根因(?:连续)?失败(?P<n>[一两二三四五]|\d+)次")


def parse_failure(value: object) -> SameRootCause:
    """``stop.failure`` as a rule; a ValueError of one line for anything else."""
    if isinstance(value, dict):
        times = _structured(value, "same_root_cause")
    elif isinstance(value, str):
        text = " ".join(value.lower().split()).rstrip(".")
        if (m := _EN.fullmatch(text)) is not None:
            n = m["n"]
            times = _WORDS[n] if n in _WORDS else int(n.split()[0])
        elif (m := _CN.fullmatch(value.strip())) is not None:
            times = _ZH.get(m["n"]) or int(m["n"])
        else:
            raise ValueError(f"cannot read {value!r} as a stop rule; write 'same root cause failed twice' "
                             "(or 'failed N times'), or {same_root_cause: N}")
    else:
        raise ValueError(f"a stop rule is text or {{same_root_cause: N}}, got {type(value).__name__}")
    if times < 1:
        raise ValueError(f"same_root_cause must be at least 1 failure, got {times}")
    return SameRootCause(times=times)


def parse_success(value: object) -> AllChecksPass:
    """``stop.success`` as a rule; a ValueError of one line for anything else."""
    if isinstance(value, dict):
        if set(value) != {"all_checks_pass"} or value["all_checks_pass"] is not True:
            raise ValueError(f"a structured success rule is {{all_checks_pass: true}}, got {value!r}")
        return AllChecksPass()
    if isinstance(value, str):
        text = " ".join(value.lower().split()).rstrip(".")
        if text in ("all verification checks pass", "all checks pass", "所有验证通过"):
            return AllChecksPass()
        raise ValueError(f"cannot read {value!r} as a success rule; write 'all verification checks pass', "
                         "or {all_checks_pass: true}")
    raise ValueError(f"a success rule is text or {{all_checks_pass: true}}, got {type(value).__name__}")


def _structured(value: dict[Any, Any], key: str) -> int:
    if set(value) != {key}:
        raise ValueError(f"a structured stop rule is {{{key}: N}}, got the keys {sorted(map(str, value))}")
    times = value[key]
    if type(times) is not int:  # a bool is no count (True would read as 1)
        raise ValueError(f"{key} must be a whole number of failures, got {times!r}")
    return times


def _count_words(times: int) -> str:
    return {1: "once", 2: "twice"}.get(times, f"{times} times")


# -- sandbox.network_allow ------------------------------------------------------------------------------
_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
NAMES_NET = "127.77.0."  # loopback addresses handed to host names inside the namespace
_MAX_NAMES = 64  # their /etc/hosts lines must fit in one pipe buffer (bwrap reads it from a pipe)


@dataclass(frozen=True)
class Destination:
    """One allowlist entry: ``host``, ``port`` and the IPv4 address the command finds it at (``listen``)."""

    host: str
    port: int
    listen: str

    @property
    def entry(self) -> str:
        return f"{self.host}:{self.port}"


def _check_entry(entry: object) -> tuple[str, int, bool]:
    """(host, port, is_ip) of one entry, or a one-line ValueError naming it."""
    if not isinstance(entry, str):
        raise ValueError(f"network_allow entry {entry!r} must be a 'host:port' string")
    host, sep, port = entry.rpartition(":")
    if not sep or not host:
        raise ValueError(f"network_allow entry {entry!r} must be 'host:port' (e.g. 'example.org:443')")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"network_allow entry {entry!r}: port {port!r} must be a number from 1 to 65535")
    if host.startswith("[") or ":" in host:
        raise ValueError(f"network_allow entry {entry!r}: IPv6 is not supported; name the host or give an IPv4 address")
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        if not _NAME.match(host.lower()) or host.replace(".", "").isdigit():
            raise ValueError(f"network_allow entry {entry!r}: {host!r} is neither an IPv4 address nor a host name") from None
        return host.lower(), int(port), False
    if ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"network_allow entry {entry!r}: {host} cannot be a destination")
    return str(ip), int(port), True


def parse_allowlist(entries: tuple[str, ...] | list[str]) -> tuple[Destination, ...]:
    """Validate ``network_allow`` entries ("host:port") into destinations; a one-line ValueError naming the
    first bad entry. Names get 127.77.0.1, .2, ... in the order they first appear (at most 64 names)."""
    names: dict[str, str] = {}
    out: list[Destination] = []
    seen: dict[tuple[str, int], str] = {}
    for entry in entries:
        host, port, is_ip = _check_entry(entry)
        if is_ip:
            listen = host
        else:
            if host not in names:
                if len(names) >= _MAX_NAMES:
                    raise ValueError(f"network_allow names more than {_MAX_NAMES} host names")
                names[host] = f"{NAMES_NET}{len(names) + 1}"
            listen = names[host]
        if (listen, port) in seen:
            raise ValueError(f"network_allow entry {entry!r} repeats {seen[(listen, port)]!r}")
        seen[(listen, port)] = entry
        out.append(Destination(host, port, listen))
    return tuple(out)
