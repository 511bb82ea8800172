"""A small AMQP/Fast 0.8a2 client (AMQ RFC 006), sans-IO, for tests: no client exists any more.

It speaks through the codec of ``leveret.protocol.amqpfast`` (commands, framing, fragments)
and plays the client's part of the RFC's dialogues: initiation, PLAIN or NONE login, tuning
(its CONNECTION TUNE and CONNECTION OPEN follow the server's TUNE at once), the close
handshakes of connection, channel and handle (a close from the server is answered), PINGs
that ask for a response, fragmenting messages to the server's FRAME_MAX and reassembling
HANDLE NOTIFY fragments, and restartable uploads (HANDLE PREPARE, then the rest once HANDLE
READY says how much the server holds).

Use: ``client.initiate()``, then move ``client.data_to_send()`` to the server and the
server's octets to ``client.receive_data(...)``, which returns :class:`ClientEvent`\\ s. A socket
wrapper can sit on top once a front end listens for the protocol.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.protocol.amqpfast import commands as c
from leveret.protocol.amqpfast.events import ServiceType
from leveret.protocol.amqpfast.framing import (
    INITIATION,
    PRE_TUNE_FRAME_MAX,
    CommandDecoder,
    Fragment,
    encode_command,
    split_message,
)

if TYPE_CHECKING:
    from leveret.protocol.amqpfast.fieldtable import FastTable

__all__ = [
    "ChannelClosed",
    "ClientEvent",
    "Connected",
    "ConnectionClosed",
    "Created",
    "Delivered",
    "FastClient",
    "HandleClosed",
    "Indexed",
    "Pinged",
    "Ready",
    "Replied",
]


class ClientEvent:
    """Base of what the client reports."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Connected(ClientEvent):
    """The server's CONNECTION TUNE arrived (the client answered with TUNE and OPEN)."""

    options: FastTable


@dataclass(frozen=True, slots=True)
class Replied(ClientEvent):
    """A CONNECTION, CHANNEL or HANDLE REPLY (``level``; ``ident`` is the channel/handle)."""

    level: str
    ident: int
    confirm_tag: int
    reply_code: int
    reply_text: str


@dataclass(frozen=True, slots=True)
class Created(ClientEvent):
    handle_id: int
    dest_name: str


@dataclass(frozen=True, slots=True)
class Delivered(ClientEvent):
    """A whole message from HANDLE NOTIFY fragments."""

    handle_id: int
    message_nbr: int
    header: c.MessageHeader
    body: bytes
    delivered: bool
    redelivered: bool
    dest_name: str


@dataclass(frozen=True, slots=True)
class Indexed(ClientEvent):
    handle_id: int
    message_nbr: int
    message_list: bytes


@dataclass(frozen=True, slots=True)
class Ready(ClientEvent):
    """HANDLE READY: the server holds ``message_size`` octets; the rest has been sent."""

    handle_id: int
    message_size: int


@dataclass(frozen=True, slots=True)
class HandleClosed(ClientEvent):
    handle_id: int
    reply_code: int
    reply_text: str
    by_server: bool


@dataclass(frozen=True, slots=True)
class ChannelClosed(ClientEvent):
    channel_id: int
    reply_code: int
    reply_text: str
    by_server: bool


@dataclass(frozen=True, slots=True)
class ConnectionClosed(ClientEvent):
    reply_code: int
    reply_text: str
    by_server: bool


@dataclass(frozen=True, slots=True)
class Pinged(ClientEvent):
    respond: bool


@dataclass(slots=True)
class _Incoming:
    handle_id: int
    message_nbr: int
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _Upload:
    """A restartable upload waiting for HANDLE READY."""

    header: c.MessageHeader
    body: bytes
    dest_name: str
    confirm_tag: int


