"""An in-memory AMQP 1.0 client/server pair (h11's ConnectionPair): the client-role and the
server-role connection machines wired back to back, with a clock the test moves.

Import it as ``leveret.testing.amqp10``; it needs nothing but ``leveret.protocol.amqp10``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol.amqp10.connection import Connection, ConnectionConfig, Side
from leveret.protocol.amqp10.events import SaslAuthRequested

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp10.events import Event

__all__ = ["ClientServerPair", "client_config", "server_config"]


def client_config(**overrides: object) -> ConnectionConfig:
    """A client that logs in with PLAIN guest/guest unless told otherwise."""
    settings: dict[str, object] = {
        "side": Side.CLIENT,
        "container_id": "client",
        "hostname": "vhost:/",
        "sasl_mechanism": "PLAIN",
        "sasl_username": "guest",
        "sasl_password": "guest",
    }
    settings.update(overrides)
    return ConnectionConfig(**settings)  # type: ignore[arg-type]


def server_config(**overrides: object) -> ConnectionConfig:
    """A server offering PLAIN and ANONYMOUS unless told otherwise."""
    settings: dict[str, object] = {
        "side": Side.SERVER,
        "container_id": "server",
        "sasl_mechanisms": ("PLAIN", "ANONYMOUS"),
    }
    settings.update(overrides)
    return ConnectionConfig(**settings)  # type: ignore[arg-type]


class ClientServerPair:
    """Two machines and a clock; :meth:`pump` moves bytes both ways until both are quiet.

    SASL requests are answered by ``authenticate`` (default: accept). Every event is kept in
    :attr:`client_events` / :attr:`server_events` as well as returned by :meth:`pump`.
    """

    def __init__(
        self,
        client: ConnectionConfig | None = None,
        server: ConnectionConfig | None = None,
        *,
        authenticate: Callable[[SaslAuthRequested], bool] = lambda _: True,
        now: float = 0.0,
    ) -> None:
        self.client = Connection(client or client_config())
        self.server = Connection(server or server_config())
        self.authenticate = authenticate
        self.now = now
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []

    def pump(self, limit: int = 1000) -> tuple[list[Event], list[Event]]:
        """Exchange bytes until neither side has any; return (client events, server events)."""
        got_c: list[Event] = []
        got_s: list[Event] = []
        for _ in range(limit):
            to_server = self.client.data_to_send(self.now)
            to_client = self.server.data_to_send(self.now)
            if not to_server and not to_client:
                break
            if to_server:
                events = self.server.receive_data(to_server, self.now)
                while any(isinstance(e, SaslAuthRequested) for e in events):
                    got_s += events
                    request = next(e for e in events if isinstance(e, SaslAuthRequested))
                    self.server.answer_sasl(self.authenticate(request))
                    events = self.server.receive_data(b"", self.now)
                got_s += events
            if to_client:
                got_c += self.client.receive_data(to_client, self.now)
        else:
            raise AssertionError(f"still talking after {limit} rounds")
        self.client_events += got_c
        self.server_events += got_s
        return got_c, got_s

    def open(self) -> tuple[list[Event], list[Event]]:
        """Start the client and pump until the opens are exchanged."""
        self.client.initiate()
        return self.pump()

    def advance(self, seconds: float) -> tuple[list[Event], list[Event]]:
        """Move the clock, fire both machines' due timers, and pump."""
        self.now += seconds
        got_c = self.client.handle_timer(self.now)
        got_s = self.server.handle_timer(self.now)
        self.client_events += got_c
        self.server_events += got_s
        more_c, more_s = self.pump()
        return got_c + more_c, got_s + more_s
