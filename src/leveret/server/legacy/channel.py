"""One channel of the 0-8/0-9 front end: a 0-9-1 ``Channel`` (the same ``Session``, the same
basic.deliver encoding) plus what the older versions add on a channel: consumers of the
``file``, ``stream`` and ``message`` classes (deliveries to them are encoded in their class's
methods, everything else — tags, QoS, acks, requeues — is the session's), the assembly of
``file``/``stream`` content (class ids 70 and 80), and 0-8's ``channel.alert`` where 0-9-1
would send a server-side ``basic.cancel``.

The per-class delivery formats live in the class modules next to this one (``filexfer.py``,
``ratestream.py``, ``references.py``); this module only routes to them. A publish of those
classes that the core returns (mandatory, immediate) goes to ``return_hook`` while it is set
(the class's own return method), else it is 0-9-1's ``basic.return``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.errors import ContentTooLarge, FrameError, UnexpectedFrame
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp091 import framing
from leveret.server.amqp091.channel import Channel

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Client
    from leveret.model.message import Message
    from leveret.server.guard import Guard
    from leveret.server.legacy.connection_base import LegacyConnectionBase

__all__ = ["ContentAssembly", "LegacyChannel"]


class ContentAssembly:
    """A content of class 70 (file), 80 (stream) or 110 (tunnel) being received: the method
    that carries it, then the header and body frames; ``done`` runs with (raw properties,
    body). With ``on_header``/``on_body`` (file staging, which keeps what arrived even if the
    connection drops mid-content) the header and each body frame go there as they arrive,
    and ``done`` gets an empty body."""

    __slots__ = (
        "body",
        "class_id",
        "done",
        "method_id",
        "on_body",
        "on_header",
        "properties",
        "received",
        "size",
    )

    def __init__(
        self,
        class_id: int,
        method_id: int,
        done: Callable[[bytes, bytes], None],
        on_header: Callable[[bytes, int], None] | None = None,
        on_body: Callable[[bytes], None] | None = None,
    ) -> None:
        self.class_id = class_id
        self.method_id = method_id
        self.done = done
        self.on_header = on_header
        self.on_body = on_body
        self.size = -1
        self.received = 0
        self.properties = b""
        self.body: list[bytes] = []


class LegacyChannel(Channel):
    """A channel of the 0-8/0-9 front end."""

    def __init__(
        self,
        conn: LegacyConnectionBase,
        channel_id: int,
        client: Client,
        consumer_timeout: float | None,
        guard: Guard,
    ) -> None:
        super().__init__(conn, channel_id, client, consumer_timeout, guard)
        self.legacy = conn
        # Consumers of the file, stream and message classes by tag: the object that encodes
        # deliveries to them (basic consumers are not listed: the 0-9-1 encoding serves).
        self.deliverers: dict[str, Any] = {}
        self.assembly: ContentAssembly | None = None
        # Per-class state of this channel (file staging, message references, dtx...).
        self.extras: dict[str, Any] = {}
        # Where the core's returns go while a publish of another class is routed.
        self.return_hook: Callable[[int, str, Message], None] | None = None

    # -- SessionSink -----------------------------------------------------------------------

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        deliverer = self.deliverers.get(consumer_tag) if self.deliverers else None
        if deliverer is None:
            super().deliver(consumer_tag, delivery_tag, redelivered, message)
        else:
            deliverer.deliver(self, consumer_tag, delivery_tag, redelivered, message)

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None:
        hook = self.return_hook
        if hook is None:
            super().returned(reply_code, reply_text, message)
        else:
            hook(reply_code, reply_text, message)

    def consumer_cancelled(self, consumer_tag: str) -> None:
        deliverer = self.deliverers.pop(consumer_tag, None)
        if deliverer is not None:
            deliverer.cancelled(self, consumer_tag)
        if self.legacy.dialect.name == "0-8":
            # 0-8 has no server-sent basic.cancel: its non-fatal warning is channel.alert.
            self.legacy.send_legacy(
                self.id,
                m08.ChannelAlert(
                    reply_code=404,
                    reply_text=f"consumer '{consumer_tag}' cancelled: its queue was deleted",
                    details={"consumer-tag": consumer_tag},
                ).encode(),
            )
        elif deliverer is None:
            super().consumer_cancelled(consumer_tag)

    # -- content of the file and stream classes --------------------------------------------

    def start_assembly(
        self,
        class_id: int,
        method_id: int,
        done: Callable[[bytes, bytes], None],
        on_header: Callable[[bytes, int], None] | None = None,
        on_body: Callable[[bytes], None] | None = None,
    ) -> None:
        self.assembly = ContentAssembly(class_id, method_id, done, on_header, on_body)

    def assembling(self) -> bool:
        return self.assembly is not None

    def content_method(self) -> tuple[int, int]:
        assembly = self.assembly
        return (0, 0) if assembly is None else (assembly.class_id, assembly.method_id)

    def legacy_header(self, payload: bytes | memoryview, max_size: int) -> None:
        assembly = self.assembly
        assert assembly is not None
        if assembly.size != -1:
            raise UnexpectedFrame(f"unexpected content header frame on channel {self.id}")
        class_id, body_size, raw = framing.parse_content_header(payload)
        if class_id != assembly.class_id:
            raise FrameError(f"content header for class {class_id} on channel {self.id}")
        if body_size > max_size:
            self.assembly = None
            raise ContentTooLarge(
                f"message size {body_size} is larger than configured max size {max_size}"
            )
        assembly.size = body_size
        assembly.properties = bytes(raw)
        if assembly.on_header is not None:
            assembly.on_header(assembly.properties, body_size)

    def legacy_body(self, payload: bytes | memoryview) -> None:
        assembly = self.assembly
        assert assembly is not None
        if assembly.size < 0:
            raise UnexpectedFrame(f"unexpected content body frame on channel {self.id}")
        assembly.received += len(payload)
        if assembly.received > assembly.size:
            raise FrameError(
                f"content body of {assembly.received} bytes exceeds the announced "
                f"{assembly.size} on channel {self.id}"
            )
        if assembly.on_body is not None:
            assembly.on_body(bytes(payload))
        else:
            assembly.body.append(bytes(payload))

    def legacy_complete(self) -> bool:
        assembly = self.assembly
        return assembly is not None and assembly.size >= 0 and assembly.received == assembly.size

    def finish_content(self) -> None:
        assembly = self.assembly
        assert assembly is not None
        self.assembly = None
        assembly.done(assembly.properties, b"".join(assembly.body))

    def drop_content(self) -> None:
        super().drop_content()
        self.assembly = None

    # -- teardown --------------------------------------------------------------------------

    def close_legacy(self) -> None:
        """The channel closed: the per-class state lets go of what it held."""
        self.assembly = None
        self.return_hook = None
        extras = list(self.extras.values())
        self.extras.clear()
        for extra in extras:
            close = getattr(extra, "close", None)
            if close is not None:
                close()
        self.deliverers.clear()
