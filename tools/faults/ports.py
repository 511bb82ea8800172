"""Ports for the nodes a fault run restarts: each must bind its ports again after a kill,
so they are chosen below the kernel's ephemeral range (``ip_local_port_range``). A port
from that range (what binding port 0 gives) can be taken meanwhile as the local port of
any outgoing connection on the machine, and the restarted node could not listen: a
failed run that says nothing about the broker (seen once in a 100-cycle soak, with test
runs beside it)."""

from __future__ import annotations

import random
from pathlib import Path

from leveret.cluster.etcd_process import port_is_free

__all__ = ["kept_port"]

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000
_ATTEMPTS = 200
_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def kept_port() -> int:
    """A free port on 127.0.0.1 below the ephemeral range, not given before by this run."""
    high = _ephemeral_low() - 1
    if high <= _LOWEST:
        raise RuntimeError(f"no ports below the ephemeral range (it starts at {high + 1})")
    for _ in range(_ATTEMPTS):
        port = random.randint(_LOWEST, high)
        if port not in _given and port_is_free(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port found in {_LOWEST}-{high}")
