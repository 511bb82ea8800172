"""``python -m bench.floor_probe [SECONDS]``: the machine's own latency tail for scenario g's
pattern, with no broker (issue 26).

Every millisecond 16 bytes go over a loopback TCP connection to a second process, which
sends them back; the round trip of each is timed as the load generators time a message
(send to receipt). Both processes sleep between messages, as a broker and a load generator
do at 1000 msg/s, so every message wakes an idle CPU: on this project's VM (an idle vCPU
halts at once and the host wakes it) and under other work that alone puts milliseconds in
the tail. ``bench.compare`` runs it before each latency run and keeps the result beside
that run's (``floor_us``): a p99 the probe had too is the machine's, not the broker's
(docs/benchmarks.md, "g's p99 after f").

Prints one JSON object: ``count``, ``p50``, ``p99``, ``p99_9``, ``max`` (µs) and ``over_1ms``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

__all__ = ["main", "probe"]

MESSAGE = b"x" * 16
INTERVAL_NS = 1_000_000


def _echo(listener: socket.socket) -> None:
    # Whatever happens to the timing side, this one does not wait for it for ever.
    listener.settimeout(30)
    conn, _ = listener.accept()
    conn.settimeout(None)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(64):
        conn.sendall(data)


def _percentile(ordered: list[int], q: float) -> int:
    # Nearest rank, as the Go load generator takes its percentiles.
    return ordered[max(int(q * len(ordered) + 0.999999) - 1, 0)]


def probe(seconds: float) -> dict[str, int]:
    """Ping-pong for ``seconds`` at one round trip a millisecond; the round trips' tail."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    address = listener.getsockname()
    pid = os.fork()
    if pid == 0:  # the echoing side
        try:
            _echo(listener)
        finally:
            os._exit(0)
    listener.close()
    rtts: list[int] = []
    with socket.create_connection(address) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        due = time.monotonic_ns()
        end = due + int(seconds * 1e9)
        while due < end:
            due += INTERVAL_NS
            wait = due - time.monotonic_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            sent = time.monotonic_ns()
            conn.sendall(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                chunk = conn.recv(64)
                if not chunk:
                    raise ConnectionError("the echoing process went away")
                got += len(chunk)
            rtts.append((time.monotonic_ns() - sent) // 1000)
    os.waitpid(pid, 0)
    rtts.sort()
    return {
        "count": len(rtts),
        "p50": _percentile(rtts, 0.50),
        "p99": _percentile(rtts, 0.99),
        "p99_9": _percentile(rtts, 0.999),
        "max": rtts[-1],
        "over_1ms": sum(r > 1000 for r in rtts),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    seconds = float(args[0]) if args else 5.0
    print(json.dumps(probe(seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
