"""An in-memory AMQP 0-10 client for the sans-IO 0-10 front end (``server/amqp010``): the
protocol machine in the client role wired to an ``AMQP010Connection``, no sockets, time
passed in. Used by the front end's unit tests."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp010._generated.commands import MessageTransfer
from leveret.protocol.amqp010._generated.structs import DeliveryProperties, MessageProperties
from leveret.protocol.amqp010.connection import Connection, ConnectionConfig, Role
from leveret.protocol.amqp010.events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionOpened,
    Event,
    ExceptionReceived,
    ResultReceived,
    SessionAttached,
    SessionDetached,
    StartReceived,
)
from leveret.protocol.amqp010.ops import decode_header
from leveret.server.amqp010.connection import AMQP010Connection
from leveret.testing.client import feed, new_shell, run_turns

if TYPE_CHECKING:
    from leveret.protocol.amqp010._generated.commands import ExecutionException
    from leveret.protocol.amqp010.session import Session as ProtocolSession
    from leveret.protocol.amqp010.types import Struct

__all__ = ["Client010"]

_NAMES = itertools.count(1)


class Client010:
    """One 0-10 client connection to a front end in memory."""

    def __init__(
        self,
        broker: Broker | None = None,
        users: UserStore | None = None,
        *,
        loopback: bool = True,
        certificate_identity: str | None = None,
        now: float = 0.0,
    ) -> None:
        self.broker = broker if broker is not None else Broker()
        self.users = users if users is not None else UserStore.with_default_user()
        self.now = now
        self.shell = new_shell(
            AMQP010Connection,
            self.broker,
            self.users,
            peer="127.0.0.1:5555",
            loopback=loopback,
            now=now,
            certificate_identity=certificate_identity,
        )
        server = self.shell.front
        assert isinstance(server, AMQP010Connection)
        self.server = server
        self.conn = Connection(Role.CLIENT, ConnectionConfig())
        self.events: list[Event] = []

    # -- moving bytes --------------------------------------------------------------------

    def pump(self) -> list[Event]:
        """Move bytes both ways until both sides are quiet; the client's new events."""
        new: list[Event] = []
        for _ in range(1000):
            to_server = self.conn.data_to_send()
            if to_server:
                feed(self.shell, to_server, self.now)
            else:
                run_turns(self.shell, self.now)
            to_client = b"".join(self.shell.take_output(self.now))
            if to_client:
                new += self.conn.receive_data(to_client, self.now)
            if not to_server and not to_client:
                break
        else:  # pragma: no cover - a livelock is a bug
            raise AssertionError("never went quiet")
        self.events += new
        return new

    def tick(self, now: float) -> list[Event]:
        self.now = now
        self.shell.tick(now)
        return self.pump()

    # -- the handshake -------------------------------------------------------------------

    def start(self) -> StartReceived:
        self.conn.initiate()
        return next(e for e in self.pump() if isinstance(e, StartReceived))

    def login(self, username: str, password: str, vhost: str = "/") -> list[Event]:
        """start-ok with PLAIN and the vhost; the events until the server went quiet."""
        self.conn.config.virtual_host = vhost
        if not any(isinstance(e, StartReceived) for e in self.events):
            self.start()
        self.conn.start_ok("PLAIN", b"\0" + username.encode() + b"\0" + password.encode())
        return self.pump()

    @property
    def opened(self) -> bool:
        return any(isinstance(e, ConnectionOpened) for e in self.events)

    def close_event(self) -> ConnectionClosed | None:
        return next((e for e in self.events if isinstance(e, ConnectionClosed)), None)

    def open(
        self, username: str = "guest", password: str = "guest", vhost: str = "/", channel: int = 1
    ) -> Client010:
        self.login(username, password, vhost)
        assert self.opened, self.events
        self.attach(channel)
        return self

    def attach(
        self, channel: int = 1, name: bytes | None = None, session: ProtocolSession | None = None
    ) -> bool:
        """Attach a session; whether it is attached (not detached at once)."""
        before = len(self.events)
        # Session names are per user and broker: a fresh one unless told.
        name = name or f"s{next(_NAMES)}".encode()
        self.conn.attach(channel, name, session=session)
        self.pump()
        new = self.events[before:]
        return any(isinstance(e, SessionAttached) for e in new) and not any(
            isinstance(e, SessionDetached) for e in new
        )

    # -- commands ------------------------------------------------------------------------

    def send(
        self,
        command: Any,
        *,
        channel: int = 1,
        header: list[Struct] | None = None,
        body: bytes | None = None,
    ) -> int:
        """Send ``command`` (sync); -1 when the session is gone (an earlier error)."""
        if self.conn.session(channel) is None:
            return -1
        command_id = self.conn.send_command(channel, command, header=header, body=body, sync=True)
        self.pump()
        return command_id

    def transfer(
        self,
        exchange: str,
        routing_key: str,
        body: bytes = b"x",
        *,
        channel: int = 1,
        user_id: bytes | None = None,
        **delivery: Any,
    ) -> int:
        header: list[Struct] = [DeliveryProperties(routing_key=routing_key, **delivery)]
        if user_id is not None:
            header.append(MessageProperties(user_id=user_id))
        return self.send(
            MessageTransfer(destination=exchange, accept_mode=1, acquire_mode=0),
            channel=channel,
            header=header,
            body=body,
        )

    def completed(self, command_id: int, channel: int = 1) -> bool:
        return any(
            isinstance(e, CommandsCompleted) and e.channel == channel and command_id in e.commands
            for e in self.events
        )

    def result(self, command_id: int) -> Struct | None:
        for e in self.events:
            if isinstance(e, ResultReceived) and e.command_id == command_id:
                return e.value
        raise AssertionError(f"no result for command {command_id}: {self.events}")

    def exception(self, channel: int = 1) -> ExecutionException | None:
        found = [e.exception for e in self.events if isinstance(e, ExceptionReceived)]
        return found[-1] if found else None

    def transfers(self, destination: str | None = None) -> list[CommandReceived]:
        return [
            e
            for e in self.events
            if isinstance(e, CommandReceived)
            and isinstance(e.command, MessageTransfer)
            and (destination is None or e.command.destination == destination)
        ]

    @staticmethod
    def header_of(transfer: CommandReceived) -> list[Struct]:
        return decode_header(transfer.header) if transfer.header is not None else []