class FastClient:
    """The client side of one AMQP/Fast connection."""

    def __init__(
        self,
        *,
        login: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's default user, for tests
        mechanism: str | None = None,
        virtual_path: str = "/",
        client_name: str = "",
        frame_max: int = 131072,
        heartbeat: int = 0,
        dictionary: dict[str, str] | None = None,
        open_confirm_tag: int = 1,
        version: int = 1,
    ) -> None:
        self.login = login
        self.password = password
        self.mechanism = mechanism
        self.virtual_path = virtual_path
        self.client_name = client_name
        self.frame_max = frame_max
        self.heartbeat = heartbeat
        self.dictionary = dict(dictionary or {})
        self.open_confirm_tag = open_confirm_tag
        self.version = version
        self.state = "new"
        self.server_version = 0
        self.server_frame_max = PRE_TUNE_FRAME_MAX
        self.handle_channels: dict[int, int] = {}
        self._decoder = CommandDecoder(PRE_TUNE_FRAME_MAX)
        self._out: list[bytes] = []
        self._notify: c.HandleNotify | None = None  # awaiting its fragment
        self._incoming: dict[int, _Incoming] = {}  # by handle
        self._uploads: dict[int, _Upload] = {}  # by handle
        self._closing_handles: set[int] = set()
        self._closing_channels: set[int] = set()

    # -- I/O ------------------------------------------------------------------------------

    def initiate(self) -> None:
        """Queue the two-octet initiation (3.2.2)."""
        if self.state != "new":
            raise RuntimeError("already initiated")
        self._out.append(bytes((INITIATION[0], self.version)))
        self.state = "initiated"

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[ClientEvent]:
        """Feed octets from the server; return what they meant."""
        self._decoder.receive(data)
        events: list[ClientEvent] = []
        while self.state != "closed":
            item = self._decoder.next()
            if item is None:
                break
            event = self._fragment(item) if isinstance(item, Fragment) else self._command(item)
            if event is not None:
                events.append(event)
        return events

    # -- commands -------------------------------------------------------------------------

    def _send(self, command: c.Command) -> None:
        self._out.append(encode_command(command))

    def ping(self, *, respond: bool = True) -> None:
        self._send(c.ConnectionPing(respond=respond))

    def close(self, code: int = 200, text: str = "OK") -> None:
        self._send(c.ConnectionClose(code, text))
        self.state = "closing"

    def open_channel(
        self,
        channel_id: int,
        *,
        transacted: bool = False,
        restartable: bool = False,
        confirm_tag: int = 0,
        out_of_band: str = "",
    ) -> None:
        self._send(c.ChannelOpen(channel_id, confirm_tag, transacted, restartable, {}, out_of_band))

    def close_channel(self, channel_id: int, code: int = 200, text: str = "OK") -> None:
        self._closing_channels.add(channel_id)
        self._send(c.ChannelClose(channel_id, code, text))

    def ack(self, channel_id: int, message_nbr: int, *, confirm_tag: int = 0) -> None:
        self._send(c.ChannelAck(channel_id, confirm_tag, message_nbr))

    def commit(self, channel_id: int, *, confirm_tag: int = 0) -> None:
        self._send(c.ChannelCommit(channel_id, confirm_tag))

    def rollback(self, channel_id: int, *, confirm_tag: int = 0) -> None:
        self._send(c.ChannelRollback(channel_id, confirm_tag))

    def open_handle(
        self,
        channel_id: int,
        handle_id: int,
        *,
        service: ServiceType = ServiceType.QUEUE,
        dest_name: str = "",
        producer: bool = False,
        consumer: bool = False,
        browser: bool = False,
        temporary: bool = False,
        confirm_tag: int = 0,
        mime_type: str = "",
        encoding: str = "",
    ) -> None:
        self.handle_channels[handle_id] = channel_id
        self._send(
            c.HandleOpen(
                channel_id,
                handle_id,
                int(service),
                confirm_tag,
                producer,
                consumer,
                browser,
                temporary,
                dest_name,
                mime_type,
                encoding,
            )
        )

    def close_handle(self, handle_id: int, code: int = 200, text: str = "OK") -> None:
        self._closing_handles.add(handle_id)
        self._send(c.HandleClose(handle_id, code, text))

    def send(
        self,
        handle_id: int,
        body: bytes,
        *,
        dest_name: str = "",
        confirm_tag: int = 0,
        header: c.MessageHeader | None = None,
    ) -> int:
        """Send a message in fragments of at most the server's FRAME_MAX; return how many.

        ``header`` supplies the header block's fields (its ``body_size`` is set here).
        """
        header = self._header(header, body)
        pieces = split_message(header, body, self.server_frame_max)
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            self._send(
                c.HandleSend(
                    handle_id,
                    confirm_tag if last else 0,
                    len(piece),
                    partial=not last,
                    dest_name=dest_name if last else "",
                )
            )
            self._out.append(piece)
        return len(pieces)

    def send_restartable(
        self,
        handle_id: int,
        body: bytes,
        *,
        first: int,
        dest_name: str = "",
        confirm_tag: int = 0,
        header: c.MessageHeader | None = None,
        content_hash: str | None = None,
    ) -> None:
        """HANDLE PREPARE with the header and the first ``first`` body octets; the rest
        goes in HANDLE SENDs (``recovery`` set) once HANDLE READY arrives.

        ``content_hash`` defaults to the body's SHA1 in lowercase hex.
        """
        header = self._header(header, body)
        digest = content_hash
        if digest is None:
            digest = hashlib.sha1(body, usedforsecurity=False).hexdigest()
        head = header.encode() + body[:first]
        self._send(c.HandlePrepare(handle_id, len(head), digest))
        self._out.append(head)
        self._uploads[handle_id] = _Upload(header, body, dest_name, confirm_tag)

    def consume(
        self,
        handle_id: int,
        *,
        prefetch: int = 1,
        no_local: bool = False,
        unreliable: bool = False,
        dest_name: str = "",
        identifier: str = "",
        selector: bytes = b"",
        mime_type: str = "",
        confirm_tag: int = 0,
    ) -> None:
        self._send(
            c.HandleConsume(
                handle_id,
                confirm_tag,
                prefetch,
                no_local,
                unreliable,
                dest_name,
                identifier,
                selector,
                mime_type,
            )
        )

    def cancel(
        self, handle_id: int, identifier: str, *, dest_name: str = "", confirm_tag: int = 0
    ) -> None:
        self._send(c.HandleCancel(handle_id, confirm_tag, dest_name, identifier))

    def flow(self, handle_id: int, *, pause: bool, confirm_tag: int = 0) -> None:
        self._send(c.HandleFlow(handle_id, confirm_tag, pause))

    def unget(self, handle_id: int, message_nbr: int, *, confirm_tag: int = 0) -> None:
        self._send(c.HandleUnget(handle_id, confirm_tag, message_nbr))

    def query(self, handle_id: int, *, message_nbr: int = 0, dest_name: str = "") -> None:
        self._send(c.HandleQuery(handle_id, message_nbr, dest_name))

    def browse(self, handle_id: int, message_nbr: int, *, confirm_tag: int = 0) -> None:
        self._send(c.HandleBrowse(handle_id, confirm_tag, message_nbr))

    # -- internals ------------------------------------------------------------------------

    def _header(self, header: c.MessageHeader | None, body: bytes) -> c.MessageHeader:
        base = header or c.MessageHeader()
        return c.MessageHeader(
            len(body),
            base.persistent,
            base.priority,
            base.expiration,
            base.mime_type,
            base.encoding,
            base.identifier,
            dict(base.headers),
        )

    def _command(self, command: c.Command) -> ClientEvent | None:
        if not command.FROM_SERVER:
            raise RuntimeError(f"server sent {command.NAME}, which only clients send")
        if isinstance(command, c.ConnectionChallenge):
            self._challenge(command)
            return None
        if isinstance(command, c.ConnectionTune):
            return self._tune(command)
        if isinstance(command, c.ConnectionPing):
            if command.respond:
                self.ping(respond=False)
            return Pinged(command.respond)
        if isinstance(command, c.ConnectionReply):
            self.state = "open"
            return Replied("connection", 0, *_reply(command))
        if isinstance(command, c.ConnectionClose):
            by_server = self.state != "closing"
            if by_server:
                self._send(c.ConnectionClose(200, "OK"))
            self.state = "closed"
            return ConnectionClosed(command.reply_code, command.reply_text, by_server)
        if isinstance(command, c.ChannelReply):
            return Replied("channel", command.channel_id, *_reply(command))
        if isinstance(command, c.ChannelClose):
            return self._channel_close(command)
        if isinstance(command, c.HandleReply):
            return Replied("handle", command.handle_id, *_reply(command))
        if isinstance(command, c.HandleClose):
            by_server = command.handle_id not in self._closing_handles
            if by_server:
                self._send(c.HandleClose(command.handle_id, 200, "OK"))
            self._closing_handles.discard(command.handle_id)
            self.handle_channels.pop(command.handle_id, None)
            return HandleClosed(
                command.handle_id, command.reply_code, command.reply_text, by_server
            )
        if isinstance(command, c.HandleCreated):
            return Created(command.handle_id, command.dest_name)
        if isinstance(command, c.HandleIndex):
            return Indexed(command.handle_id, command.message_nbr, command.message_list)
        if isinstance(command, c.HandleReady):
            return self._ready(command)
        if isinstance(command, c.HandleNotify):
            self._notify = command
            if command.fragment_size == 0 and not command.out_of_band:
                return self._fragment(Fragment(b""))
            return None
        raise RuntimeError(f"unexpected {command.NAME}")  # HANDLE PREPARE from a server

    def _challenge(self, command: c.ConnectionChallenge) -> None:
        self.server_version = command.version
        offered = command.mechanisms.split()
        mechanism = self.mechanism or ("PLAIN" if "PLAIN" in offered else "NONE")
        responses: FastTable = {}
        if mechanism == "PLAIN":
            responses = {"LOGIN": self.login, "PASSWORD": self.password}
        self._send(c.ConnectionResponse(mechanism, responses))
        self.state = "challenged"

    def _tune(self, command: c.ConnectionTune) -> ClientEvent:
        server_max = command.options.get("FRAME_MAX", PRE_TUNE_FRAME_MAX)
        if isinstance(server_max, int):
            self.server_frame_max = server_max
        mine = min(self.frame_max, self.server_frame_max)
        options: FastTable = {"FRAME_MAX": mine, "HEARTBEAT": self.heartbeat}
        self._send(c.ConnectionTune(options, dict(self.dictionary)))
        self._decoder.frame_max = mine
        self._send(c.ConnectionOpen(self.open_confirm_tag, self.virtual_path, self.client_name))
        self.state = "opening" if self.open_confirm_tag else "open"
        return Connected(command.options)

    def _channel_close(self, command: c.ChannelClose) -> ClientEvent:
        channel_id = command.channel_id
        by_server = channel_id not in self._closing_channels
        if by_server:
            self._send(c.ChannelClose(channel_id, 200, "OK"))
        self._closing_channels.discard(channel_id)
        for handle_id in [h for h, ch in self.handle_channels.items() if ch == channel_id]:
            del self.handle_channels[handle_id]
            self._incoming.pop(handle_id, None)
            self._uploads.pop(handle_id, None)
        return ChannelClosed(channel_id, command.reply_code, command.reply_text, by_server)

    def _ready(self, command: c.HandleReady) -> ClientEvent:
        upload = self._uploads.pop(command.handle_id, None)
        if upload is not None:
            rest = upload.body[command.message_size :]
            pieces = [
                rest[i : i + self.server_frame_max]
                for i in range(0, len(rest), self.server_frame_max)
            ] or [b""]
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                self._send(
                    c.HandleSend(
                        command.handle_id,
                        upload.confirm_tag if last else 0,
                        len(piece),
                        partial=not last,
                        recovery=True,
                        dest_name=upload.dest_name if last else "",
                    )
                )
                self._out.append(piece)
        return Ready(command.handle_id, command.message_size)

    def _fragment(self, fragment: Fragment) -> ClientEvent | None:
        notify, self._notify = self._notify, None
        if notify is None:
            raise RuntimeError("message fragment without a HANDLE NOTIFY")
        incoming = self._incoming.get(notify.handle_id)
        if incoming is None or incoming.message_nbr != notify.message_nbr:
            incoming = self._incoming[notify.handle_id] = _Incoming(
                notify.handle_id, notify.message_nbr
            )
        incoming.data += fragment.data
        if notify.partial:
            return None
        del self._incoming[notify.handle_id]
        header, start = c.MessageHeader.decode(bytes(incoming.data))
        body = bytes(incoming.data[start:])
        return Delivered(
            notify.handle_id,
            notify.message_nbr,
            header,
            body,
            notify.delivered,
            notify.redelivered,
            notify.dest_name,
        )


def _reply(
    command: c.ConnectionReply | c.ChannelReply | c.HandleReply,
) -> tuple[int, int, str]:
    return command.confirm_tag, command.reply_code, command.reply_text
