"""The network allowlist: a command reaches the listed ``host:port`` pairs and nothing else.

``SandboxPolicy.network_allow = ("127.0.0.1:8001", "example.org:443")``. The command keeps its private,
empty network namespace; inside it, :mod:`._netrelay` (run by the wrapper as root, before the uid drop)
listens on each listed pair and hands every accepted connection's socket to the harness over a Unix
socket the harness passed in (SCM_RIGHTS). The harness (:class:`Relay`, threads of this process) connects
to the real destination and copies bytes both ways. Nothing else has a route: an unlisted address or port
is "connection refused" or "network unreachable" inside.

Where the command finds each destination: an IPv4 literal at that same address (an address outside
127.0.0.0/8 is added to the namespace's ``lo``); a host name at a loopback address of its own
(127.77.0.n), through a private, read-only ``/etc/hosts`` that names only ``localhost`` and the listed
names. The harness resolves a name (its own resolver, the host's ``/etc/hosts`` and DNS) when the command
connects; the command itself has no DNS.

Covered: TCP over IPv4, to the listed ports only. Not covered: UDP (DNS included), ICMP, IPv6 (a literal
is refused at validation), TLS names (the relay copies bytes; a TLS client checks the server's
certificate against the name it asked for, which is the listed name). In isolation ``none`` there is no
namespace to hold the relay, so an allowlist is refused there rather than granting the host network.
At most :data:`MAX_CONNECTIONS` connections at once per command; a connection beyond is closed. A listed
destination that refuses or cannot be reached is, inside, a connection accepted and then closed (the
result data's ``network_relay`` names it). Every connection, its relay threads and the control socket end
with the call (:meth:`Relay.stop`). The acceptor listens as root (any port, any listed address); a
non-root harness (bwrap in a user namespace) may lack that for a port below 1024 or an address outside
loopback, and the command then ends with status 125 and one line naming it.

The entries are checked by :func:`parse_allowlist`, which sits beside the contract
(:mod:`harness_lab.contract_fields`: a contract's ``network_allow`` is checked with it, and the contract is
below the sandbox); it and :class:`Destination` are re-exported here.

Cost (``bench/netallow_cost.py``): one more Python start inside the namespace per command, and each
connection crosses two more sockets and a thread of the harness.
"""

from __future__ import annotations

import errno
import functools
import os
import selectors
import socket
import threading
import time
from typing import Any

from ..contract_fields import NAMES_NET as _NAMES_NET
from ..contract_fields import Destination, parse_allowlist

__all__ = ["MAX_CONNECTIONS", "Destination", "Relay", "hosts_text", "parse_allowlist", "relay_source"]

MAX_CONNECTIONS = 32
_CHUNK = 1 << 16


def hosts_text(dests: tuple[Destination, ...]) -> str:
    """The command's private ``/etc/hosts``: the listed names first (a listed "localhost" wins), then localhost."""
    lines = sorted({f"{d.listen} {d.host}" for d in dests if d.listen.startswith(_NAMES_NET)})
    return "\n".join([*lines, "127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback", ""])


@functools.lru_cache(maxsize=1)
def relay_source() -> str:
    """The text of :mod:`._netrelay`, run with ``python -c`` (the package may lie under a hidden /tmp)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_netrelay.py"), encoding="utf-8") as fh:
        return fh.read()


def _take(msg: bytes, fds: list[int], count: int) -> socket.socket | None:
    """The connection an acceptor message hands over, else None with every descriptor closed. The acceptor
    runs as the command's uid, so a message is untrusted: only one TCP socket naming a listed destination."""
    if len(msg) != 1 or len(fds) != 1 or msg[0] >= count:
        for fd in fds:
            os.close(fd)
        return None
    try:
        conn = socket.socket(fileno=fds[0])
    except OSError:  # not a socket
        os.close(fds[0])
        return None
    if conn.family != socket.AF_INET or conn.type != socket.SOCK_STREAM:
        conn.close()
        return None
    return conn


