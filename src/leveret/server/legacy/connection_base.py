"""What the 0-8/0-9 front end's channel and class modules ask of their connection:
``LegacyConnectionBase``, the base of ``connection.LegacyConnection`` (an
``AMQP091Connection``): the connection's ``Dialect``, the output in the version's own codec
(``send_method``, ``send_legacy``, ``send_legacy_at``, ``send_legacy_content``) and the
front-end chooser a tunnel runs its connection with (``frontend.choose``, handed in).

It stands below ``channel.py`` and the class modules, so that a channel holds its connection
without importing the module that makes the channels. Compiled (the channel and connection
are, and an interpreted class cannot be a compiled one's base). Imported by ``channel.py``,
``connection.py`` and the class modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.protocol.amqp091 import framing
from leveret.server.amqp091.connection import AMQP091Connection

if TYPE_CHECKING:
    from leveret.protocol.amqp091._generated import methods as m
    from leveret.server.legacy.dialects import Dialect
    from leveret.server.shell.shell import Chooser, Shell

__all__ = ["LegacyConnectionBase"]


class LegacyConnectionBase(AMQP091Connection):
    """A 0-8/0-9 connection as its channels see it: its dialect and its output."""

    # Tunnels write and keep timers of their own (connection.py's take_output, next_tick):
    # the shell asks for both after every turn.
    quiet_turns = False

    def __init__(self, shell: Shell, dialect: Dialect, *, choose: Chooser) -> None:
        super().__init__(shell)
        self.protocol = f"AMQP {dialect.name}"
        self.dialect = dialect
        # The front end for a tunnel's first octets (tunnel.py): the listener's own table.
        self.choose = choose
        # The broker-wide state of the older classes (file staging areas, message
        # references), kept on the broker object so that it outlives a connection.
        self.legacy_state: Any = None

    # -- output ----------------------------------------------------------------------------

    def send_method(self, channel_id: int, method: m.Method) -> None:
        encode = self.dialect.outbound.get(method.INDEX)
        payload = method.encode() if encode is None else encode(method)
        if not payload:
            return
        self.output.append(framing.encode_method_frame(channel_id, payload))

    def send_method_at(self, mark: int, channel_id: int, method: m.Method) -> None:
        # Translated as ``send_method`` is (0-8's connection.close-ok is 10/61, not 10/51).
        encode = self.dialect.outbound.get(method.INDEX)
        payload = method.encode() if encode is None else encode(method)
        if payload:
            self.output.insert(mark, framing.encode_method_frame(channel_id, payload))

    def send_legacy(self, channel_id: int, payload: bytes) -> None:
        """A method of the version's own codec, encoded by the caller."""
        self.output.append(framing.encode_method_frame(channel_id, payload))

    def send_legacy_at(self, mark: int, channel_id: int, payload: bytes) -> None:
        """``send_legacy`` before what was queued since ``output_mark()`` gave ``mark`` (a
        consume-ok that must precede the first delivery)."""
        self.output.insert(mark, framing.encode_method_frame(channel_id, payload))

    def send_legacy_content(
        self, channel_id: int, payload: bytes, class_id: int, raw_properties: bytes, body: bytes
    ) -> None:
        """A content-carrying method of the version's own codec (class ``class_id``) with
        its header and body frames, split at the negotiated frame size."""
        self.send_encoded(
            framing.encode_message_frames(
                channel_id, payload, class_id, body, raw_properties, self.frame_max
            )
        )
