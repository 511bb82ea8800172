"""The contract between the asyncio adapter (``connection.py``) and a protocol front end:
``FrontEnd`` (the surface every front end has), ``FrontEndContext`` (what one is made with),
``FrontEndFactory`` and ``Chooser`` (the header table's lookup, ``frontend.choose``).

Below every front end and ``frontend.py``, so that a front end which runs another one (the
0-8/0-9 ``tunnel`` class) names the contract without importing the table that lists it;
the chooser itself is handed to it when it is built. Imported by ``frontend.py``,
``connection.py``, ``lifecycle.py`` and the front ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker, Client
    from leveret.protocol.amqp091.connection import Limits

__all__ = ["Chooser", "FrontEnd", "FrontEndContext", "FrontEndFactory"]


class FrontEnd(Protocol):
    """One client connection of some protocol, without I/O."""

    on_output: Callable[[], None] | None
    # The model side of the connection once it is open (its vhost, user, exclusive queues).
    client: Client | None
    published: bool
    paced: bool
    blocked: bool
    heartbeat: int
    should_close_transport: bool
    close_reason: str

    @property
    def pending(self) -> bool: ...

    def data_received(self, data: bytes, now: float) -> None: ...

    def run_turn(self) -> None: ...

    def take_output(self, now: float) -> list[bytes]: ...

    def tick(self, now: float) -> None: ...

    def set_writable(self, writable: bool) -> None: ...

    def block(self, reason: str) -> None: ...

    def unblock(self, now: float) -> None: ...

    def close(self, reply_code: int, reply_text: str, now: float) -> None: ...

    def connection_lost(self) -> None: ...


@dataclass(frozen=True)
class FrontEndContext:
    """What a front end is made with: the broker, its users and limits, and the peer."""

    broker: Broker
    users: UserStore
    limits: Limits
    peer: str
    loopback: bool
    now: float
    # The user name the peer's verified TLS client certificate gives (SASL EXTERNAL);
    # None on plain connections and without a verified certificate.
    certificate_identity: str | None = None


FrontEndFactory = Callable[[FrontEndContext], FrontEnd]

# The front end for a connection's first bytes; None while more bytes are needed to tell.
Chooser = Callable[[bytes], FrontEndFactory | None]