class Relay:
    """The harness's half for one command: a control socket pair (``child_fd`` goes to the wrapper), a thread
    reading it, and two copying threads per connection. ``start()`` after the child is spawned; ``stop()``
    (always, in a ``finally``) closes every socket and joins every thread. ``log`` counts what happened."""

    def __init__(self, dests: tuple[Destination, ...]) -> None:
        self.dests = dests
        self._mine, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._child: socket.socket | None = child
        self.child_fd = child.fileno()
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._open = 0  # connections being relayed
        self._wake_r, self._wake_w = os.pipe()
        self.log: dict[str, Any] = {"connections": 0, "refused_over_limit": 0, "failed": []}

    def start(self) -> None:
        assert self._child is not None
        self._child.close()  # the wrapper holds its copy; EOF on ours then means the namespace is gone
        self._child = None
        self._spawn(self._control)

    def _spawn(self, target: Any, *args: Any) -> threading.Thread | None:
        t = threading.Thread(target=target, args=args, daemon=True, name="harness-lab-netrelay")
        with self._lock:
            if self._stopped:
                return None
            self._threads = [old for old in self._threads if old.is_alive()]
            self._threads.append(t)
            t.start()  # under the lock: a thread not yet started is not alive, and would be pruned
        return t

    def _control(self) -> None:
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self._mine, 16, 4)
            except OSError:
                return
            if not msg and not fds:
                return  # the acceptor died with the namespace
            conn = _take(msg, fds, len(self.dests))
            if conn is None:
                continue
            with self._lock:
                over = self._stopped or self._open >= MAX_CONNECTIONS
                if not over:
                    self._open += 1
                    self._socks.add(conn)
            if over:
                self.log["refused_over_limit"] += 1
                conn.close()
                continue
            self.log["connections"] += 1
            self._spawn(self._connect, conn, self.dests[msg[0]])

    def _connect(self, conn: socket.socket, dest: Destination) -> None:
        upstream = self._dial(dest)
        if upstream is not None:
            back = self._spawn(self._copy, upstream, conn)
            self._copy(conn, upstream)
            if back is not None:
                back.join()
            self._drop(upstream)
        self._drop(conn)
        with self._lock:
            self._open -= 1

    def _dial(self, dest: Destination) -> socket.socket | None:
        """A connected socket to ``dest``, or None (logged); gives up at once when the relay stops."""
        try:
            infos = socket.getaddrinfo(dest.host, dest.port, socket.AF_INET, socket.SOCK_STREAM)
        except OSError as exc:
            self._failed(f"{dest.entry}: {exc.strerror or exc}")
            return None
        why = "no address"
        for family, kind, proto, _name, addr in infos:
            s = socket.socket(family, kind, proto)
            with self._lock:
                if self._stopped:
                    s.close()
                    return None
                self._socks.add(s)
            s.setblocking(False)
            code = s.connect_ex(addr)
            if code == errno.EINPROGRESS:
                with selectors.DefaultSelector() as sel:
                    sel.register(s, selectors.EVENT_WRITE)
                    sel.register(self._wake_r, selectors.EVENT_READ)
                    sel.select()
                code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if not self._stopped else errno.ECANCELED
            if code == 0:
                s.setblocking(True)
                return s
            why = os.strerror(code)
            self._drop(s)
        self._failed(f"{dest.entry}: {why}")
        return None

    def _failed(self, what: str) -> None:
        if len(self.log["failed"]) < 20:  # the result data stays small whatever the command tries
            self.log["failed"].append(what)

    def _copy(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)  # pass the half-close on: the other direction may still flow
        except OSError:
            pass

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.discard(s)
        s.close()

    def stop(self, grace: float = 5.0) -> None:
        """Close every socket and join every thread (``grace`` seconds in all; daemon threads either way)."""
        with self._lock:
            self._stopped = True
            socks, self._socks = list(self._socks), set()
            threads = list(self._threads)
        os.write(self._wake_w, b"x")  # wakes a connect in progress
        for s in [self._mine, *socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)  # unblocks a recv in another thread; close() alone does not
            except OSError:
                pass
        end = time.monotonic() + grace
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
        for s in [self._mine, *socks]:
            s.close()
        if self._child is not None:
            self._child.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
