"""The network allowlist (issue 18): only the listed ``host:port`` pairs are reachable from a command.

Real sockets, no network: TCP servers on the host's 127.0.0.1 (random ports), one listed and one not; a
command (``python3 -c``) inside the sandbox talks to them. Each test runs in both wrappers; isolation
``none`` refuses an allowlist. After every call nothing of the relay is left: no thread, no descriptor,
no process of the sandbox uid.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sbhelpers import PY, assert_no_process_left, guarded, hide_wrappers

from harness_lab import Run, cli
from harness_lab.cli import main
from harness_lab.contract import ControlContract, load_contract
from harness_lab.errors import ConfigError, SandboxEnvironmentError
from harness_lab.evidence import EvidenceCatalogue
from harness_lab.paths import data_dir
from harness_lab.proposers import ScriptedProposer
from harness_lab.sandbox import Sandbox, SandboxPolicy
from harness_lab.sandbox.netallow import MAX_CONNECTIONS, Relay, parse_allowlist
from harness_lab.store import SQLiteStore

# Connects to each host:port argument, sends "ping", prints the reply or the error number.
PROBE = ("import socket,sys\nfor arg in sys.argv[1:]:\n    host, port = arg.rsplit(':', 1)\n    try:\n"
         "        c = socket.create_connection((host, int(port)), timeout=3); c.sendall(b'ping')\n"
         "        print(arg, c.recv(100).decode())\n"
         "    except OSError as e:\n        print(arg, 'failed', e.errno)\n")


class Server:
    """A TCP server on ``host``:random port answering each connection's first bytes with ``pong:<name>``
    (or, ``silent``, accepting and never answering). ``accepted`` counts the connections it saw."""

    def __init__(self, name: str, host: str = "127.0.0.1", silent: bool = False) -> None:
        self.name, self.silent, self.accepted, self.served = name, silent, 0, 0
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            if self.silent:
                self.held.append(conn)
                continue
            with conn:
                data = conn.recv(100)
                conn.sendall(b"pong:" + self.name.encode() + b":" + data)
            self.served += 1

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(5)
        for c in self.held:
            c.close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    allowed, other = Server("allowed"), Server("other")
    yield allowed, other
    allowed.close()
    other.close()


def _relay_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "harness-lab-netrelay"]


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _quiet(sb: Sandbox) -> set[str]:
    """This process's descriptors once the sandbox has run a command (its first call opens its own)."""
    assert sb.call("run_command", argv=["true"]).ok
    return _fds()


def _assert_nothing_left(sb: Sandbox, fds_before: set[str], *servers: Server) -> None:
    assert _relay_threads() == []
    deadline = time.monotonic() + 2.0  # a server closes its end of a connection after it answered
    while any(s.served < s.accepted and not s.silent for s in servers) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _fds() <= fds_before, "a descriptor of the relay outlived the call"
    assert_no_process_left(sb.capabilities["uid_drop"], 2.0)  # the kernel tears the namespace down after the call


def _lines(result: Any) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in (result.content or "").splitlines()}


@pytest.mark.parametrize("entry, why", [
    ("example.org", "must be 'host:port'"),
    (":443", "must be 'host:port'"),
    ("example.org:0", "port '0' must be a number from 1 to 65535"),
    ("example.org:65536", "must be a number from 1 to 65535"),
    ("example.org:https", "port 'https'"),
    ("[::1]:80", "IPv6 is not supported"),
    ("::1:80", "IPv6 is not supported"),
    ("exa mple.org:80", "neither an IPv4 address nor a host name"),
    ("999.1.1.1:80", "neither an IPv4 address nor a host name"),
    ("0.0.0.0:80", "cannot be a destination"),
])
def test_a_bad_entry_is_one_line_naming_it(entry: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_allowlist((entry,))
    assert why in str(info.value) and repr(entry) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="network_allow"):
        SandboxPolicy(network_allow=(entry,))


