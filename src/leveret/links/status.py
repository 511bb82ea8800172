"""What the parts of ``leveret.links`` share: the node name and RabbitMQ's timestamp format
of status rows, the error of an unknown shovel or link, and ``LinkHost``, what a link needs
of the plug-in that runs it (``supervisor.Links`` is the one)."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Protocol

from leveret.auth.users import AdminError

if TYPE_CHECKING:
    from leveret.links.local import LocalConnector
    from leveret.server.parameters import Runtime
    from leveret.server.server import Server

__all__ = ["NODE", "LinkHost", "NoSuchLink", "format_timestamp"]


class NoSuchLink(AdminError):
    exit_code = 69  # rabbitmqctl's EX_UNAVAILABLE for an unknown shovel or link


class LinkHost(Protocol):
    """What shovels and federation links need of the plug-in that runs them."""

    server: Server
    runtime: Runtime
    local: LocalConnector

    def cluster_name(self) -> str: ...


# The node name the management API shows (management/shapes.py's NODE).
NODE = f"leveret@{socket.gethostname()}"


def format_timestamp(seconds: float) -> str:
    """RabbitMQ's ``format_ts``: local time, ``~w-~2.2.0w-~2.2.0w ~w:~2.2.0w:~2.2.0w``
    (the hour is not zero-padded)."""
    t = time.localtime(seconds)
    return f"{t.tm_year}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour}:{t.tm_min:02d}:{t.tm_sec:02d}"
