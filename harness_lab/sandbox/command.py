"""``run_command``: one child process under a network namespace, rlimits, a timeout and an output cap.

Mechanisms, strongest available first (probed once per process, reported in ``capabilities`` and in
every result's ``data["isolation"]``):

* **bwrap** (bubblewrap): new network, pid and IPC namespaces, a read-only view of ``/``, the
  workspace bound read-write (read-only in read-only mode), ``--die-with-parent``.
* **unshare** (util-linux): new network, pid, IPC and mount namespaces (``--mount-proc --fork
  --kill-child``: ``/proc`` shows only the command's processes); the rest of ``/`` stays the
  host's, guarded only by the uid drop below.
* **none**: no namespace; the network is *not* isolated and the result data says so.

Network allowlist (``allow``, from ``SandboxPolicy.network_allow``): the namespace stays private and
empty but for the listed TCP ``host:port`` pairs, which :mod:`._netrelay` (run by the wrapper as root,
before the uid drop) listens on inside and the harness relays to (:mod:`.netallow`); refused with none.

Both wrappers give the command private, empty ``/tmp``, ``/var/tmp`` and ``/dev/shm`` and, while the host
network is off (also with an allowlist), an empty ``/run``: a network namespace does not cover Unix
sockets, reached by path, and these directories are where other users and services keep theirs (and
their files). The workspace is bound back at its own path, also when it lies under one of them. Mount propagation is private.
Each of these tmpfs holds at most ``quotas.scratch_bytes`` (its pages are memory that RLIMIT_AS
does not count; bubblewrap < 0.7 cannot size one, and ``missing`` then says so). Unix sockets
elsewhere on the host file system stay reachable by path.

Process limit: RLIMIT_NPROC is ignored for root, so a root parent drops the child to an unprivileged
uid (``setpriv`` from util-linux after the namespaces are made, ``--no-new-privs`` so setuid binaries
cannot regain root) with RLIMIT_NPROC set in ``preexec``. The uid is derived from the workspace path
(``1_900_000_000 + h % 2**20``) rather than ``nobody``: RLIMIT_NPROC counts every process of a uid,
so sharing one uid between sandboxes would let one sandbox's fork bomb starve another. The
workspace must be writable by that uid, so the walk of the snapshot before each command hands the
tree to it (directories and single-link regular files only, never through symlinks; see
:mod:`harness_lab.sandbox.scan`), and files the sandbox writes or restores get that owner too.
A non-root parent cannot drop uid; it sets RLIMIT_NPROC to its own current process count plus the
quota and says the limit is per-user.

The command ends when its main process exits (closing the output is not the end) or at the
deadline. Every child starts a new session; the wrapper's children are killed first, then the whole
process group gets SIGKILL, and with a pid namespace the kernel kills everything left in it when
its init dies, so nothing outlives the call. The wrapper gets SIGKILL when this process dies (the
parent-death signal, kept across the uid drop), so a killed harness leaves no command running
without a deadline. Without a pid namespace the wrapper is :mod:`._reaper`, a child subreaper that
kills everything beneath it (setsid() or not) when the command ends or the harness dies. The environment
is rebuilt from scratch (PATH, HOME, TMPDIR, LANG): no variable of the parent, hence no secret,
reaches the child. Without a pid namespace the harness itself is visible to the command (as the same
user when not root), so the sandbox makes it non-dumpable (:func:`hide_harness_process`): its
``/proc/<pid>/environ`` and memory are then root's.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness_lab.errors import SandboxEnvironmentError
from harness_lab.records.tools import ToolResult
from harness_lab.sandbox.netallow import Destination, Relay, hosts_text, relay_source
from harness_lab.sandbox.policy import Quotas
from harness_lab.sandbox.process import collect

__all__ = ["Isolation", "check_isolation", "check_network_allow", "clamped_limits", "detect_isolation",
           "hide_harness_process", "run_command", "sandbox_uid"]

Isolation = dict[str, Any]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_DROP_PY = (  # used only when setpriv is missing: drop uid inside the namespaces, then exec
    "import ctypes,os,sys;u,g=int(sys.argv[1]),int(sys.argv[2]);"
    "c=ctypes.CDLL(None);s=ctypes.c_int(0);c.prctl(2,ctypes.byref(s),0,0,0);"  # PR_GET_PDEATHSIG
    "c.prctl(38,1,0,0,0);os.setgroups([]);os.setresgid(g,g,g);os.setresuid(u,u,u);"
    "c.prctl(1,s.value,0,0,0);"  # the uid change cleared the parent-death signal: set it again
    "os.execvp(sys.argv[3],sys.argv[3:])"
)


# Run as root inside the new mount namespace, before the uid drop: cover the hidden directories with
# empty tmpfs and bind the workspace back at its own path, through a descriptor taken before the
# cover (the path may lie under /tmp). Propagation is private, so none of it reaches the host. Any
# failure ends the command (status 125) rather than running it with the host's directories.
_MOUNT_PY = (
    "import ctypes,os,sys\n"
    "ws,hidden,size,argv=sys.argv[1],[d for d in sys.argv[2].split(',') if d],int(sys.argv[3]),sys.argv[4:]\n"
    "libc=ctypes.CDLL(None,use_errno=True)\n"
    "def mount(src,dst,fs,flags,opts):\n"
    " if libc.mount(src.encode(),dst.encode(),fs and fs.encode(),ctypes.c_ulong(flags),opts and opts.encode()):\n"
    "  sys.stderr.write('sandbox setup failed: mount %s: %s\\n'%(dst,os.strerror(ctypes.get_errno())));os._exit(125)\n"
    "mount('none','/',None,0x40000|0x4000,None)\n"  # MS_PRIVATE|MS_REC
    "os.umask(0o022);fd=os.open(ws,os.O_PATH|os.O_DIRECTORY|os.O_NOFOLLOW)\n"
    "for d in hidden: mount('tmpfs',d,'tmpfs',2|4,'size=%d,mode=%s'%(size,'0755' if d=='/run' else '1777'))\n"  # NOSUID|NODEV
    "os.makedirs(ws,0o755,exist_ok=True)\n"
    "mount('/proc/self/fd/%d'%fd,ws,None,0x1000|0x4000,None);os.close(fd);os.chdir(ws)\n"  # MS_BIND|MS_REC
    # Not exec: util-linux 2.38's unshare answers a child killed by a signal (SIGXCPU at the CPU limit)
    # with exit 1 and 'sigprocmask unblock failed'; this waiter turns the signal into the shell's 128+n.
    "pid=os.fork()\n"
    "if pid==0:\n"
    " try: os.execvp(argv[0],argv)\n"
    " except OSError as e: sys.stderr.write('%s: %s\\n'%(argv[0],e.strerror));os._exit(127)\n"
    "while True:\n"
    " try: _,st=os.waitpid(pid,0);break\n"
    " except InterruptedError: continue\n"
    "os._exit(128+os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))\n"
)
_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_SIGNALS = {int(s): s.name for s in signal.Signals}  # not every number below NSIG names one (32, 33)


def sandbox_uid(real_root: str) -> int:
    """The unprivileged uid a root parent runs this workspace's commands as."""
    h = int(hashlib.sha256(real_root.encode("utf-8", "surrogateescape")).hexdigest()[:8], 16)
    return 1_900_000_000 + h % (1 << 20)