def test_names_get_loopback_addresses_of_their_own_and_a_repeat_is_refused() -> None:
    dests = parse_allowlist(("Example.org:443", "127.0.0.1:8001", "example.org:80", "api.test:443", "10.1.2.3:80"))
    assert [(d.entry, d.listen) for d in dests] == [
        ("example.org:443", "127.77.0.1"), ("127.0.0.1:8001", "127.0.0.1"), ("example.org:80", "127.77.0.1"),
        ("api.test:443", "127.77.0.2"), ("10.1.2.3:80", "10.1.2.3")]
    with pytest.raises(ValueError, match="'EXAMPLE.org:443' repeats 'example.org:443'"):
        parse_allowlist(("example.org:443", "EXAMPLE.org:443"))


def test_only_the_listed_destination_is_reachable(ws: Path, make_sandbox: Any, iso: str,
                                                  servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"127.0.0.1:{allowed.port}",))
    assert sb.capabilities["network_namespace"] is True
    fds = _quiet(sb)
    result = guarded(lambda: sb.call("run_command", timeout=20, argv=[
        PY, "-c", PROBE, f"127.0.0.1:{allowed.port}", f"127.0.0.1:{other.port}", f"127.0.0.2:{allowed.port}",
        f"10.0.0.1:{allowed.port}"]))
    assert result.ok, result
    got = _lines(result)
    assert got[f"127.0.0.1:{allowed.port}"] == "pong:allowed:ping"
    assert got[f"127.0.0.1:{other.port}"] == "failed 111"  # ECONNREFUSED: nothing listens there
    assert got[f"127.0.0.2:{allowed.port}"] == "failed 111"  # the listed address only
    assert got[f"10.0.0.1:{allowed.port}"] == "failed 101"  # ENETUNREACH: no route out of the namespace
    assert (allowed.accepted, other.accepted) == (1, 0)
    assert result.data["network_allow"] == [f"127.0.0.1:{allowed.port}"]
    assert result.data["network"].startswith("allowlist (private namespace")
    assert result.data["network_relay"] == {"connections": 1, "refused_over_limit": 0, "failed": []}
    _assert_nothing_left(sb, fds, allowed, other)


def test_an_allowed_host_name_is_reached_by_name_through_a_private_hosts_file(
        ws: Path, make_sandbox: Any, iso: str, servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    # "localhost" resolves to the host's 127.0.0.1 in the harness; inside it names a loopback address of its own
    sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"localhost:{allowed.port}",))
    result = sb.call("run_command", timeout=20, argv=[
        PY, "-c", PROBE + "print('HOSTS', open('/etc/hosts').read().split())",
        f"localhost:{allowed.port}", f"localhost:{other.port}", f"127.0.0.1:{allowed.port}"])
    assert result.ok, result
    got = _lines(result)
    assert got[f"localhost:{allowed.port}"] == "pong:allowed:ping"
    assert got[f"localhost:{other.port}"] == "failed 111"
    assert got[f"127.0.0.1:{allowed.port}"] == "failed 111"
    assert got["HOSTS"] == str(["127.77.0.1", "localhost", "127.0.0.1", "localhost",
                                "::1", "localhost", "ip6-localhost", "ip6-loopback"])
    assert (allowed.accepted, other.accepted) == (1, 0)


def test_a_listed_ip_outside_loopback_is_reached_at_its_own_address(ws: Path, make_sandbox: Any, iso: str) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # UDP connect sends nothing: it only picks the outgoing address
        own = probe.getsockname()[0]
    except OSError:
        own = "127.0.0.1"
    finally:
        probe.close()
    if own.startswith("127."):
        pytest.skip("this host has no address outside loopback to serve on")
    server, unlisted = Server("own", host=own), Server("unlisted", host=own)
    try:
        sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"{own}:{server.port}",))
        result = sb.call("run_command", timeout=20, argv=[PY, "-c", PROBE, f"{own}:{server.port}",
                                                          f"{own}:{unlisted.port}"])
    finally:
        server.close()
        unlisted.close()
    assert result.ok, result
    assert _lines(result) == {f"{own}:{server.port}": "pong:own:ping", f"{own}:{unlisted.port}": "failed 111"}
    assert (server.accepted, unlisted.accepted) == (1, 0)


