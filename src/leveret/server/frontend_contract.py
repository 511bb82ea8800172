"""The contract between the asyncio adapter (``connection.py``) and a protocol front end:
``FrontEnd`` (the surface every front end has), ``FrontEndContext`` (what one is made with),
``FrontEndFactory`` and ``Chooser`` (the header table's lookup, ``frontend.choose``), and
``tick_schedule`` (when a front end's timers next need a ``tick``).

Below every front end and ``frontend.py``, so that a front end which runs another one (the
0-8/0-9 ``tunnel`` class) names the contract without importing the table that lists it;
the chooser itself is handed to it when it is built. Imported by ``frontend.py``,
``connection.py`` and the front ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker, Client
    from leveret.protocol.amqp091.connection import Limits

__all__ = [
    "TICK_EVERY",
    "Chooser",
    "FrontEnd",
    "FrontEndContext",
    "FrontEndFactory",
    "earliest",
    "tick_schedule",
]

# How often a front end that does not say when its timers are due is ticked: often enough
# for heartbeats (half an interval) and close timeouts, and during the handshake for a
# refused login's delay (auth.authn.FAILURE_DELAY), give or take HANDSHAKE_TICK.
TICK_EVERY = 1.0
HANDSHAKE_TICK = 0.25


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

    # A front end may also say when ``tick`` next has something to do (``tick_schedule``):
    #     def next_tick(self, now: float) -> float | None: ...
    # (None: nothing until its state changes). Without it, it is ticked every second.

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


def tick_schedule(front_end: FrontEnd) -> Callable[[float], float | None]:
    """When ``front_end`` next needs a ``tick``, as a function of the time now: its own
    ``next_tick`` where it has one; otherwise every second (every half heartbeat interval
    if shorter; four times a second until the connection is open)."""
    ask: Callable[[float], float | None] | None = getattr(front_end, "next_tick", None)
    if ask is not None:
        return ask

    def every(now: float) -> float:
        heartbeat = front_end.heartbeat
        interval = heartbeat / 2 if heartbeat else TICK_EVERY
        if front_end.client is None:
            interval = HANDSHAKE_TICK
        return now + min(interval, TICK_EVERY)

    return every


def earliest(a: float | None, b: float | None) -> float | None:
    """The earlier of two deadlines, None standing for never."""
    if a is None:
        return b
    return a if b is None or a <= b else b