def _probe(argv: list[str]) -> bool:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10, env={"PATH": _PATH})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.lru_cache(maxsize=8)  # the machine does not change during a process; probing costs ~10 ms
def detect_isolation(choice: str, euid: int) -> tuple[tuple[str, Any], ...]:
    """Which wrapper works here: returns sorted (key, value) pairs (hashable, for the cache).
    ``choice`` is a policy's ``isolation``; "required" probes as "auto" does (:func:`check_isolation` refuses)."""
    if choice == "required":
        choice = "auto"
    bwrap, unshare, setpriv = shutil.which("bwrap"), shutil.which("unshare"), shutil.which("setpriv")
    missing: list[str] = []
    kind = "none"
    sized = False  # whether each private scratch tmpfs gets quotas.scratch_bytes as its size
    if choice in ("auto", "bwrap") and bwrap:
        if _probe([bwrap, "--unshare-net", "--unshare-pid", "--die-with-parent", "--ro-bind", "/", "/",
                   "--dev", "/dev", "--proc", "/proc", "true"]):
            kind = "bwrap"
            sized = _probe([bwrap, "--ro-bind", "/", "/", "--size", "1048576", "--tmpfs", "/tmp", "true"])
            if not sized:
                missing.append("bubblewrap < 0.7 cannot size a tmpfs: the private /tmp, /var/tmp and "
                               "/dev/shm are bounded only by memory, not by quotas.scratch_bytes")
        else:
            missing.append("bubblewrap is installed but cannot create namespaces here")
    elif choice in ("auto", "bwrap"):
        missing.append("bubblewrap not installed (apt-get install bubblewrap)")
    if kind == "none" and choice in ("auto", "unshare"):
        if unshare and _probe([unshare, "--net", "--pid", "--ipc", "--mount-proc", "--fork", "--kill-child", "true"]):
            kind, sized = "unshare", True
        else:
            missing.append("unshare cannot create network/pid/IPC/mount namespaces (needs root or user namespaces)")
    if kind == "none":
        missing.append("no network namespace: commands share the host network")
        missing.append("no pid namespace: commands see (and, as the same uid, can signal) host processes")
    if euid != 0:
        missing.append("not root: cannot drop to a dedicated uid; RLIMIT_NPROC counts all of this user's processes")
    info: dict[str, Any] = {
        "kind": kind, "bwrap": bwrap, "unshare": unshare, "setpriv": setpriv,
        "missing": tuple(missing), "root": euid == 0, "scratch_sized": sized,
    }
    return tuple(sorted(info.items()))