def test_a_server_that_never_answers_does_not_outlast_the_timeout(ws: Path, make_sandbox: Any, iso: str) -> None:
    silent = Server("silent", silent=True)
    try:
        sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"127.0.0.1:{silent.port}",))
        fds = _quiet(sb)
        code = ("import socket\nc = socket.create_connection(('127.0.0.1', PORT)); c.sendall(b'ping')\n"
                "print('connected', flush=True); c.recv(1)\n").replace("PORT", str(silent.port))
        result = guarded(lambda: sb.call("run_command", argv=[PY, "-c", code], timeout=2))
        assert result.status == "timeout" and "connected" in (result.content or ""), result
        assert silent.accepted == 1 and result.data["network_relay"]["connections"] == 1
        _assert_nothing_left(sb, fds | {str(c.fileno()) for c in silent.held})  # the server's end is the server's
    finally:
        silent.close()


def test_a_destination_that_refuses_is_a_refused_connection_inside(ws: Path, make_sandbox: Any, iso: str) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens on this port now
    sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"127.0.0.1:{port}",))
    fds = _quiet(sb)
    result = sb.call("run_command", timeout=20, argv=[PY, "-c", PROBE, f"127.0.0.1:{port}"])
    assert result.ok, result
    # the relay accepted inside, then closed when the real destination refused: the command reads EOF
    assert _lines(result)[f"127.0.0.1:{port}"] in ("", "failed 104"), result.content
    assert result.data["network_relay"]["failed"] == [f"127.0.0.1:{port}: Connection refused"]
    _assert_nothing_left(sb, fds)


def test_the_command_holds_no_descriptor_of_the_relay(ws: Path, make_sandbox: Any, iso: str,
                                                      servers: tuple[Server, Server]) -> None:
    listing = [PY, "-c", "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"]
    plain = make_sandbox(ws, isolation=iso).call("run_command", argv=listing)
    sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"127.0.0.1:{servers[0].port}",))
    allowed = sb.call("run_command", argv=listing)
    assert plain.ok and allowed.ok and allowed.data["network"].startswith("allowlist")
    assert allowed.content == plain.content == "[0, 1, 2, 3]\n"  # 3: the listing's own directory


@pytest.fixture
def no_namespaces(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from hide_wrappers(monkeypatch, "bwrap", "unshare")


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_without_a_namespace_an_allowlist_is_refused_not_widened(
        isolation: str, ws: Path, tmp_path: Path, no_namespaces: None) -> None:
    with pytest.raises(SandboxEnvironmentError) as info:
        Sandbox(ws, policy=SandboxPolicy(isolation=isolation, network_allow=("127.0.0.1:8001",)),  # type: ignore[arg-type]
                snapshot_dir=tmp_path / "snaps")
    assert "network_allow ['127.0.0.1:8001'] needs a network namespace" in str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "snaps").exists() or not any((tmp_path / "snaps").iterdir())


def _contract(**sandbox: Any) -> ControlContract:
    contract = load_contract(data_dir() / "contracts" / "report_task.yaml").with_budget(max_decisions=3)
    return ControlContract.model_validate({**contract.model_dump(), "sandbox": sandbox})


