"""Events of the client-role 0-9-1 machine (``client.py``): what the server sent, decoded.

Plain frozen values, importable by anyone; :class:`~leveret.protocol.amqp091.client.
ClientConnection` returns them from ``receive_data`` and ``tick``. Methods keep the spec's
own vocabulary (a generated method class each) instead of one event class per method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from leveret.protocol.amqp091._generated.methods import Method

__all__ = [
    "ContentReceived",
    "Event",
    "HeartbeatMissed",
    "HeartbeatReceived",
    "MethodReceived",
    "ProtocolHeaderReceived",
]


@dataclass(frozen=True, slots=True)
class MethodReceived:
    """A method without content (everything but deliver, get-ok and return)."""

    channel: int
    method: Method


@dataclass(frozen=True, slots=True)
class ContentReceived:
    """A content-carrying method (deliver, get-ok, return) with its header and whole body.

    ``properties`` is the raw property flags + property list as the server sent them
    (decoded only on request, by :meth:`decode_properties`).
    """

    channel: int
    method: Method
    properties: bytes
    body: bytes

    def decode_properties(self) -> BasicProperties:
        return BasicProperties.decode(self.properties)


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    """A heartbeat frame (always on channel 0)."""


@dataclass(frozen=True, slots=True)
class ProtocolHeaderReceived:
    """The server answered our protocol header with its own: it does not speak 0-9-1.

    The connection is over; the server closes the socket.
    """

    data: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatMissed:
    """Nothing came from the server for two heartbeat intervals: drop the socket (spec 4.2.7)."""

    silent_for: float


Event = (
    MethodReceived | ContentReceived | HeartbeatReceived | ProtocolHeaderReceived | HeartbeatMissed
)
