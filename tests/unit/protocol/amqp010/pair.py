"""An in-memory client/server pair of AMQP 0-10 connection machines (h11's ConnectionPair)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol.amqp010.connection import Connection, ConnectionConfig, Role
from leveret.protocol.amqp010.events import (
    ConnectionOpened,
    Event,
    OpenRequested,
    StartOkReceived,
    StartReceived,
)

if TYPE_CHECKING:
    from leveret.protocol.amqp010.session import SessionTable


class Pair:
    """A client and a server wired back to back; :meth:`pump` moves bytes until both are quiet."""

    def __init__(
        self,
        sessions: SessionTable | None = None,
        client_config: ConnectionConfig | None = None,
        server_config: ConnectionConfig | None = None,
    ) -> None:
        self.client = Connection(Role.CLIENT, client_config)
        self.server = Connection(Role.SERVER, server_config, sessions)
        self.now = 0.0
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []

    def pump(self) -> tuple[list[Event], list[Event]]:
        """Deliver queued bytes both ways until none are left; return (client, server) events."""
        client_events: list[Event] = []
        server_events: list[Event] = []
        for _ in range(100):
            to_server = self.client.data_to_send()
            to_client = self.server.data_to_send()
            if not to_server and not to_client:
                break
            if to_server:
                server_events += self.server.receive_data(to_server, self.now)
            if to_client:
                client_events += self.client.receive_data(to_client, self.now)
        else:  # pragma: no cover - a livelock is a bug
            raise AssertionError("the pair never went quiet")
        self.client_events += client_events
        self.server_events += server_events
        return client_events, server_events

    def open(self, principal: str = "guest") -> None:
        """Run the whole handshake (PLAIN, accepted, vhost opened)."""
        self.client.initiate()
        client_events, _ = self.pump()
        assert any(isinstance(e, StartReceived) for e in client_events)
        self.client.start_ok("PLAIN", b"\0guest\0guest")
        _, server_events = self.pump()
        assert any(isinstance(e, StartOkReceived) for e in server_events)
        self.server.accept_auth(principal)
        _, server_events = self.pump()
        assert any(isinstance(e, OpenRequested) for e in server_events)
        self.server.open_ok()
        client_events, _ = self.pump()
        assert any(isinstance(e, ConnectionOpened) for e in client_events)