def test_a_contract_names_its_destinations_and_an_empty_list_keeps_the_version(tmp_path: Path) -> None:
    isolated = _contract(isolation="required")
    assert "network_allow" not in isolated.model_dump()["sandbox"]  # stored runs of it keep their version
    assert _contract(isolation="required", network_allow=[]).version == isolated.version
    allowing = _contract(isolation="required", network_allow=["127.0.0.1:8001"])
    assert allowing.version != isolated.version and allowing.sandbox.network_allow == ("127.0.0.1:8001",)
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump({**isolated.model_dump(mode="json"),
                                    "sandbox": {"network_allow": ["127.0.0.1:8001", "example.org"]}}))
    with pytest.raises(ConfigError) as info:
        load_contract(path)
    assert "sandbox.network_allow" in str(info.value) and "'example.org' must be 'host:port'" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_run_reaches_what_its_contract_allows(tmp_path: Path, iso: str, servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    probe = {"kind": "run_command", "argv": [PY, "-c", PROBE, f"127.0.0.1:{allowed.port}", f"127.0.0.1:{other.port}"],
             "timeout": 20}
    run = Run(contract=_contract(isolation=iso, network_allow=[f"127.0.0.1:{allowed.port}"]),
              proposer=ScriptedProposer([probe, {"kind": "think", "thought": "done"}]),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws")
    with run:
        assert run.sandbox.policy.network_allow == (f"127.0.0.1:{allowed.port}",)
        while run.step_due:
            run.step()
    assert (allowed.accepted, other.accepted) == (1, 0)


def test_a_resumed_run_keeps_its_contracts_allowlist(tmp_path: Path, iso: str,
                                                     servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    probe = {"kind": "run_command", "argv": [PY, "-c", PROBE, f"127.0.0.1:{allowed.port}", f"127.0.0.1:{other.port}"],
             "timeout": 20}
    store = SQLiteStore(tmp_path / "runs.sqlite")
    run = Run(contract=_contract(isolation=iso, network_allow=[f"127.0.0.1:{allowed.port}"]),
              proposer=ScriptedProposer([{"kind": "think", "thought": "first"}, probe]),
              evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws",
              store=store, run_id="R")
    run.step()
    run.close()
    resumed = Run.resume(store, "R")
    try:
        assert resumed.sandbox.policy.network_allow == (f"127.0.0.1:{allowed.port}",)
        resumed.step()  # the probe, in the resumed process
    finally:
        resumed.close()
        store.close()
    assert (allowed.accepted, other.accepted) == (1, 0)


def test_without_a_namespace_a_run_and_the_cli_refuse_an_allowlist_before_anything_is_made(
        tmp_path: Path, no_namespaces: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    contract = _contract(network_allow=["127.0.0.1:8001"])
    with pytest.raises(SandboxEnvironmentError, match="needs a network namespace"):
        Run(contract=contract, proposer=ScriptedProposer([{"kind": "think", "thought": "x"}]),
            evidence=EvidenceCatalogue.from_dir(data_dir() / "evidence"), workspace=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()
    monkeypatch.setattr(cli, "load_contract", lambda path: contract)  # the scenario's contract, whichever it names
    (tmp_path / "s.yaml").write_text("id: s\ntitle: one command\nlabels: {acceptable_reports: []}\nthen: finish\n"
                                     "actions:\n- {kind: run_command, argv: ['true'], timeout: 10}\n")
    db = tmp_path / "runs.sqlite"
    assert main(["run", str(tmp_path / "s.yaml"), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "network_allow ['127.0.0.1:8001'] needs a network namespace" in err, err
    assert not db.exists()


def test_the_relay_takes_only_a_tcp_socket_naming_a_listed_destination(servers: tuple[Server, Server]) -> None:
    # The acceptor runs as the command's uid, so what it sends is untrusted: here a test plays it.
    allowed, _other = servers
    fds = _fds()
    relay = Relay(parse_allowlist((f"127.0.0.1:{allowed.port}",)))
    acceptor = socket.socket(fileno=os.dup(relay.child_fd))
    relay.start()
    r, w = os.pipe()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inside, outside = socket.socketpair()  # AF_UNIX: not what an acceptor accepts
    client = socket.socket()
    try:
        socket.send_fds(acceptor, [b"\x00"], [r])  # not a socket
        socket.send_fds(acceptor, [b"\x00"], [udp.fileno()])
        socket.send_fds(acceptor, [b"\x00"], [inside.fileno()])
        socket.send_fds(acceptor, [b"\x07"], [client.fileno()])  # names no destination
        socket.send_fds(acceptor, [b"\x00\x00"], [client.fileno()])
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        client.connect(lst.getsockname())
        conn, _ = lst.accept()
        lst.close()
        socket.send_fds(acceptor, [b"\x00"], [conn.fileno()])  # the one valid message
        conn.close()
        client.sendall(b"ping")
        client.settimeout(10)
        assert client.recv(100) == b"pong:allowed:ping"
    finally:
        relay.stop()
        for s in (acceptor, udp, inside, outside, client):
            s.close()
        os.close(r)
        os.close(w)
    assert relay.log == {"connections": 1, "refused_over_limit": 0, "failed": []}
    assert allowed.accepted == 1
    _assert_nothing_left_here(fds)


def _assert_nothing_left_here(fds_before: set[str]) -> None:
    assert _relay_threads() == []
    assert _fds() <= fds_before


def test_connections_beyond_the_limit_are_closed(ws: Path, make_sandbox: Any, iso: str) -> None:
    silent = Server("silent", silent=True)
    extra = 2
    code = ("import socket, time\nconns = [socket.create_connection(('127.0.0.1', PORT)) for _ in range(N)]\n"
            "end = time.monotonic() + 15\nclosed = set()\n"
            "while len(closed) < EXTRA and time.monotonic() < end:\n"
            "    for i, c in enumerate(conns):\n        c.setblocking(False)\n        try:\n"
            "            if c.recv(1) == b'': closed.add(i)\n        except BlockingIOError: pass\n"
            "        except OSError: closed.add(i)\n    time.sleep(0.05)\nprint('closed', len(closed))\n"
            ).replace("PORT", str(silent.port)).replace("EXTRA", str(extra)).replace("N", str(MAX_CONNECTIONS + extra))
    try:
        sb: Sandbox = make_sandbox(ws, isolation=iso, network_allow=(f"127.0.0.1:{silent.port}",))
        result = sb.call("run_command", argv=[PY, "-c", code], timeout=30)
    finally:
        silent.close()
    assert result.ok and (result.content or "").strip() == f"closed {extra}", result
    assert result.data["network_relay"]["connections"] == MAX_CONNECTIONS
    assert result.data["network_relay"]["refused_over_limit"] == extra
    assert silent.accepted == MAX_CONNECTIONS


def test_the_relay_runs_when_the_harness_python_lies_under_tmp(tmp_path: Path, iso: str,
                                                                servers: tuple[Server, Server]) -> None:
    """A clone (and its .venv) under /tmp: the namespace covers /tmp, so the relay's interpreter must be one it
    still sees (CI's fresh clone in /tmp failed every allowlisted command with 'execvp ...: No such file')."""
    allowed, _ = servers
    venv = tmp_path / "venv"  # this test's own virtual environment under /tmp: a copy of ours, by links
    (venv / "bin").mkdir(parents=True)
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    venv_python = venv / "bin" / "python"
    venv_python.symlink_to(os.path.realpath(sys.executable))
    script = ("import sys\nfrom harness_lab.sandbox import Sandbox, SandboxPolicy\n"
              f"sb = Sandbox(sys.argv[1], policy=SandboxPolicy(isolation={iso!r}, network_allow=(sys.argv[2],)))\n"
              "r = sb.call('run_command', argv=['true'])\nprint(r.ok, r.exit_status, r.content[:200])\nsb.close()\n")
    (tmp_path / "ws").mkdir()
    done = subprocess.run([str(venv_python), "-c", script, str(tmp_path / "ws"), f"127.0.0.1:{allowed.port}"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0 and done.stdout.startswith("True 0"), (done.stdout, done.stderr)
