"""The contract between the shell (``shell.py``) and a protocol's front end: ``FrontEnd``
(what each front end implements: its machine and the mapping of its events onto the core)
and ``ShellContext`` (what a connection is made with). The factory types, which name the
shell, are ``shell.py``'s (``FrontEndFactory``, ``Chooser``).

A front end is sans-IO and has no lifecycle of its own: the shell it is made with
(``factory(shell)``) owns the handshake deadline, delayed login refusal, the vhost open and
release, turns, output pacing, the model clock, confirm flushing, deferrals and the
connection's introspection record, and calls the methods below. Below every front end, so
that one that runs another (the 0-8/0-9 ``tunnel`` class) names the contract without
importing the table that lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.protocol.amqp091.connection import Limits
    from leveret.server.shell.info import ChannelInfo

__all__ = ["FrontEnd", "ShellContext"]


class FrontEnd(Protocol):
    """One client connection of one protocol, without I/O and without lifecycle.

    Input comes in two steps: :meth:`receive` decodes bytes into the protocol's units
    (frames, commands, events) and handles none of them; :meth:`run` handles at most
    ``budget`` of them (the shell's fair turn, in the front end's own unit). What is left
    over is ``pending`` until the next turn.

    Optional (read once by ``Shell.attach``, not a member here, so that a front end need
    not name it): ``quiet_turns = True`` says that its turns write only to the shell's
    ``Output`` (``take_output`` takes it) and that :meth:`next_tick` moves earlier only
    along with a write; then after a turn that wrote nothing the adapter neither flushes
    nor asks for the deadline (``Shell.idle_turn``)."""

    # RabbitMQ's name for the protocol and version (``ConnectionInfo.protocol``).
    protocol: str
    # Units handled per turn, and per turn of a publisher the shell paces (one feeding
    # queues whose consumers fall behind).
    turn_budget: int
    paced_turn_budget: int
    # Message bytes waiting in the output past which deliveries pause (``Output``).
    output_high_water: int
    # The memory alarm's block holds this front end's publishes itself (``notify_blocked``)
    # and its socket is still read, for what else it carries: the cluster link, whose
    # consumers' acks and credit the leader needs to drain. Its peer's window bounds what
    # it reads meanwhile. False: the shell stops reading the socket.
    reads_when_blocked: bool
    # The machine's verdict: write what is waiting, then close the socket.
    should_close_transport: bool
    close_reason: str

    @property
    def pending(self) -> bool:
        """Decoded input is waiting for a turn."""
        ...

    @property
    def held_size(self) -> int:
        """Input bytes set aside for held channels (``hold_input``)."""
        ...

    def receive(self, data: bytes, now: float) -> None: ...

    def run(self, budget: int, now: float) -> None: ...

    def take_output(self, now: float) -> list[bytes]:
        """What the machine wrote (the shell's ``Output`` or its own buffer), for one
        ``writelines``."""
        ...

    def next_tick(self, now: float) -> float | None:
        """When the machine's own timers (heartbeats, close time-outs) next need
        :meth:`tick`; None while they need nothing."""
        ...

    def tick(self, now: float) -> None: ...

    def notify_blocked(self, reason: str) -> None:
        """The memory alarm stopped reading this connection: tell the peer if the
        protocol can (0-9-1's connection.blocked)."""
        ...

    def notify_unblocked(self, now: float) -> None: ...

    def writable_changed(self, writable: bool) -> None:
        """Deliveries may (True) or may not (False) be written now, beyond the model
        client's sessions, which the shell tells itself."""
        ...

    def hold_input(self, channel: int | None) -> bool:
        """A handler deferred (``Shell.defer``): keep the further input of ``channel``
        (None: of the whole connection) aside, in order, until :meth:`release_input`. For
        the whole connection the front end stops handling after the unit being handled and
        is not ``pending`` until released; for one channel it may answer False (it cannot
        hold one channel alone), and the shell holds the whole connection instead."""
        ...

    def release_input(self, channel: int | None) -> None:
        """The deferral completed and its reply went out: handle what was held, in order,
        then let the input flow again."""
        ...

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the broker's side (320 on shutdown), in the protocol's words."""
        ...

    def internal_error(self, now: float) -> None:
        """A bug of ours was raised while handling this connection: close it with the
        protocol's internal-error code (the shell logged the traceback)."""
        ...

    def connection_lost(self) -> None:
        """The transport is gone: give back what the protocol's sessions held."""
        ...

    def channel_infos(self) -> list[ChannelInfo]:
        """The connection's channels (or sessions) as ``info.ChannelInfo``."""
        ...


@dataclass(frozen=True)
class ShellContext:
    """What a connection is made with: the broker, its users and limits, and the peer."""

    broker: Broker
    users: UserStore
    limits: Limits
    peer: str
    loopback: bool
    now: float
    # The user name the peer's verified TLS client certificate gives (SASL EXTERNAL);
    # None on plain connections and without a verified certificate.
    certificate_identity: str | None = None
    # How much of half the heartbeat interval an idle connection waits before it sends a
    # heartbeat (0.75 to 1): the adapter spreads it over the connections it accepts, so
    # that a thousand opened together do not write their heartbeats in one turn
    # (``server/heartbeat_phase.py``).
    heartbeat_phase: float = 1.0
