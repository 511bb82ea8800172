"""One client connection's lifecycle, written once for every protocol: ``Shell``.

The asyncio adapter (``server/connection.py``) drives one shell per socket; the shell drives
the connection's front end (``contract.FrontEnd``: one protocol's machine and the mapping of
its events onto the core), chosen from the first bytes. Sans-IO: bytes, ``now`` and the
transport's flow signals in; encoded output, deadlines and "close the socket" out.

What the shell owns, so that no front end writes it again:

- **the handshake deadline**: a connection whose vhost is not open ``HANDSHAKE_TIMEOUT``
  after the accept is dropped (RabbitMQ's ``handshake_timeout``), whatever its protocol,
  even one that sent nothing or only part of a header;
- **login and open**: :meth:`login` (``auth.authn``, the mechanism and user recorded),
  :meth:`refuse` (a refused login answered only after its delay, reading held meanwhile),
  :meth:`open_vhost` (``Access.open`` → the vhost → ``Guard`` → the model ``Client``, or an
  ``OpenRefused`` saying why, which the front end words in its protocol's codes),
  :meth:`open_channel` / :meth:`close_channel` (the user's channel limit) and
  :meth:`release` (the client and the connection's place in the limits given back);
- **turns**: input is decoded by the front end and handled ``turn_budget`` units per turn
  (``paced_turn_budget`` for a publisher feeding queues whose consumers fall behind), so one
  busy connection cannot starve the others of the event loop;
- **output**: the front end writes into the shell's ``Output``; past its high-water mark the
  model client stops taking deliveries until the output is taken (and while the transport's
  own buffer is full, :meth:`set_writable`);
- **the model clock**: ``broker.timers.now`` is set on every input, turn and tick, before
  the front end runs;
- **confirm flushing**: publishers that took a message in a turn (:meth:`published_by`) have
  their confirms flushed once at the turn's end, and decide whether the next turn is paced;
- **heartbeats** for a protocol whose machine has none (:meth:`keep_alive`: the stream
  protocol), a close time-out for any (a connection released on our side is cut
  ``CLOSE_TIMEOUT`` later whatever its machine waits for), and the memory alarm's blocking;
- **deferral** (:meth:`defer`): a handler whose operation completes later (a timer, a write
  to the cluster's metadata store, a queue led by another node) hands the shell a
  ``model.completion.Completion``; that connection's (or channel's) further input waits,
  input past ``HOLD_BOUND`` stays in the transport (reading paused), and when it completes
  the continuation sends the reply and the waiting input is handled;
- **internal errors**: an exception out of the front end is logged once with its traceback
  and the connection is closed with the protocol's internal-error code, never the broker;
- **introspection**: ``info`` (``info.ConnectionInfo``) and :meth:`channels`, which the
  management API, Prometheus and ``leveret ctl`` read.

Compiled: every read and every delivery goes through it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from leveret.auth import authn
from leveret.auth.access import Access, OpenRefused
from leveret.errors import NotAllowed
from leveret.model.completion import Completion
from leveret.protocol.output import Output
from leveret.server.guard import Guard
from leveret.server.shell.info import ConnectionInfo

if TYPE_CHECKING:
    from leveret.auth.authn import Login
    from leveret.auth.users import User
    from leveret.model.broker import Client
    from leveret.model.publisher import Publisher
    from leveret.model.queues.base import Queue
    from leveret.server.shell.contract import FrontEnd, ShellContext
    from leveret.server.shell.info import ChannelInfo

__all__ = [
    "CLOSE_TIMEOUT",
    "FLOW_SHOWN",
    "HANDSHAKE_TIMEOUT",
    "HOLD_BOUND",
    "HOLD_MAX",
    "STALL_RECHECK",
    "STALL_WINDOW",
    "Chooser",
    "FrontEndFactory",
    "OpenRefused",
    "Shell",
]

log = logging.getLogger("leveret.connection")

T = TypeVar("T")

# RabbitMQ's handshake_timeout: the vhost must be open this long after the accept.
HANDSHAKE_TIMEOUT: Final = 10.0
# A connection closed on our side waits at most this long for its peer's answer.
CLOSE_TIMEOUT: Final = 5.0
# Input bytes a connection (or channel) waiting on a deferral may hold before the shell
# stops reading its socket.
HOLD_BOUND: Final = 64 * 1024
# The longest a publisher feeding a queue far behind (``Shell.held``) goes unread at once:
# one turn then, held again if the queue still is. Long enough that a consumer that still
# acks drains the backlog first.
HOLD_MAX: Final = 0.05
# A queue from which nothing departed through this long of holds of this publisher (the
# turns between them included) is taken for one whose consumers stopped
# (``Shell._stalled``), and holds it no more: holding would only slow the publisher. One
# ``HOLD_MAX`` was the test, and a consumer starved of a CPU for 50 ms on a busy machine
# (the Go tool's consumers behind its own ten publishers: scenario e) looked stopped.
STALL_WINDOW: Final = 0.25
# The shortest a queue marked stalled goes without holding this publisher: then, if
# messages departed from it since, it holds it again. Marked until it drained, a queue
# whose consumer paused longer than ``STALL_WINDOW`` (a slow batch) held no publisher
# again, and a publisher faster than its consumer never let it drain.
STALL_RECHECK: Final = 1.0
# A connection held in the last this many seconds shows as "flow" to operators, as
# RabbitMQ's does after its credit flow blocked it (``Shell.state``).
FLOW_SHOWN: Final = 5.0
# Deadlines tested with ">" are due just after them: a tick exactly at one would do nothing.
_PAST: Final = 1e-3


class _Timer:
    """A completion the shell resolves at ``due`` (``Shell.after``)."""

    __slots__ = ("completion", "due")

    def __init__(self, due: float, completion: Completion[None]) -> None:
        self.due = due
        self.completion = completion


class _Continuation:
    """What runs when a deferral's completion is done, and whose input it held."""

    __slots__ = ("channel", "completion", "then")

    def __init__(
        self,
        then: Callable[[Completion[Any]], None],
        completion: Completion[Any],
        channel: int | None,
    ) -> None:
        self.then = then
        self.completion = completion
        self.channel = channel


