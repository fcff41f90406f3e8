"""The in-namespace half of the network allowlist, as a script (see :mod:`harness_lab.sandbox.netallow`).

Run as ``python -I -S -c SOURCE CTL_FD UID HOSTS LISTEN -- ARGV...`` inside the command's namespaces, as
root, before the uid drop. ``CTL_FD`` is a Unix socket whose other end the harness holds; ``UID`` the uid
the acceptor drops to ("-": none); ``HOSTS`` the text of a private ``/etc/hosts`` to mount ("-": none, the
wrapper mounted it); ``LISTEN`` a comma list of ``ip:port`` to listen on, the n-th naming destination n.

It brings ``lo`` up (unshare's new namespace has it down), gives ``lo`` any listed IPv4 address outside
127.0.0.0/8, binds one listening TCP socket per entry, then forks an acceptor (reparented at once to the
namespace's init, so the command cannot wait for it) and execs ARGV. The acceptor only accepts: each
connection's socket goes to the harness over ``CTL_FD`` (one byte naming the destination, the descriptor
as SCM_RIGHTS); the harness connects to the real destination and relays the bytes. The command never
holds ``CTL_FD`` nor the listening sockets. The namespace dies with the command, and the acceptor with it.
Any setup failure ends the command with status 125 and one line on stderr.

Standard library only (``-I -S``): it runs before the uid drop, outside the harness's imports.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _SIOCSIFADDR = 0x8913, 0x8914, 0x8916
_IFF_UP, _IFF_RUNNING = 0x1, 0x40


def _fail(what: str, exc: OSError) -> None:
    sys.stderr.write(f"sandbox network setup failed: {what}: {exc.strerror}\n")
    os._exit(125)


def _setup_lo(addresses: list[str]) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP | _IFF_RUNNING))
    except OSError as exc:
        _fail("bring lo up", exc)
    for n, ip in enumerate(a for a in addresses if not a.startswith("127.")):
        ifr = struct.pack("16sH2s4s8s", f"lo:{n + 1}".encode(), socket.AF_INET, b"\0\0", socket.inet_aton(ip), b"\0" * 8)
        try:
            fcntl.ioctl(s, _SIOCSIFADDR, ifr)
        except OSError as exc:
            _fail(f"add {ip} to lo", exc)
    s.close()


def _mount_hosts(text: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    path = "/run/harness-lab-hosts"  # /run is the command's private tmpfs (root's, 0755)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
    except OSError as exc:
        _fail(path, exc)
    for flags in (0x1000, 0x1000 | 0x20 | 0x1):  # MS_BIND, then MS_BIND|MS_REMOUNT|MS_RDONLY
        if libc.mount(path.encode(), b"/etc/hosts", None, ctypes.c_ulong(flags), None):
            _fail("mount /etc/hosts", OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno())))


def _drop(uid: int) -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the command, the same uid, cannot ptrace the acceptor


def _accept_loop(ctl: socket.socket, listeners: list[socket.socket]) -> None:
    import selectors

    sel = selectors.DefaultSelector()
    for n, lst in enumerate(listeners):
        sel.register(lst, selectors.EVENT_READ, n)
    while True:
        for key, _ in sel.select():
            try:
                conn, _addr = key.fileobj.accept()  # type: ignore[union-attr]
            except OSError:
                continue
            try:
                socket.send_fds(ctl, [bytes([key.data])], [conn.fileno()])
            except OSError:
                os._exit(0)  # the harness is gone: nothing more can be relayed
            finally:
                conn.close()


def main(argv: list[str]) -> None:
    ctl_fd, uid, hosts, listen = int(argv[0]), argv[1], argv[2], argv[3]
    command = argv[5:]
    pairs = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in listen.split(",") if a]
    _setup_lo([ip for ip, _ in pairs])
    if hosts != "-":
        _mount_hosts(hosts)
    listeners = []
    for ip, port in pairs:
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            lst.bind((ip, port))
            lst.listen(64)
        except OSError as exc:
            _fail(f"listen on {ip}:{port}", exc)
        listeners.append(lst)
    ctl = socket.socket(fileno=ctl_fd)
    pid = os.fork()
    if pid == 0:
        if os.fork():
            os._exit(0)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):  # the command's output pipe must close when the command ends
            os.dup2(null, fd)
        if uid != "-":
            _drop(int(uid))
        try:
            _accept_loop(ctl, listeners)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    for lst in listeners:
        lst.close()
    ctl.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"{command[0]}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
