"""What the network allowlist costs: per command, per connection, per byte, relayed vs direct.

    python bench/netallow_cost.py [--commands 20] [--connections 200] [--mib 64]

Per isolation mode available here (bwrap, unshare), with a TCP server on the host's 127.0.0.1:

* a command (``true``) without and with a one-entry allowlist (the acceptor's setup: one more Python
  start inside the namespace, the private ``/etc/hosts``): median wall time of ``--commands`` calls;
* ``--connections`` connect + 4-byte request + reply + close, timed inside the command (through the relay)
  and by the same code run on the host (direct);
* ``--mib`` MiB sent to a sink that answers with the byte count: MiB/s through the relay and direct.

Needs root and bubblewrap or util-linux unshare (as the sandbox tests do).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness_lab.sandbox import Sandbox, SandboxPolicy  # noqa: E402
from harness_lab.sandbox.command import detect_isolation  # noqa: E402

PY = "/usr/bin/python3"  # a system interpreter the dropped uid can execute
CLIENT = """
import socket, sys, time
port, n, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port)); c.sendall(b"ping"); c.recv(16); c.close()
rt = (time.perf_counter() - t) / n
block = b"x" * (1 << 20)
t = time.perf_counter()
c = socket.create_connection(("127.0.0.1", port)); c.sendall(b"sink")
for _ in range(mib):
    c.sendall(block)
c.shutdown(socket.SHUT_WR); got = int(c.recv(64)); c.close()
bw = mib / (time.perf_counter() - t)
assert got == mib << 20, got
print(rt, bw)
"""


def _serve(sock: socket.socket) -> None:
    def handle(conn: socket.socket) -> None:
        with conn:
            if conn.recv(4, socket.MSG_WAITALL) == b"ping":
                conn.sendall(b"pong")
                return
            total = 0  # "sink": count what follows, answer with the count
            while chunk := conn.recv(1 << 20):
                total += len(chunk)
            conn.sendall(str(total).encode())

    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commands", type=int, default=20)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    port = server.getsockname()[1]
    threading.Thread(target=_serve, args=(server,), daemon=True).start()
    client = [PY, "-c", CLIENT, str(port), str(args.connections), str(args.mib)]
    direct = subprocess.run(client, capture_output=True, text=True, check=True).stdout.split()
    rt_direct, bw_direct = float(direct[0]), float(direct[1])
    print(f"load average {os.getloadavg()[0]:.2f}; {args.commands} commands, {args.connections} connections, "
          f"{args.mib} MiB")
    print("| mode | `true`, no allowlist | `true`, allowlist | connect+roundtrip relayed / direct | "
          "MiB/s relayed / direct |")
    print("|---|---|---|---|---|")
    for mode in ("bwrap", "unshare"):
        if dict(detect_isolation(mode, os.geteuid()))["kind"] != mode:
            print(f"| {mode} | unavailable here | | | |")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "ws").mkdir()
            plain = Sandbox(Path(tmp) / "ws", policy=SandboxPolicy(isolation=mode), snapshot_dir=Path(tmp) / "s1")
            allow = Sandbox(Path(tmp) / "ws", policy=SandboxPolicy(isolation=mode,
                                                                   network_allow=(f"127.0.0.1:{port}",)),
                            snapshot_dir=Path(tmp) / "s2")
            times: dict[str, list[float]] = {"plain": [], "allow": []}
            for _ in range(args.commands):
                for name, sb in (("plain", plain), ("allow", allow)):
                    t = time.perf_counter()
                    assert sb.call("run_command", argv=["true"]).ok
                    times[name].append(time.perf_counter() - t)
            result = allow.call("run_command", argv=client, timeout=120)
            assert result.ok, result
            rt, bw = (float(x) for x in (result.content or "").split())
            plain.close()
            allow.close()
        print(f"| {mode} | {statistics.median(times['plain']) * 1e3:.1f} ms | "
              f"{statistics.median(times['allow']) * 1e3:.1f} ms | {rt * 1e6:.0f} / {rt_direct * 1e6:.0f} µs "
              f"({rt / rt_direct:.1f}x) | {bw:.0f} / {bw_direct:.0f} |")
    server.close()


if __name__ == "__main__":
    main()
