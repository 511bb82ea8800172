"""What status rows of shovels and federation links share: the node name and RabbitMQ's
timestamp format."""

from __future__ import annotations

import socket
import time

__all__ = ["NODE", "format_timestamp"]

# The node name the management API shows (management/shapes.py's NODE).
NODE = f"leveret@{socket.gethostname()}"


def format_timestamp(seconds: float) -> str:
    """RabbitMQ's ``format_ts``: local time, ``~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w``
    (the hour is not zero-padded)."""
    t = time.localtime(seconds)
    return f"{t.tm_year}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour}:{t.tm_min:02d}:{t.tm_sec:02d}"
