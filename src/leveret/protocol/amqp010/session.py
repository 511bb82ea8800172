"""AMQP 0-10 session state and the table of sessions that outlive their transport.

Imported by the connection machine and by a front end (which keeps one
:class:`SessionTable` per broker and hands it to every server connection).

A session (spec class ``session``) is named, scoped to an authenticated principal, and
attached to at most one channel of one connection at a time.  It is both a sender and a
receiver of commands:

* as **sender** it numbers the commands it sends (``next_out``), keeps each one until the
  peer reports it complete (``unacked``: the segments as sent, so they can be replayed after
  a dropped connection), and must send ``session.command-point`` before the first command
  on each newly attached transport;
* as **receiver** it numbers incoming commands from the peer's ``command-point``
  (``next_in``), remembers the highest id seen (``highest_in``) so that commands replayed
  after a resume are recognised and not executed twice, and tracks which commands are still
  incomplete and which completed ids the peer does not yet know about (``completed``,
  trimmed by ``session.known-completed``).

Detached sessions whose granted ``timeout`` (seconds) is non-zero stay in the table until
``detached_at + timeout``; a later ``session.attach`` of the same name resumes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from leveret.protocol.amqp010.sequence import SequenceSet, serial_lt

__all__ = ["Attachment", "Sent", "Session", "SessionTable"]


@dataclass(frozen=True, slots=True)
class Sent:
    """A command as sent: its encoded command segment, header segment and body."""

    segment: bytes
    header: bytes | None
    body: bytes | None


class Attachment(Protocol):
    """The connection a session is attached to, as another connection sees it: the
    ``Connection`` machine (``connection.py``, which imports this module) is the one."""

    def take_over(self, channel: int, now: float) -> None:
        """Another connection force-attached the session on ``channel``: detach it here."""
        ...


@dataclass(eq=False, slots=True)
class Session:
    """The state of one session (see the module docstring)."""

    name: bytes
    principal: str = ""
    timeout: int = 0
    # -- sender side
    next_out: int = 0
    unacked: dict[int, Sent] = field(default_factory=dict)
    needs_command_point: bool = True
    # -- receiver side
    next_in: int | None = None
    highest_in: int | None = None
    incomplete: SequenceSet = field(default_factory=SequenceSet)
    completed: SequenceSet = field(default_factory=SequenceSet)
    sync_requested: set[int] = field(default_factory=set)
    pending_syncs: list[int] = field(default_factory=list)
    errored: bool = False
    # -- attachment
    connection: Attachment | None = None
    channel: int | None = None
    detached_at: float | None = None
    context: object = None
    """Free for the owner: the front end keeps its per-session state (subscriptions,
    unaccepted deliveries) here so that it follows the session across connections."""

    @property
    def attached(self) -> bool:
        return self.connection is not None

    def is_duplicate(self, command_id: int) -> bool:
        """Whether an incoming id was already received (a replay after a resume)."""
        return self.highest_in is not None and not serial_lt(self.highest_in, command_id)


class SessionTable:
    """Sessions by (principal, name): attached ones, and detached ones awaiting resume."""

    __slots__ = ("_sessions",)

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, bytes], Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, principal: str, name: bytes) -> Session | None:
        return self._sessions.get((principal, name))

    def add(self, session: Session) -> None:
        self._sessions[session.principal, session.name] = session

    def discard(self, session: Session) -> None:
        if self._sessions.get((session.principal, session.name)) is session:
            del self._sessions[session.principal, session.name]

    def next_expiry(self) -> float | None:
        """When the next detached session expires, if any does."""
        times = [
            s.detached_at + s.timeout for s in self._sessions.values() if s.detached_at is not None
        ]
        return min(times, default=None)

    def expire(self, now: float) -> list[Session]:
        """Remove and return the detached sessions whose timeout has passed at ``now``.

        Their owner releases what they held (the messages they had not accepted, say).
        """
        gone = [
            s
            for s in self._sessions.values()
            if s.detached_at is not None and s.detached_at + s.timeout <= now
        ]
        for s in gone:
            del self._sessions[s.principal, s.name]
        return gone
