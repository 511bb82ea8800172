"""Connections into this broker for links whose URI names no host (RabbitMQ's direct
connection, ``amqp://`` or ``amqp:///vhost``).

A socket pair: one end is handed to the broker's own front end (``ConnectionProtocol``,
which picks 0-9-1 or 1.0 from the first bytes, as for any client), the other to the link's
client. So a local end behaves exactly as a network client does (permissions, limits, flow
control, confirms, the connection in ``/api/connections``), without a listener or a port.

Who it logs in as: SASL EXTERNAL with the socket pair's identity: the user the URI names
(``amqp://alice@/vhost``, no password needed: the parameter was set by someone allowed to),
else the broker's ``default_user``. RabbitMQ runs a direct connection as an internal user
that may do anything; Leveret has no such user, so the one it logs in as needs permissions
in the vhost (docs/migration.md says so).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.server.server import Server

__all__ = ["LocalConnector"]

log = logging.getLogger("leveret.links")


class LocalConnector:
    """Opens socket pairs into ``server``'s front ends."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._accepting: set[asyncio.Task[object]] = set()
        self._count = 0

    @property
    def default_user(self) -> str:
        return self.server.settings.default_user

    def connect(
        self, protocol: str, username: str | None, name: str = ""
    ) -> tuple[socket.socket, str]:
        """The link's end of a new socket pair whose other end the broker serves, and the
        name the broker knows the connection by (``<name #n>``, unique: its peer in
        ``/api/connections``). ``protocol`` is for the log (the first bytes the link sends
        choose the front end)."""
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        server = self.server
        identity = username or self.default_user
        self._count += 1
        label = f"<{name or 'link'} #{self._count}>"
        loop = asyncio.get_running_loop()
        task = loop.create_task(
            loop.connect_accepted_socket(
                lambda: server.new_connection(local_identity=identity, local_peer=label),
                theirs,
            )
        )
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)
        log.debug("local %s connection for user '%s'", protocol, identity)
        return ours, label