def check_isolation(choice: str, euid: int) -> Isolation:
    """The wrapper commands get under ``choice`` (``SandboxPolicy.isolation``); a
    :class:`~harness_lab.errors.SandboxEnvironmentError` in one line naming what is missing when the choice
    is a named wrapper, or "required", and it does not work here."""
    iso = dict(detect_isolation(choice, euid))
    wanted = ("bwrap", "unshare") if choice == "required" else (choice,)
    if choice != "auto" and iso["kind"] not in wanted:
        why = "; ".join(m for m in iso["missing"] if not m.startswith("not root"))
        asked = "a namespace (bwrap or unshare)" if choice == "required" else repr(choice)
        raise SandboxEnvironmentError(f"isolation {choice!r} asks for {asked}, unavailable here: {why}")
    return iso


def check_network_allow(entries: Sequence[str], iso: Isolation) -> None:
    """A :class:`~harness_lab.errors.SandboxEnvironmentError` (one line) when ``entries`` (a network allowlist)
    cannot be enforced under ``iso``: without a namespace it would be the host network, so it is refused."""
    if entries and iso["kind"] == "none":
        why = "; ".join(m for m in iso["missing"] if not m.startswith("not root"))
        raise SandboxEnvironmentError(f"network_allow {list(entries)} needs a network namespace (isolation bwrap "
                                      f"or unshare), unavailable here: {why}")


def hide_harness_process() -> bool:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), once a sandbox may run commands
    without a pid namespace: its ``/proc/<pid>/environ``, ``mem``, ``maps``, ``fd`` become root's, so a
    command running as the same user (a non-root harness has no other uid to drop to) cannot read the
    harness's environment (an API key) or memory. The cost, for the rest of this process: no core dumps,
    and no ptrace by its own user (gdb, py-spy, strace -p need root). The process itself still reads its
    own /proc entries. Processes of the same user other than this one (the shell that exported the key)
    stay readable; only a pid namespace hides those. False where prctl is unavailable."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


