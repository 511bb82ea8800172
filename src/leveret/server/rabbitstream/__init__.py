"""The stream-protocol front end: RabbitMQ's stream protocol (port 5552) on Leveret's stream
queues. ``connection.py`` maps each command onto the core (the protocol's server machine is
``protocol/rabbitstream/server.py``, the connection's lifecycle the shell's,
``server/shell/``), ``state.py`` is what the connections of one broker share,
``superstream.py`` the super stream commands; the listener is started by
``server/server.py``."""

from __future__ import annotations

from leveret.server.rabbitstream.connection import StreamConnection
from leveret.server.rabbitstream.state import StreamServer, StreamSettings

__all__ = ["StreamConnection", "StreamServer", "StreamSettings"]