class Shell:
    """One client connection, from the accept to the close."""

    def __init__(self, context: ShellContext) -> None:
        broker = context.broker
        self.broker = broker
        self.users = context.users
        self.limits = context.limits
        self.peer = context.peer
        self.loopback = context.loopback
        self.certificate_identity = context.certificate_identity
        self.heartbeat_phase = context.heartbeat_phase
        self.timers = broker.timers
        self.created = context.now
        self.now = context.now
        host, _, port = context.peer.rpartition(":")
        if port.isdigit():
            self.info = ConnectionInfo(peer_host=host.strip("[]"), peer_port=int(port))
        else:  # an in-process peer (a shovel's or federation link's): named, no address
            self.info = ConnectionInfo(label=context.peer)
        output = Output()
        output.on_write = self.wrote
        output.on_full = self._output_full
        self.output = output
        self.front: FrontEnd | None = None
        # Set by the adapter: output appeared outside a turn (flush soon); a deferral
        # completed outside a turn (run one soon).
        self.on_output: Callable[[], None] | None = None
        self.on_ready: Callable[[], None] | None = None
        # The model side, from the vhost's open to the release.
        self.user: User | None = None
        self.access: Access | None = None
        self.guard: Guard | None = None
        self.client: Client | None = None
        self.opened = False
        self._released_at: float | None = None
        self._lost = False
        # Turns.
        self._budget = 1
        self._paced_budget = 1
        self.paced = False
        # The queues far behind (``Queue.far_behind``) that publishes of the last turn went
        # to, each with its ``Queue.departed`` when the hold began: while there are any (``held``)
        # the connection is neither read nor run, until ``release_hold`` finds them no
        # longer far behind, or ``HOLD_MAX`` passed (RabbitMQ's credit flow stops such a
        # publisher's reader the same way).
        self._held_by: dict[Queue, int] = {}
        self._held_since = -math.inf
        # Queues from which nothing departed through ``STALL_WINDOW`` of holding this
        # publisher: their consumers are not draining them (stopped, or not acking with
        # their prefetch full), so holding the publisher would only slow it. Not held for
        # again until the queue is no longer far behind, or ``STALL_RECHECK`` after the
        # mark once messages departed from it since.
        # Departures, not the queue's length: other publishers may keep a queue that
        # drains as long as it was (then this one is held on, as they are). Each with
        # when it was marked and its ``Queue.departed`` then.
        self._stalled: dict[Queue, tuple[float, int]] = {}
        # Queues nothing departed from in this publisher's last hold, each with when the
        # first such hold in a row began and its ``Queue.departed`` then: marked stalled
        # once that is ``STALL_WINDOW`` ago with nothing departed since. Forgotten when a
        # hold ends with the queue drained, not looked at each turn: one left behind (its
        # queue deleted, or never held for again) starts afresh at its next quiet hold if
        # anything departed meanwhile.
        self._quiet_holds: dict[Queue, tuple[float, int]] = {}
        # A message was published since the adapter last looked (the memory alarm's).
        self.published = False
        self._publishers: set[Publisher] = set()
        self._last_publisher: Publisher | None = None
        # Flow.
        self.blocked = False
        self._reads_when_blocked = False
        self._transport_paused = False
        self.writable = True
        # Timers and deferrals.
        self._timers: list[_Timer] = []
        self._ready: list[_Continuation] = []
        self._holds = 0  # deferrals holding the whole connection
        self._channel_holds: dict[int, int] = {}
        self._fed_while_held = 0
        # Heartbeats kept by the shell (keep_alive): interval (s), frame, last times.
        self._heartbeat = 0.0
        self._heartbeat_frame = b""
        self.last_received = context.now
        self.last_sent = context.now
        # Closing: the shell's own verdict (a deadline passed), beside the front end's.
        self._must_close = False
        self._reason = ""
        self.internal_errors = 0
        # A front end whose turns write only to ``output`` and whose ``next_tick`` moves
        # earlier only with a write (``quiet_turns``), and whether anything of the shell's
        # own may have moved ``next_deadline`` earlier since the adapter last asked: while
        # neither, a turn that wrote nothing leaves the armed timer as it is (``idle_turn``).
        self._quiet_front = False
        self._deadline_moved = True
        # The front end's ``receive_view`` and ``wants_views`` (optional: 0-9-1's), for
        # reads the adapter hands on as a view of its reused read buffer.
        self._receive_view: Callable[[memoryview, float], None] | None = None
        self._wants_views: Callable[[], bool] | None = None

    # -- the adapter's side ---------------------------------------------------------------

    def attach(self, factory: FrontEndFactory) -> FrontEnd:
        """Make the front end the first bytes chose."""
        front = factory(self)
        self.front = front
        self.info.protocol = front.protocol
        self._budget = front.turn_budget
        self._paced_budget = front.paced_turn_budget
        self.output.high_water = front.output_high_water
        # Optional: a front end that does not say so is asked for its deadline every turn.
        self._quiet_front = getattr(front, "quiet_turns", False) is True
        receive_view = getattr(front, "receive_view", None)
        wants_views = getattr(front, "wants_views", None)
        if callable(receive_view) and callable(wants_views):
            self._receive_view, self._wants_views = receive_view, wants_views
        self._deadline_moved = True
        return front

    def data_received(self, data: bytes, now: float) -> None:
        self.now = self.last_received = now
        self.timers.now = now
        info = self.info
        info.recv_oct += len(data)
        info.recv_cnt += 1
        front = self.front
        # self.finished, without its property's call on every read
        if front is None or self._must_close or front.should_close_transport:
            return
        if self._holds or self._channel_holds:
            self._fed_while_held += len(data)
        output = self.output
        output.quiet = True
        try:
            front.receive(data, now)
            if self._ready:
                self._run_ready(front, now)
            if not self._holds and not self.held:
                front.run(self._paced_budget if self.paced else self._budget, now)
            self._turn_done()
        except Exception:
            self._internal_error(front, now)
        finally:
            output.quiet = False

    def wants_views(self) -> bool:
        """The front end would rather decode the next reads as views of the adapter's
        reused read buffer (``view_received``): it can, and large frames came (0-9-1)."""
        wants_views = self._wants_views
        return wants_views is not None and wants_views()

    def view_received(self, view: memoryview, now: float) -> None:
        """:meth:`data_received` of a view the adapter reuses once this returns, which the
        front end decodes before it returns, keeping nothing of it (only after
        ``wants_views``). The same turn, written out again rather than shared: the extra
        call would be paid by every read of the small-message path."""
        receive_view = self._receive_view
        assert receive_view is not None
        self.now = self.last_received = now
        self.timers.now = now
        info = self.info
        info.recv_oct += len(view)
        info.recv_cnt += 1
        front = self.front
        if front is None or self._must_close or front.should_close_transport:
            return
        if self._holds or self._channel_holds:
            self._fed_while_held += len(view)
        output = self.output
        output.quiet = True
        try:
            receive_view(view, now)
            if self._ready:
                self._run_ready(front, now)
            if not self._holds and not self.held:
                front.run(self._paced_budget if self.paced else self._budget, now)
            self._turn_done()
        except Exception:
            self._internal_error(front, now)
        finally:
            output.quiet = False

    def run_turn(self, now: float) -> None:
        """The next turn: continuations whose completion is done, then waiting input."""
        self.now = now
        self.timers.now = now
        front = self.front
        if front is None or self.finished:
            return
        output = self.output
        output.quiet = True
        try:
            if self._ready:
                self._run_ready(front, now)
            if not self._holds and not self.held and front.pending:
                front.run(self._paced_budget if self.paced else self._budget, now)
            self._turn_done()
        except Exception:
            self._internal_error(front, now)
        finally:
            output.quiet = False

    def release_hold(self, now: float) -> bool:
        """Asked by the adapter every ``HOLD_TICK`` while held: release the connection
        (and say so) once no queue that held it is far behind, or after ``HOLD_MAX`` (a
        consumer that stopped acking must not stop its queue's publishers for good; the
        next turn's publishes hold it again if need be)."""
        if now - self._held_since < HOLD_MAX:
            for queue in self._held_by:
                if queue.far_behind():
                    return False
            if self._quiet_holds:
                for queue in self._held_by:
                    self._quiet_holds.pop(queue, None)  # drained
        else:
            quiet = self._quiet_holds
            for queue, departed in self._held_by.items():
                current = queue.departed()
                if not queue.far_behind() or current > departed:
                    quiet.pop(queue, None)  # drained, or draining
                    continue
                since = quiet.get(queue)
                if since is None or current > since[1]:
                    # The first quiet hold in a row (what departed between the holds
                    # counts: a connection's own consumer acks only between them).
                    quiet[queue] = (self._held_since, current)
                elif now - since[0] >= STALL_WINDOW:
                    del quiet[queue]
                    self._stalled[queue] = (now, current)
        self._held_by.clear()
        return True

    @property
    def held(self) -> bool:
        """A publish of the last turn went to a queue far behind: not read nor run."""
        return bool(self._held_by)

    def state(self, now: float) -> str:
        """The state operators see: the connection's own (``info.state``), but "flow" while
        a running connection is held or was in the last ``FLOW_SHOWN`` seconds."""
        state = self.info.state
        if state == "running" and (self.held or now - self._held_since < FLOW_SHOWN):
            return "flow"
        return state

    @property
    def wants_turn(self) -> bool:
        """Input waits for a turn, the connection is paced, or a continuation is ready."""
        front = self.front
        # self.finished, inline: asked after every read
        if front is None or self._must_close or front.should_close_transport:
            return False
        if self._ready:
            return True
        if self._holds or self.held:
            return False
        return front.pending or self.paced

    @property
    def reading(self) -> bool:
        """Whether the adapter should read the socket: not blocked by the memory alarm,
        not while the transport's own buffer is full, and not holding more input than
        ``HOLD_BOUND`` for a deferral (counted from the last deferral that found no input
        waiting)."""
        if (self.blocked and not self._reads_when_blocked) or self._transport_paused:
            # The peer does not read what we write: neither is it read (RabbitMQ's
            # writer blocks its reader the same way), so it cannot make us buffer.
            return False
        if self.held:
            return False
        if self._holds or self._channel_holds:
            front = self.front
            if front is None:
                return False
            if self._holds and front.pending:
                # Nothing of the connection is handled until the deferral completes, and
                # input read earlier waits already: each deferral in a row (a publisher
                # held by the cluster link's window) would otherwise let in another read.
                return False
            return self._fed_while_held <= HOLD_BOUND and front.held_size <= HOLD_BOUND
        return True

    def take_output(self, now: float) -> list[bytes]:
        front = self.front
        if front is None:
            return []
        try:
            out = front.take_output(now)
        except Exception:
            self._internal_error(front, now)
            out = self.output.take()
        if out:
            self.last_sent = now
            info = self.info
            info.send_cnt += 1
            info.send_oct += sum(map(len, out))
        return out

    def idle_turn(self) -> bool:
        """The turn just run left nothing for the adapter to do after it: no output, no
        close, and no deadline earlier than the one it armed (a quiet front end's next tick
        only moves later without a write, and nothing of the shell's own moved). A lone
        publish on its own socket pays no flush and no deadline for its read (issue 26)."""
        if not self._quiet_front or self._deadline_moved or self.output.frames:
            return False
        front = self.front
        return front is not None and not (self._must_close or front.should_close_transport)

    @property
    def finished(self) -> bool:
        """Nothing more will be read or handled: write what waits, then close."""
        if self._must_close:
            return True
        front = self.front
        return front is not None and front.should_close_transport

    @property
    def should_close_transport(self) -> bool:
        return self.finished

    @property
    def close_reason(self) -> str:
        front = self.front
        if front is not None and front.close_reason:
            return front.close_reason
        return self._reason

    def next_deadline(self, now: float) -> float | None:
        """When :meth:`tick` next has something to do; None: nothing until something
        changes (the adapter asks again after every flush)."""
        self._deadline_moved = False
        if self.finished:
            return None
        front = self.front
        due = front.next_tick(now) if front is not None else None
        if not self.opened and self._released_at is None:
            due = _earliest(due, self.created + HANDSHAKE_TIMEOUT + _PAST)
        if self._timers:
            due = _earliest(due, self._timers[0].due)
        if self._released_at is not None and not self._holds:
            due = _earliest(due, self._released_at + CLOSE_TIMEOUT + _PAST)
        heartbeat = self._heartbeat
        if heartbeat and self._released_at is None:
            due = _earliest(due, self.last_sent + heartbeat / 2)
            due = _earliest(due, self.last_received + 2 * heartbeat + _PAST)
        return due

    def tick(self, now: float) -> None:
        self.now = now
        self.timers.now = now
        if self.finished:
            return
        if self._released_at is None and not self.opened and now - self.created > HANDSHAKE_TIMEOUT:
            log.info("closing connection %s: handshake timeout", self.peer)
            self._close_now("handshake timeout")
            return
        released = self._released_at
        front = self.front
        # A machine with a close deadline of its own (0-9-1 leaves the socket to the client
        # after close-ok, for up to 30 s as RabbitMQ does) closes by it instead.
        if (
            released is not None
            and not self._holds
            and now - released > CLOSE_TIMEOUT
            and (front is None or front.next_tick(now) is None)
        ):
            self._close_now(self.close_reason or "close timeout")
            return
        if front is None:
            return
        output = self.output
        output.quiet = True
        try:
            self._fire_timers(now)
            if self._heartbeat and self._released_at is None:
                self._keep_alive(now)
            if not self.finished:
                front.tick(now)
            if self._ready:
                self._run_ready(front, now)
                if not self._holds and front.pending:
                    front.run(self._paced_budget if self.paced else self._budget, now)
            self._turn_done()
        except Exception:
            self._internal_error(front, now)
        finally:
            output.quiet = False

    def set_writable(self, writable: bool, now: float | None = None) -> None:
        """The transport's buffer crossed its high (False) or low (True) water mark;
        ``now`` is the clock of that event (deliveries may follow it)."""
        if now is not None:
            self.now = now
            self.timers.now = now
        self._transport_paused = not writable
        self._update_writable()

    def block(self, reason: str) -> None:
        """The memory alarm: stop reading this connection (the adapter does), and tell the
        peer where the protocol can."""
        if self.blocked:
            return
        self.blocked = True
        if self.opened:
            self.info.state = "blocked"
        front = self.front
        if front is not None:
            self._reads_when_blocked = front.reads_when_blocked
            front.notify_blocked(reason)

    def unblock(self, now: float) -> None:
        if not self.blocked:
            return
        self.blocked = False
        self.now = now
        self.timers.now = now
        self.last_received = now  # we were not reading: the silence was ours
        self._deadline_moved = True
        if self.opened and self._released_at is None:
            self.info.state = "running"
        front = self.front
        if front is not None:
            front.notify_unblocked(now)

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the broker's side (320 on shutdown)."""
        self.now = now
        self.timers.now = now
        front = self.front
        if front is None:
            self._close_now(reply_text)
            return
        try:
            front.close(reply_code, reply_text, now)
        except Exception:
            self._internal_error(front, now)
        if self._released_at is None:
            self._released_at = now
            self._deadline_moved = True
        self.info.state = "closing"

    def connection_lost(self, now: float | None = None) -> None:
        """The socket is gone; ``now`` is the clock of that event (what the connection held
        goes back to its queues, which may deliver it at once)."""
        if now is not None:
            self.now = now
            self.timers.now = now
        self._lost = True
        front = self.front
        if front is not None:
            try:
                front.connection_lost()
            except Exception:
                self.internal_errors += 1
                log.exception("internal error on connection %s while closing it", self.peer)
        self.release()
        self._timers.clear()
        self._ready.clear()

    # -- the front end's side: login, open, release ----------------------------------------

    def login(self, mechanism: str, response: bytes | bytearray | memoryview) -> Login:
        """``auth.authn.login`` from this peer; the user and mechanism are recorded when it
        succeeds."""
        outcome = authn.login(
            self.users,
            mechanism,
            response,
            loopback=self.loopback,
            peer=self.peer,
            certificate_identity=self.certificate_identity,
        )
        if outcome.user is not None:
            self.user = outcome.user
            self.info.auth_mechanism = outcome.mechanism
            self.info.user = outcome.user.name
        return outcome

    def refuse(self, delay: float, answer: Callable[[], None]) -> None:
        """A refused login: its answer (``answer``: the protocol's close, or dropping the
        socket) goes out ``delay`` seconds from now, so that every guess costs that long;
        until then no more input is handled."""
        self.defer(self.after(delay), lambda _done: answer())

    def open_vhost(self, name: str, *, label: str = "") -> Client:
        """Open vhost ``name`` for the logged-in user: RabbitMQ's checks in its order
        (``Access.open``: the node's connection limit, the vhost, the user's access to it,
        the vhost's and the user's connection limits). Raises ``OpenRefused`` (530 with
        RabbitMQ's text, and ``why`` for the protocols that word each reason their own
        way); otherwise the connection counts against the limits, has its ``guard`` and
        model ``client`` until :meth:`release`, and its handshake is over. ``label``: how
        the client names itself (the model client is called ``peer (label)``)."""
        user = self.user
        if user is None:
            raise OpenRefused("access", NotAllowed("no login"))
        access = Access.open(self.users, user, name, peer=self.peer)
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            access.close()
            raise OpenRefused("not_found", NotAllowed(f"vhost {name} not found"))
        self.access = access
        self.guard = Guard(access, vhost)
        client_name = f"{self.peer} ({label})" if label else self.peer
        client = self.broker.connect(vhost, user.name, client_name)
        client.writable = self.writable
        self.client = client
        self.opened = True
        info = self.info
        info.vhost = name
        info.user = user.name
        info.state = "blocked" if self.blocked else "running"
        return client

    def open_channel(self) -> None:
        """A channel (or session) opens: the user's channel limit (raises its 530)."""
        access = self.access
        if access is not None:
            access.open_channel()

    def close_channel(self) -> None:
        access = self.access
        if access is not None:
            access.close_channel()

    def release(self) -> None:
        """Give back what the connection held in the broker: the model client (its
        sessions and exclusive queues) and its place in the connection and channel limits.
        Idempotent; the connection is closing from here."""
        if self._released_at is None:
            self._released_at = self.now
            self._deadline_moved = True
            self.info.state = "closing"
        client = self.client
        if client is not None:
            self.client = None
            client.close()
        access = self.access
        if access is not None:
            self.access = None
            access.close()

    # -- the front end's side: turns, output, heartbeats -------------------------------------

    def published_by(self, publisher: Publisher) -> None:
        """``publisher`` took a message in this turn: its confirms go out at the turn's end
        (with those of every other message of the turn), and it may pace the next turn.
        A publisher whose message went to a leader on another node that has a window of
        publishes still to handle (``Publisher.wait``): no more of this connection's input
        is handled until it has (a deferral), which backs the publisher up to its socket."""
        self.published = True
        if publisher is not self._last_publisher:
            self._last_publisher = publisher
            self._publishers.add(publisher)
        wait = publisher.wait
        if wait is not None:
            publisher.wait = None
            self.defer(wait, _go_on)

    def wrote(self) -> None:
        """Output appeared: outside a turn, the adapter flushes soon."""
        if not self.output.quiet:
            notify = self.on_output
            if notify is not None:
                notify()

    def keep_alive(self, interval: float, frame: bytes) -> None:
        """Heartbeats for a protocol whose machine has none: ``frame`` is written when
        nothing was for ``interval / 2`` seconds, and the connection is dropped after two
        silent intervals (0: none)."""
        self._heartbeat = interval
        self._heartbeat_frame = frame
        self._deadline_moved = True

    def after(self, delay: float) -> Completion[None]:
        """A completion resolved ``delay`` seconds from now (by a tick)."""
        done: Completion[None] = Completion()
        timer = _Timer(self.now + delay, done)
        timers = self._timers
        timers.append(timer)
        timers.sort(key=_due)
        self._deadline_moved = True
        return done

    def defer(
        self,
        completion: Completion[T],
        then: Callable[[Completion[T]], None],
        *,
        channel: int | None = None,
    ) -> None:
        """``completion``'s operation finishes later: until it is done, no more input of
        this connection (or only of ``channel``, where the protocol can hold one channel)
        is handled; then ``then(completion)`` runs in a turn (it sends the reply, or the
        error ``completion.result()`` raises) and the held input is handled after it.
        A completion done already runs ``then`` at once."""
        if completion.done:
            then(completion)
            return
        front = self.front
        if front is None:
            raise RuntimeError("defer() before a front end is attached")
        scope = channel
        if scope is not None and scope not in self._channel_holds and not front.hold_input(scope):
            scope = None  # the protocol cannot hold one channel: hold them all
        if not self._holds and not self._channel_holds and not front.pending:
            # HOLD_BOUND counts from here. Not while input read earlier still waits (a
            # publisher held by the cluster link's window, again and again): each deferral
            # would let in another read's worth.
            self._fed_while_held = 0
        if scope is None:
            if not self._holds:
                front.hold_input(None)
            self._holds += 1
        else:
            self._channel_holds[scope] = self._channel_holds.get(scope, 0) + 1
        continuation = _Continuation(then, completion, scope)
        completion.on_done(lambda _done: self._completed(continuation))

    # -- internals ---------------------------------------------------------------------------

    def _completed(self, continuation: _Continuation) -> None:
        if self._lost:
            return
        self._ready.append(continuation)
        if not self.output.quiet:
            # Done outside a turn (a reply from elsewhere): the adapter runs one soon.
            notify = self.on_ready
            if notify is not None:
                notify()

    def _run_ready(self, front: FrontEnd, now: float) -> None:
        while self._ready:
            continuation = self._ready.pop(0)
            channel = continuation.channel
            released = False
            if channel is None:
                self._holds -= 1
                released = not self._holds
            else:
                left = self._channel_holds[channel] - 1
                if left:
                    self._channel_holds[channel] = left
                else:
                    del self._channel_holds[channel]
                    released = True
            continuation.then(continuation.completion)
            # A continuation may defer again (a declaration written to the cluster, then
            # the counts of a queue another node leads): the new hold stands.
            held = self._holds if channel is None else channel in self._channel_holds
            if released and not held and not self.finished:
                front.release_input(channel)
        if not self._holds and not self._channel_holds and not front.pending:
            self._fed_while_held = 0
        if self._released_at is not None:
            # A close that waited for a deferral (a refused login's answer) starts now.
            self._released_at = now
        # A hold let go may bring the close deadline back (it waits for no deferral).
        self._deadline_moved = True

    def _fire_timers(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0].due <= now:
            timers.pop(0).completion.resolve(None)

    def _keep_alive(self, now: float) -> None:
        heartbeat = self._heartbeat
        if self.blocked:
            self.last_received = now  # not reading: heartbeats cannot arrive
        if now - self.last_received > 2 * heartbeat:
            log.info(
                "closing connection %s: missed heartbeats from client, timeout: %ds",
                self.peer,
                int(heartbeat),
            )
            self._close_now("missed heartbeats from client")
            self.release()
        elif now - self.last_sent >= heartbeat / 2:
            self.output.append(self._heartbeat_frame)
            self.last_sent = now

    def _turn_done(self) -> None:
        publishers = self._publishers
        paced = False
        stalled = self._stalled
        if stalled:
            # Drained below the hold (or gone), or draining again: held for again if it is
            # (still) far behind.
            now = self.now
            for drained in [
                q
                for q, (marked, departed) in stalled.items()
                if not q.far_behind() or (now - marked >= STALL_RECHECK and q.departed() > departed)
            ]:
                del stalled[drained]
        if publishers:
            for publisher in publishers:
                publisher.flush_confirms()
                if publisher.feeds_backlog:
                    publisher.feeds_backlog = False
                    paced = True
                    queue = publisher.feeds_far_backlog
                    if queue is not None:
                        publisher.feeds_far_backlog = None
                        # The cluster link reads on for the acks and credit it carries
                        # for every queue (a window bounds its publishes), as it does when
                        # blocked; a queue stopped draining is held for no more.
                        if self._reads_when_blocked or queue in stalled:
                            continue
                        held_by = self._held_by
                        if not held_by:
                            self._held_since = self.now
                        if queue not in held_by:
                            held_by[queue] = queue.departed()
            publishers.clear()
            self._last_publisher = None
        self.paced = paced

    def _output_full(self, full: bool) -> None:
        self._update_writable()

    def _update_writable(self) -> None:
        writable = not (self._transport_paused or self.output.full)
        if writable == self.writable:
            return
        self.writable = writable
        client = self.client
        if client is not None and client.writable != writable:
            client.set_writable(writable)
        front = self.front
        if front is not None:
            front.writable_changed(writable)

    def _close_now(self, reason: str) -> None:
        """Close the socket (after what waits is written), for a reason of the shell's."""
        self._must_close = True
        self._deadline_moved = True
        if not self._reason:
            self._reason = reason
        self.info.state = "closing"
        self.release()

    def _internal_error(self, front: FrontEnd, now: float) -> None:
        self.internal_errors += 1
        log.exception("internal error on %s connection %s", self.info.protocol, self.peer)
        self._ready.clear()
        self._holds = 0
        self._channel_holds.clear()
        self._publishers.clear()
        self._last_publisher = None
        try:
            front.internal_error(now)
        except Exception:
            log.exception("connection %s: its internal error could not be sent", self.peer)
        # The front end's state may be anything now: nothing more is handled; the close it
        # wrote goes out, then the socket closes (as 0-9-1's 541 always did).
        self._must_close = True
        self._reason = self._reason or "internal error"
        self.release()

    # -- introspection -----------------------------------------------------------------------

    def channels(self) -> list[ChannelInfo]:
        front = self.front
        return front.channel_infos() if front is not None and self.opened else []


def _go_on(_room: Completion[None]) -> None:
    """A held publisher's link has room again: its input is handled (nothing to reply)."""


def _due(timer: _Timer) -> float:
    return timer.due


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


# What makes a connection's front end, given its shell (``server/frontend.py``'s table).
FrontEndFactory = Callable[[Shell], "FrontEnd"]

# The front end for a connection's first bytes; None while more bytes are needed to tell.
Chooser = Callable[[bytes], FrontEndFactory | None]