@functools.lru_cache(maxsize=4)
def _keep_pdeathsig(setpriv: str) -> tuple[str, ...]:
    """``--pdeathsig keep`` where setpriv has it (util-linux >= 2.33): changing uid clears the
    parent-death signal, which ties the command to the harness (see _limits)."""
    return ("--pdeathsig", "keep") if _probe([setpriv, "--pdeathsig", "keep", "true"]) else ()


def _own_process_count(uid: int) -> int:
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _hidden(network: bool) -> list[str]:
    """The host directories a command gets a private, empty tmpfs over (those that exist here)."""
    dirs = _SCRATCH if network else (*_SCRATCH, "/run")
    return [d for d in dirs if os.path.isdir(d)]


def _parents_in(ws: str, hidden: Sequence[str]) -> list[str]:
    """The directories between a hidden one and ``ws`` (ws under /tmp is common): they must exist,
    traversable, in the new tmpfs for the workspace to be reachable at its own path."""
    for top in hidden:
        if ws.startswith(top + "/"):
            names = ws[len(top) + 1:].split("/")[:-1]
            return [top + "/" + "/".join(names[:i + 1]) for i in range(len(names))]
    return []


@functools.lru_cache(maxsize=1)
def _namespace_python() -> str:
    """An interpreter the command's namespace still sees, for the scripts that run in it after the scratch
    directories are covered: a virtual environment's python may lie under /tmp (a clone there), so it is
    resolved to the interpreter it links to; those scripts run with -I (-S) and need only its standard library."""
    covered = tuple(f"{d}/" for d in _hidden(True) + _hidden(False))
    for candidate in (os.path.realpath(sys.executable), shutil.which("python3"), "/usr/bin/python3"):
        if candidate and not os.path.realpath(candidate).startswith(covered) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return os.path.realpath(sys.executable)


