"""The fault harness's node ports: below the ephemeral range, free, never given twice."""

from __future__ import annotations

import socket

from tools.faults import ports


def test_kept_ports_are_below_the_ephemeral_range_free_and_distinct() -> None:
    low = ports._ephemeral_low()
    given = [ports.kept_port() for _ in range(20)]
    assert len(set(given)) == 20
    assert all(10000 <= port < low for port in given)
    for port in given:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # raises if it was not free