def _wrap(argv: Sequence[str], ws: str, iso: Isolation, network: bool, read_only: bool,
          uid: int | None, scratch: int, relay: tuple[int, int, tuple[Destination, ...]] | None = None) -> list[str]:
    """``relay``: (control fd, /etc/hosts pipe fd, destinations) of a network allowlist (see :mod:`.netallow`)."""
    inner = list(argv)
    if uid is not None:
        if iso["setpriv"]:
            inner = [iso["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *_keep_pdeathsig(iso["setpriv"]),
                     "--", *inner]
        else:
            inner = [_namespace_python(), "-I", "-c", _DROP_PY, str(uid), str(uid), *inner]
    hosts: list[str] = []
    if relay is not None:  # runs as root inside the namespaces, before the uid drop (its docstring says why)
        ctl, hosts_fd, dests = relay
        hosts = ["--perms", "0644", "--ro-bind-data", str(hosts_fd), "/etc/hosts"]
        inner = [_namespace_python(), "-I", "-S", "-c", relay_source(), str(ctl), "-" if uid is None else str(uid),
                 "-" if iso["kind"] == "bwrap" else hosts_text(dests),
                 ",".join(f"{d.listen}:{d.port}" for d in dests), "--", *inner]
    # A network namespace does not cover Unix sockets (reached by path, and a read-only bind does
    # not stop connect()): the shared scratch directories, and /run without network, are private.
    hidden = _hidden(network)
    if iso["kind"] == "bwrap":
        size = ["--size", str(scratch)] if iso["scratch_sized"] else []
        cover = [arg for d in hidden
                 for arg in ("--perms", "0755" if d == "/run" else "1777", *size, "--tmpfs", d)]
        parents = [arg for d in _parents_in(ws, hidden) for arg in ("--perms", "0755", "--dir", d)]
        net = [] if network else ["--unshare-net"]
        bind = "--ro-bind" if read_only else "--bind"
        return [iso["bwrap"], "--unshare-pid", "--unshare-ipc", "--die-with-parent",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *net, *cover, *parents, *hosts,
                bind, ws, ws, "--chdir", ws, "--", *inner]
    if iso["kind"] == "unshare":
        net = [] if network else ["--net"]
        # --mount-proc: a proc of the new pid namespace; the host's would show every host process
        # and its command line (world-readable), secrets passed as flags included.
        return [iso["unshare"], *net, "--pid", "--ipc", "--mount-proc", "--fork", "--kill-child",
                "--propagation", "private", "--", sys.executable, "-I", "-S", "-c", _MOUNT_PY, ws,
                ",".join(hidden), str(scratch), *inner]
    return [sys.executable, "-I", "-S", _REAPER, str(os.getpid()), *inner]  # no pid namespace: see _reaper.py


@functools.lru_cache(maxsize=1)  # loaded in the parent: the child between fork and exec only calls it
def _prctl() -> Callable[..., int] | None:
    try:
        fn: Callable[..., int] = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    return fn


def clamped_limits(q: Quotas, nproc: int) -> tuple[dict[str, tuple[int, int]], dict[str, dict[str, int]]]:
    """The (soft, hard) rlimits a command gets, and those clamped: a quota above this process's own hard
    limit (``ulimit -Hn 64``; raising it needs CAP_SYS_RESOURCE) cannot be set in the child, so the child
    gets the hard limit instead, and the result data names each such limit (quota and hard limit)."""
    wanted = {"RLIMIT_CPU": (q.cpu_seconds, q.cpu_seconds + 1), "RLIMIT_AS": (q.memory_bytes, q.memory_bytes),
              "RLIMIT_FSIZE": (q.file_size_bytes, q.file_size_bytes), "RLIMIT_NOFILE": (q.open_files, q.open_files),
              "RLIMIT_NPROC": (nproc, nproc), "RLIMIT_CORE": (0, 0)}
    got: dict[str, tuple[int, int]] = {}
    clamped: dict[str, dict[str, int]] = {}
    privileged = os.geteuid() == 0 and _has_sys_resource()
    for name, (soft, hard) in wanted.items():
        own = resource.getrlimit(getattr(resource, name))[1]
        if not privileged and own != resource.RLIM_INFINITY and hard > own:
            clamped[name] = {"quota": soft, "hard_limit": own}
            soft, hard = min(soft, own), own
        got[name] = (soft, hard)
    return got, clamped


@functools.lru_cache(maxsize=1)
def _has_sys_resource() -> bool:
    """Whether this process may raise a hard limit (CAP_SYS_RESOURCE, bit 24 of its effective set)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            eff = next(line.split()[1] for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration, IndexError):
        return False
    return bool(int(eff, 16) >> 24 & 1)


def _limits(limits: dict[str, tuple[int, int]]) -> Callable[[], None]:
    prctl, parent = _prctl(), os.getpid()
    # resolved here, in the parent: between fork and exec only setrlimit calls
    table = [(getattr(resource, name), value) for name, value in limits.items()]

    def apply() -> None:  # runs in the child between fork and exec: only async-signal-safe work
        # The deadline lives in this process: if it is killed, the wrapper (and with it, through
        # --kill-child or the pid namespace, the command) must die too, as bwrap's
        # --die-with-parent does, instead of running on with no timeout.
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # died before the prctl took effect
                os._exit(1)
        for which, value in table:
            resource.setrlimit(which, value)

    return apply


def run_command(argv: Sequence[str], *, ws: str, timeout: float, quotas: Quotas, iso: Isolation,
                network: bool, read_only: bool, uid: int | None, allow: tuple[Destination, ...] = ()) -> ToolResult:
    """Run ``argv`` in ``ws``; never raises for anything the command does. ``network`` gives the host's
    network; ``allow`` (with ``network`` False) only the listed TCP destinations (:mod:`.netallow`)."""
    tool = "run_command"
    if allow and (network or iso["kind"] == "none"):
        return ToolResult.failure(tool, "a network allowlist needs a network namespace (isolation bwrap or "
                                  "unshare) and the host network off", "install bubblewrap", status="denied")
    env = {"PATH": _PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
           "HOME": "/tmp" if iso["kind"] == "bwrap" else ws, "TMPDIR": "/tmp"}
    nproc = quotas.max_processes if uid is not None else _own_process_count(os.getuid()) + quotas.max_processes
    data: dict[str, Any] = {
        "argv": list(argv), "timeout": timeout, "isolation": iso["kind"],
        "network": ("host" if network or iso["kind"] == "none" else
                    "allowlist (private namespace; TCP to the listed host:port only)" if allow
                    else "none (private namespace)"),
        "network_allow": [d.entry for d in allow],
        "uid": uid if uid is not None else os.getuid(),
        "process_limit": (f"RLIMIT_NPROC={nproc} for dedicated uid {uid}" if uid is not None
                          else f"RLIMIT_NPROC={nproc} per user (approximate: not root)"),
        "missing": list(iso["missing"]),
    }
    limits, clamped = clamped_limits(quotas, nproc)
    if clamped:  # the harness's own hard limits are lower than the quotas: the command gets those
        data["rlimits_clamped"] = clamped
    relay = Relay(allow) if allow else None
    pass_fds: tuple[int, ...] = ()
    try:
        if relay is not None:
            pass_fds = (relay.child_fd,)
            if iso["kind"] == "bwrap":  # bwrap reads the private /etc/hosts from a pipe (a few KiB: fits in it)
                hosts_r, hosts_w = os.pipe()
                os.write(hosts_w, hosts_text(allow).encode())
                os.close(hosts_w)
                pass_fds = (relay.child_fd, hosts_r)
        full = _wrap(argv, ws, iso, network, read_only, uid, quotas.scratch_bytes,
                     None if relay is None else (relay.child_fd, pass_fds[-1], allow))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, cwd=ws, env=env, start_new_session=True,
                                    preexec_fn=_limits(limits), close_fds=True, pass_fds=pass_fds)
        except (OSError, subprocess.SubprocessError) as exc:
            return ToolResult.failure(tool, f"could not start {argv[0]!r}: {exc.__class__.__name__}",
                                      "check the program name; commands run with a minimal PATH")
        finally:
            for fd in pass_fds[1:]:
                os.close(fd)
        if relay is not None:
            relay.start()
        out, why = collect(proc, started + timeout, quotas.output_bytes)
    finally:
        if relay is not None:  # every relayed connection, thread and socket ends with the call
            relay.stop()
            data["network_relay"] = relay.log
    elapsed = time.monotonic() - started
    text = out.decode("utf-8", errors="replace")
    rc = proc.returncode
    data.update(elapsed=round(elapsed, 3), output_bytes=len(out))
    exit_status = rc if rc is None or rc >= 0 else 128 - rc
    if rc is not None and rc < 0:
        data["signal"] = signal.Signals(-rc).name
    elif iso["kind"] != "none" and rc is not None and rc - 128 in _SIGNALS:
        # a namespace's init (unshare's waiter, bwrap's pid 1) reports its child's signal as 128+n
        data["signal"] = _SIGNALS[rc - 128]
    if why == "timeout":
        return ToolResult(status="timeout", tool=tool, content=text, data=data, retryable=True,
                          reason=f"command ran past its {timeout:g}s timeout; its process group was killed",
                          hint="make it faster, or ask for a tool type with a longer timeout",
                          exit_status=exit_status)
    if why == "output":
        data["truncated"] = True
        return ToolResult(status="error", tool=tool, content=text, data=data, retryable=False,
                          reason=f"output exceeded {quotas.output_bytes} bytes; the command was killed",
                          hint="redirect output to a file or filter it (e.g. '| tail -n 50')",
                          exit_status=exit_status)
    if rc != 0:
        return ToolResult(status="error", tool=tool, content=text, data=data, retryable=False,
                          reason=f"command exited with status {exit_status}",
                          hint="read the output; limits: " + data["process_limit"], exit_status=exit_status)
    return ToolResult(status="ok", tool=tool, content=text, data=data, exit_status=0)
