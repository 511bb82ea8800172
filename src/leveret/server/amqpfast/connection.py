"""The broker's AMQP/Fast 0.8a2 front end: ``FastServer``'s events (``protocol/amqpfast``)
mapped onto the core, with the ``FrontEnd`` surface the asyncio adapter drives.

What each RFC 006 notion becomes:

- login and CONNECTION OPEN: the connection's shell (``server/shell/``: PLAIN, a refusal
  answered after the same delay as 0-9-1's; the handshake deadline) opens the vhost named
  by the virtual path (402 INVALID_PATH for an unknown vhost, 403 when the user has no
  access to it, 530 past a connection limit); every operation then asks the connection's
  ``Guard`` first, as the 0-9-1 front end does (below);
- a channel: a 0-9-1 ``Session`` (the same delivery bookkeeping, QoS, settlement and
  transactions); message-nbrs map to the session's delivery tags; CHANNEL ACK settles
  (accept), HANDLE UNGET releases (requeue), a closed handle or channel gives back what it
  held; a transacted channel is a core transaction (COMMIT / ROLLBACK);
- a queue destination: the queue of that name (it must exist: destinations are "managed at
  the server end", 3.5.2.1), sent to through the default exchange; a temporary queue is an
  exclusive queue of this connection, deleted with its channel (3.5.2.2);
- a topic destination: the routing key of a message published to ``amq.topic``; a consumer of
  a topic gets a queue of its own bound to ``amq.topic`` with the destination as binding key:
  exclusive and gone with the handle for a temporary subscription, durable and named
  ``<client-name>.<identifier>`` for a durable one (ended by HANDLE CANCEL);
- HANDLE CONSUME: a consumer with the handle's prefetch as credit (``unreliable``: settled
  as it goes out); HANDLE FLOW pauses and resumes it;
- HANDLE QUERY / BROWSE: a queue's ready messages numbered 1..n in their order.

Permissions (``server/guard.py``, RabbitMQ's check points): CHANNEL OPEN counts against the
user's channel limit; a temporary queue is a queue declaration (configure); HANDLE SEND a
publish to the default exchange (queues) or ``amq.topic`` (topics, with topic permissions on
the destination); HANDLE CONSUME on a queue a consume (read); a topic subscription declares
its queue, binds it to ``amq.topic`` and consumes from it (configure, write/read, topic
read); HANDLE CANCEL of a durable subscription deletes its queue (configure); QUERY and
BROWSE read the queue (read, as basic.get). A refusal closes the handle (or the channel)
with 403, the scope RFC 006 gives a failed handle command.

On a cluster node, a temporary queue, a subscription's queue and its binding go to the
cluster's metadata store (``VirtualHost.shared``) before the model has them, as 0-9-1's
declarations do: the connection's input waits (the shell's deferral) and the command's HANDLE
REPLY is held until they are there (``_after``); so is a consume of a queue led by another
node, until its leader took it (``Source.answer``), so a refusal closes the handle as one
node's does.

Messages are converted to and from the core's 0-9-1 form by ``convert/amqpfast.py``. Sans-IO:
a ``FrontEnd`` of the shell, whose unit of a turn is the machine's event.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from leveret.auth.access import OpenRefused
from leveret.convert.amqpfast import from_message, to_message
from leveret.errors import AMQPError
from leveret.model.completion import every
from leveret.model.consumer import UNLIMITED
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol import sasl
from leveret.protocol.amqpfast import events as ev
from leveret.protocol.amqpfast.server import NEED_DATA, PAUSED, FastServer, OwedReply, State
from leveret.server.amqp091.session import Session
from leveret.server.shell.info import ChannelInfo

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Client
    from leveret.model.completion import Completion
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.vhost import VirtualHost
    from leveret.server.guard import Guard
    from leveret.server.shell.shell import Shell

__all__ = ["FastConnection"]

log = logging.getLogger("leveret.connection")

T = TypeVar("T")

TOPIC_EXCHANGE = "amq.topic"
_numbers = itertools.count(1)
# Events handled per turn.
TURN_EVENTS: Final = 300
PACED_TURN_EVENTS: Final = 30
OUTPUT_HIGH_WATER: Final = 256 * 1024
# OpenRefused.why -> RFC 006's reply code for CONNECTION OPEN.
_OPEN_CODES: Final = {"not_found": 402, "access": 403}


@dataclass
class _Handle:
    channel_id: int
    service: ev.ServiceType
    dest_name: str
    temporary: bool
    consumer_tag: str = ""
    # The queue made for a topic subscription (deleted with the handle unless durable).
    subscription: str = ""
    durable: bool = False
    prefetch: int = 0
    unreliable: bool = False
    # The confirmation of the command waiting for the cluster's metadata store (or a
    # queue's leader), and how many such waits are still ahead of it (``_after``).
    held: OwedReply | None = None
    waits: int = 0


@dataclass
class _Channel:
    session: Session
    sink: _Sink
    # message-nbr -> the session's delivery tag, for deliveries not yet acknowledged.
    tags: dict[int, int] = field(default_factory=dict)
    temporaries: list[str] = field(default_factory=list)


class _Sink:
    """A channel's ``SessionSink``: deliveries become HANDLE NOTIFYs."""

    def __init__(self, conn: FastConnection, channel_id: int) -> None:
        self.conn = conn
        self.channel_id = channel_id

    def deliver(
        self, consumer_tag: str, delivery_tag: int, redelivered: bool, message: Message
    ) -> None:
        self.conn.deliver(self.channel_id, consumer_tag, delivery_tag, redelivered, message)

    def returned(self, reply_code: int, reply_text: str, message: Message) -> None:
        """Nothing is published mandatory: AMQP/Fast has no returns."""

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None:
        """No publisher confirms in AMQP/Fast."""

    def consumer_cancelled(self, consumer_tag: str) -> None:
        self.conn.consumer_gone(consumer_tag)


def _settle(session: Session, tag: int, *, accept: bool) -> None:
    """Acknowledge (accept) or give back (requeue) one delivery of ``session``."""
    try:
        if accept:
            session.ack(tag)
        else:
            session.reject(tag, requeue=True)
    except AMQPError:
        pass  # already settled: a consumer timeout or a closed handle gave it back


class FastConnection:
    """One AMQP/Fast client connection to the broker, without I/O."""

    protocol = "AMQP/Fast 0.8a2"
    turn_budget = TURN_EVENTS
    paced_turn_budget = PACED_TURN_EVENTS
    output_high_water = OUTPUT_HIGH_WATER
    reads_when_blocked = False

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.broker = shell.broker
        self.users = shell.users
        self.peer = shell.peer
        self.number = next(_numbers)
        limits = shell.limits
        self.server = FastServer(
            frame_max=max(limits.frame_max, 1024) if limits.frame_max else 131072,
            channel_max=limits.channel_max,
            # Unique in the cluster, not just on this node: a temporary queue's record is
            # every node's (``_declare_shared``).
            temporary_prefix=f"fast.temp-{self.number}-{uuid.uuid4().hex[:12]}",
            now=shell.created,
            # A HANDLE CLOSE or CHANNEL CLOSE letting go of a consumer of a queue another
            # node leads is answered once that leader has (``_answer_once``).
            broker_answers_closing=True,
        )
        self.should_close_transport = False
        self.close_reason = ""
        self.held_size = 0
        self.channels: dict[int, _Channel] = {}
        self.handles: dict[int, _Handle] = {}
        self._by_tag: dict[str, int] = {}
        self.client_name = ""
        # Input may hold more events than the last turn handled.
        self._more = False
        self._hold_all = False

    @property
    def client(self) -> Client | None:
        return self.shell.client

    @property
    def guard(self) -> Guard | None:
        return self.shell.guard

    # -- FrontEnd -----------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        return self._more and not self._hold_all and not self.should_close_transport

    def receive(self, data: bytes, now: float) -> None:
        self.server.receive_data(data, now)
        self._more = True

    def run(self, budget: int, now: float) -> None:
        server = self.server
        for _ in range(budget):
            if self._hold_all or self.should_close_transport:
                return
            event = server.next_event()
            if event is NEED_DATA or event is PAUSED:
                # PAUSED: a decision is awaited (a login, an open); nothing more can be
                # read until the front end (or the shell, after a refusal's delay) answers.
                self._more = False
                return
            assert isinstance(event, ev.Event)
            self._event(event)

    def take_output(self, now: float) -> list[bytes]:
        out = self.shell.output.take()
        data = self.server.data_to_send()
        if data:
            out.append(data)
        return out

    def next_tick(self, now: float) -> float | None:
        """When ``tick`` next has something to do: heartbeats."""
        return self.server.next_tick()

    def tick(self, now: float) -> None:
        closed = self.server.tick(now)
        if closed is not None:
            self.close_reason = closed.reply_text
            self._release()
            self.should_close_transport = True
        self._wrote()

    def writable_changed(self, writable: bool) -> None:
        """The channels' sessions are the model client's: the shell tells it."""

    def notify_blocked(self, reason: str) -> None:
        """RFC 006 has no blocked notification: the connection is only not read."""

    def notify_unblocked(self, now: float) -> None:
        """See ``notify_blocked``."""

    def hold_input(self, channel: int | None) -> bool:
        if channel is not None:
            return False  # a channel's commands are not held alone: the connection's are
        self._hold_all = True
        return True

    def release_input(self, channel: int | None) -> None:
        self._hold_all = False
        self._more = True

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        self.server.close(reply_code, reply_text)
        self._wrote()

    def internal_error(self, now: float) -> None:
        self.close_reason = "internal error"
        self.server.close(541, "internal error; see the broker log")
        self._release()

    def connection_lost(self) -> None:
        self._release()

    def channel_infos(self) -> list[ChannelInfo]:
        out = []
        for number, channel in sorted(self.channels.items()):
            session = channel.session
            tx = session.publisher.tx
            out.append(
                ChannelInfo(
                    number,
                    session,
                    session.consumers,
                    unacked=len(session.unacked),
                    uncommitted=len(tx.publishes) if tx is not None else 0,
                    prefetch_count=session.prefetch_count,
                    transactional=tx is not None,
                )
            )
        return out

    # -- events ----------------------------------------------------------------------------

    def _wrote(self) -> None:
        self.shell.wrote()

    def _event(self, event: ev.Event) -> None:
        if isinstance(event, ev.MessageReceived):
            self._publish(event)
        elif isinstance(event, ev.Acked):
            self._acked(event.channel_id, event.message_nbrs)
        elif isinstance(event, ev.LoginRequested):
            self._login(event)
        elif isinstance(event, ev.OpenRequested):
            self._open(event)
        elif isinstance(event, ev.ChannelOpened):
            self._channel_opened(event)
        elif isinstance(event, ev.ChannelClosed):
            gone = self._channel_closed(event.channel_id, event.handle_ids)
            if event.by_client:
                self._answer_once(gone, partial(self.server.answer_channel_close, event.channel_id))
        elif isinstance(event, ev.HandleOpened):
            self._handle_opened(event)
        elif isinstance(event, ev.HandleClosed):
            gone = self._handle_closed(event.handle_id, event.unacked)
            if event.by_client:
                self._answer_once(gone, partial(self.server.answer_handle_close, event.handle_id))
        elif isinstance(event, ev.ConsumeRequested):
            self._consume(event)
        elif isinstance(event, ev.CancelRequested):
            self._cancel_subscription(event)
        elif isinstance(event, ev.FlowChanged):
            self._flow(event.handle_id, event.paused)
        elif isinstance(event, ev.UngetRequested):
            self._unget(event.channel_id, event.message_nbr)
        elif isinstance(event, ev.Committed):
            self._commit(event.channel_id)
        elif isinstance(event, ev.RolledBack):
            self.channels[event.channel_id].session.rollback()
        elif isinstance(event, ev.QueryRequested):
            self._query(event)
        elif isinstance(event, ev.BrowseRequested):
            self._browse(event)
        elif isinstance(event, ev.ConnectionClosed):
            self.close_reason = event.reply_text
            gone = self._release()
            if self.server.state is State.CLOSE_RECEIVED:
                self._answer_once(gone, self._answer_close)
            else:
                self.should_close_transport = True

    # -- connection ------------------------------------------------------------------------

    def _login(self, event: ev.LoginRequested) -> None:
        shell = self.shell
        if event.mechanism == sasl.PLAIN:
            login = shell.login(sasl.PLAIN, sasl.plain_response(event.login, event.password))
        else:
            login = shell.login(event.mechanism, b"")  # refused (and logged) by authn
        if login.user is None:
            # Nothing more is read until the refusal goes out, after the delay.
            shell.refuse(login.delay, self._answer_refusal)
            return
        self.server.accept_login()

    def _answer_refusal(self) -> None:
        self.server.refuse_login("ACCESS_REFUSED - login refused")
        self._more = True

    def _open(self, event: ev.OpenRequested) -> None:
        path = event.virtual_path
        self.client_name = event.client_name
        info = self.shell.info
        info.client_properties = {"connection_name": event.client_name} if event.client_name else {}
        info.frame_max = self.server.frame_max
        info.channel_max = self.server.channel_max
        try:
            self.shell.open_vhost(path, label="AMQP/Fast")
        except OpenRefused as exc:
            code = _OPEN_CODES.get(exc.why)
            if code == 402:
                self.server.refuse_open(402, f"INVALID_PATH - vhost {path} not found")
            elif code == 403:
                self.server.refuse_open(403, f"ACCESS_REFUSED - access to vhost '{path}' refused")
            else:
                self.server.refuse_open(exc.reply_code, exc.full_text())
            return
        self.server.accept_open()
        log.info(
            "AMQP/Fast connection %s opened: user '%s', vhost '%s'",
            self.peer,
            info.user,
            event.virtual_path,
        )

    def _release(self) -> Completion[None] | None:
        """Give back what the connection held; returns what its channels' consumers'
        queues let go of later (``Session.withdrawn``)."""
        gone = []
        for channel in self.channels.values():
            channel.session.close()
            gone.append(channel.session.withdrawn)
        self.channels.clear()
        self.handles.clear()
        self.shell.release()  # the client, and the connection's (and channels') limits
        return every(gone)

    def _answer_close(self) -> None:
        """Answer the client's CONNECTION CLOSE, then close the socket."""
        self.server.answer_close()
        self.should_close_transport = True

    # -- channels --------------------------------------------------------------------------

    def _channel_opened(self, event: ev.ChannelOpened) -> None:
        client = self.client
        assert client is not None
        try:
            self.shell.open_channel()  # the user's max-channels
        except AMQPError as exc:
            self.server.close_channel(event.channel_id, exc.reply_code, exc.full_text())
            return
        sink = _Sink(self, event.channel_id)
        session = Session(client.vhost, client, sink, consumer_timeout=None)
        if event.transacted:
            session.select_tx()
        self.channels[event.channel_id] = _Channel(session, sink)

    def _channel_closed(
        self, channel_id: int, handle_ids: tuple[int, ...]
    ) -> Completion[None] | None:
        """The channel closed: what its consumers' queues let go of later."""
        gone = [self._drop_handle(handle_id) for handle_id in handle_ids]
        channel = self.channels.pop(channel_id, None)
        if channel is None:
            return every(gone)
        self.shell.close_channel()
        channel.session.close()  # cancels consumers, requeues what was not acknowledged
        gone.append(channel.session.withdrawn)
        vhost = channel.session.vhost
        for name in channel.temporaries:
            queue = vhost.queues.get(name)
            if queue is not None:
                vhost.remove_queue(queue)
        return every(gone)

    def _answer_once(self, gone: Completion[None] | None, answer: Callable[[], None]) -> None:
        """Answer the client's HANDLE CLOSE, CHANNEL CLOSE or CONNECTION CLOSE (``answer``)
        once ``gone`` is done: consumers of queues other nodes lead let go by those leaders
        (``Source.withdrawn``), so that a consume reaching such a leader another way right
        after the answer is not refused for them (as 0-9-1's cancel-ok waits); at once on
        one node. The connection's input waits meanwhile (the id is not reused)."""
        if gone is None or gone.done:
            answer()
            return

        def late(_done: Completion[None]) -> None:
            answer()
            self._wrote()

        self.shell.defer(gone, late)

    def _acked(self, channel_id: int, nbrs: tuple[int, ...]) -> None:
        channel = self.channels[channel_id]
        for nbr in nbrs:
            tag = channel.tags.pop(nbr, None)
            if tag is not None:
                _settle(channel.session, tag, accept=True)

    def _unget(self, channel_id: int, nbr: int) -> None:
        channel = self.channels[channel_id]
        tag = channel.tags.pop(nbr, None)
        if tag is not None:
            _settle(channel.session, tag, accept=False)

    def _commit(self, channel_id: int) -> None:
        # The CHANNEL REPLY goes out with this turn's output; the store's sync follows.
        self.channels[channel_id].session.commit(lambda ok: None)

    # -- handles ---------------------------------------------------------------------------

    def _handle_opened(self, event: ev.HandleOpened) -> None:
        channel = self.channels[event.channel_id]
        handle = _Handle(event.channel_id, event.service, event.dest_name, event.temporary)
        self.handles[event.handle_id] = handle
        if not (event.temporary and event.service is ev.ServiceType.QUEUE):
            return
        vhost = channel.session.vhost
        name = event.dest_name
        existing = vhost.find_queue(name)
        if existing is not None and existing.exclusive_owner is not self.client:
            self.server.close_handle(
                event.handle_id, 405, f"RESOURCE_LOCKED - queue '{name}' in use"
            )
            return
        try:
            assert self.guard is not None
            # Reopening purges the queue (3.5.2.2): configure, as a declaration.
            self.guard.queue_declare(name, passive=False, arguments=None)
            if existing is not None:
                existing.purge()
                return
            written = self._declare_shared(vhost, name, name, durable=False, exclusive=True)
        except AMQPError as exc:
            self.server.close_handle(event.handle_id, exc.reply_code, exc.full_text())
            return

        def declared() -> None:
            vhost.declare_queue(name, owner=self.client, exclusive=True)
            channel.temporaries.append(name)

        self._after(event.handle_id, written, declared)

    def _declare_shared(
        self, vhost: VirtualHost, name: str, generated: str, *, durable: bool, exclusive: bool
    ) -> Completion[bool] | None:
        """On a cluster node, queue ``name`` (``generated`` when it is "") into the
        cluster's metadata store (``VirtualHost.shared``) before the model has it, as 0-9-1's
        declarations are: its leader chosen by its locator (an exclusive one led here, its
        record naming this connection), every node knowing it. None where there is nothing
        to wait for (no cluster, or this node knows the queue)."""
        shared = vhost.shared
        if shared is None or vhost.find_queue(name or generated) is not None:
            return None
        return shared.declare_queue(
            name,
            generated_name=generated,
            owner=self.client,
            durable=durable,
            exclusive=exclusive,
            auto_delete=False,
            arguments={},
        )

    def _after(
        self, handle_id: int, written: Completion[Any] | None, then: Callable[[], None]
    ) -> None:
        """``then()``, a handle command's work, once ``written`` (a declaration in the
        cluster's metadata store, or a queue's leader's answer) is done; at once when None.
        Meanwhile the connection's input waits (the shell's deferral) and the command's
        HANDLE REPLY is held, sent once ``then`` has run with no further wait of its own;
        an error closes the handle instead, as on one node."""
        handle = self.handles[handle_id]
        if written is None:
            self._attempt(handle_id, handle, then)
            return
        if handle.held is None:
            handle.held = self.server.hold_reply()
        handle.waits += 1

        def go_on(done: Completion[Any]) -> None:
            handle.waits -= 1
            if self.handles.get(handle_id) is not handle:
                return  # gone with its channel or connection meanwhile
            try:
                done.result()
            except AMQPError as exc:
                self._refuse(handle_id, exc)
                return
            self._attempt(handle_id, handle, then)

        self.shell.defer(written, go_on)

    def _attempt(self, handle_id: int, handle: _Handle, then: Callable[[], None]) -> None:
        try:
            then()
        except AMQPError as exc:
            self._refuse(handle_id, exc)
            return
        if not handle.waits and handle.held is not None:
            held, handle.held = handle.held, None
            self.server.send_reply(held)
            self._wrote()

    def _refuse(self, handle_id: int, exc: AMQPError) -> None:
        """Close the handle with ``exc`` (its consumer, if it had one, goes first)."""
        handle = self.handles[handle_id]
        handle.held = None
        channel = self.channels.get(handle.channel_id)
        if handle.consumer_tag:
            self._by_tag.pop(handle.consumer_tag, None)
            if channel is not None and handle.consumer_tag in channel.session.consumers:
                channel.session.cancel(handle.consumer_tag)
            handle.consumer_tag = ""
        self.server.close_handle(handle_id, exc.reply_code, exc.full_text())
        self._wrote()

    def _drop_handle(self, handle_id: int) -> Completion[None] | None:
        """The handle closed: its consumer goes (what its queue lets go of later is
        returned: ``Source.withdrawn``), its non-durable subscription's queue too."""
        handle = self.handles.pop(handle_id, None)
        if handle is None:
            return None
        channel = self.channels.get(handle.channel_id)
        gone = None
        if channel is not None and handle.consumer_tag:
            self._by_tag.pop(handle.consumer_tag, None)
            consumer = channel.session.consumers.get(handle.consumer_tag)
            channel.session.cancel(handle.consumer_tag)
            if consumer is not None:
                gone = consumer.queue.withdrawn(consumer)
        if channel is not None and handle.subscription and not handle.durable:
            vhost = channel.session.vhost
            queue = vhost.queues.get(handle.subscription)
            if queue is not None:
                vhost.remove_queue(queue)
        return gone

    def _handle_closed(self, handle_id: int, unacked: tuple[int, ...]) -> Completion[None] | None:
        """The handle closed: what its consumer's queue lets go of later."""
        handle = self.handles.get(handle_id)
        channel = self.channels.get(handle.channel_id) if handle is not None else None
        # The consumer goes first, so what is given back is not handed to it again.
        gone = self._drop_handle(handle_id)
        if channel is None:
            return gone
        tags = [channel.tags.pop(nbr) for nbr in unacked if nbr in channel.tags]
        for tag in tags:
            _settle(channel.session, tag, accept=False)
        return gone

    def _publish(self, event: ev.MessageReceived) -> None:
        channel = self.channels[event.channel_id]
        handle = self.handles[event.handle_id]
        session = channel.session
        exchange = TOPIC_EXCHANGE if handle.service is ev.ServiceType.TOPIC else ""
        assert self.guard is not None
        try:
            self.guard.publish(exchange, event.destination, session.publisher)
        except AMQPError as exc:
            self.server.close_handle(event.handle_id, exc.reply_code, exc.full_text())
            return
        message = to_message(
            exchange, event.destination, event.header, event.body, session.vhost.timers.wall
        )
        try:
            session.publish(exchange, event.destination, message)
        except AMQPError as exc:
            # The core refused the message (an invalid expiration): as a failed HANDLE SEND.
            self.server.close_handle(event.handle_id, exc.reply_code, exc.full_text())
            return
        self.shell.published_by(session.publisher)

    def _consume(self, event: ev.ConsumeRequested) -> None:
        channel = self.channels[event.channel_id]
        handle = self.handles[event.handle_id]
        queue_name = event.destination
        if handle.service is ev.ServiceType.TOPIC:
            self._after(event.handle_id, None, lambda: self._subscribe(channel, event))
            return
        if channel.session.vhost.find_queue(queue_name) is None:
            self.server.close_handle(event.handle_id, 404, f"NOT_FOUND - no queue '{queue_name}'")
            return
        self._after(event.handle_id, None, lambda: self._start_consume(channel, event, queue_name))

    def _start_consume(
        self, channel: _Channel, event: ev.ConsumeRequested, queue_name: str
    ) -> None:
        handle = self.handles[event.handle_id]
        session = channel.session
        guard = self.guard
        assert guard is not None
        guard.consume(queue_name)
        tag = f"amq.fast-{self.number}-{event.handle_id}"
        handle.consumer_tag = tag
        handle.prefetch = event.prefetch
        handle.unreliable = event.unreliable
        self._by_tag[tag] = event.handle_id
        session.prefetch_count = event.prefetch
        session.consume(queue_name, tag, no_ack=event.unreliable, exclusive=False, arguments={})
        consumer = session.consumers[tag]
        queue = consumer.queue
        # A queue led by another node answers later (``Source.answer``): the HANDLE REPLY
        # once its leader took the consume, so a refusal (403 for an exclusive use) closes
        # the handle as on one node, rather than ending the subscription later as a 404.
        self._after(event.handle_id, queue.answer(consumer), lambda: queue.release(consumer))

    def _subscribe(self, channel: _Channel, event: ev.ConsumeRequested) -> None:
        """The queue of a topic subscription, bound to amq.topic with the destination, then
        consumed from; on a cluster node each of the queue and its binding in the cluster's
        metadata store first."""
        handle_id = event.handle_id
        handle = self.handles[handle_id]
        vhost = channel.session.vhost
        guard = self.guard
        assert guard is not None
        if event.identifier:
            name = generated = f"{self._client_name()}.{event.identifier}"
            guard.queue_declare(name, passive=False, arguments=None)
            durable = True
        else:
            # A temporary subscription: a server-named queue of this connection.
            name, generated = "", guard.queue_declare("", passive=False, arguments=None)
            durable = False
        written = self._declare_shared(
            vhost, name, generated, durable=durable, exclusive=not durable
        )

        def declared() -> None:
            queue = vhost.declare_queue(
                name,
                owner=self.client,
                durable=durable,
                exclusive=not durable,
                generated_name=generated,
            )
            handle.durable = durable
            handle.subscription = queue.name
            guard.queue_bind(queue.name, TOPIC_EXCHANGE, event.destination)
            shared = vhost.shared
            bound = None
            if shared is not None:
                bound = shared.bind(
                    TOPIC_EXCHANGE, "queue", queue.name, event.destination, {}, owner=self.client
                )
            self._after(handle_id, bound, lambda: consume(queue.name))

        def consume(queue: str) -> None:
            vhost.bind_queue(queue, TOPIC_EXCHANGE, event.destination, {}, owner=self.client)
            self._start_consume(channel, event, queue)

        self._after(handle_id, written, declared)

    def _client_name(self) -> str:
        """Durable subscriptions belong to the client name (CONNECTION OPEN), else the user."""
        return self.client_name or self.shell.info.user or "fast"

    def _cancel_subscription(self, event: ev.CancelRequested) -> None:
        channel = self.channels[event.channel_id]
        vhost = channel.session.vhost
        name = f"{self._client_name()}.{event.identifier}"
        assert self.guard is not None
        try:
            self.guard.queue_delete(name)
        except AMQPError as exc:
            self.server.close_handle(event.handle_id, exc.reply_code, exc.full_text())
            return
        handle = self.handles.get(event.handle_id)
        if handle is not None and handle.subscription == name and handle.consumer_tag:
            channel.session.cancel(handle.consumer_tag)
            self._by_tag.pop(handle.consumer_tag, None)
            handle.consumer_tag = handle.subscription = ""
        # (Led by another node, perhaps: its locator placed it, or another node's client of
        # the same name declared it. Then its proxy goes, and its record with it.)
        queue = vhost.find_queue(name)
        if queue is None:
            return
        shared = vhost.shared
        written = shared.delete_queue(queue) if shared is not None else None
        if written is None:
            vhost.remove_queue(queue)
        elif handle is not None:
            # In etcd first: the HANDLE REPLY is held until etcd, this node's model and the
            # queue's leader have lost it.
            self._after(event.handle_id, written, lambda: None)

    def _flow(self, handle_id: int, paused: bool) -> None:
        handle = self.handles.get(handle_id)
        if handle is None or not handle.consumer_tag:
            return
        channel = self.channels[handle.channel_id]
        consumer = channel.session.consumers.get(handle.consumer_tag)
        if consumer is None:
            return
        if paused:
            consumer.credit = 0
        else:
            consumer.credit = (
                UNLIMITED if handle.unreliable else max(handle.prefetch - consumer.unsettled, 0)
            )
            consumer.queue.dispatch()

    def _query(self, event: ev.QueryRequested) -> None:
        if not self._may_read(event.handle_id, event.destination):
            return
        remote = self._remote(event.handle_id, event.destination)
        if remote is not None:
            # Led by another node: its leader's ready messages, counted there.
            self._then(
                event.handle_id,
                remote.inspect(purge=False),
                lambda counts: self._index(event, counts[0]),
            )
            return
        self._index(event, len(self._browsable(event.handle_id, event.destination)))

    def _index(self, event: ev.QueryRequested, count: int) -> None:
        listing = f"1-{count}" if count > 1 else ("1" if count else "")
        self.server.index(event.handle_id, event.message_nbr, listing.encode())

    def _browse(self, event: ev.BrowseRequested) -> None:
        handle = self.handles.get(event.handle_id)
        destination = handle.dest_name if handle else ""
        if not self._may_read(event.handle_id, destination):
            return
        remote = self._remote(event.handle_id, destination)
        if remote is not None and event.message_nbr >= 1:
            # Led by another node: the leader's first message_nbr ready messages, copied
            # through the link (``RemoteQueue.peek``).
            self._then(
                event.handle_id,
                remote.peek(event.message_nbr),
                lambda entries: self._browsed(event, entries),
            )
            return
        self._browsed(event, self._browsable(event.handle_id, destination))

    def _browsed(self, event: ev.BrowseRequested, entries: list[QueuedMessage]) -> None:
        if not 1 <= event.message_nbr <= len(entries):
            self.server.browse_missing(event.handle_id, event.confirm_tag)
            return
        message = entries[event.message_nbr - 1].message
        wall = self.channels[self.handles[event.handle_id].channel_id].session.vhost.timers.wall
        header, body = from_message(message, wall)
        self.server.notify(event.handle_id, header, body, delivered=False)

    def _remote(self, handle_id: int, destination: str) -> RemoteQueue | None:
        """Queue ``destination``'s proxy, when another node leads it."""
        handle = self.handles.get(handle_id)
        if handle is None:
            return None
        queue = self.channels[handle.channel_id].session.vhost.find_queue(destination)
        return queue if isinstance(queue, RemoteQueue) else None

    def _then(self, handle_id: int, asked: Completion[T], then: Callable[[T], None]) -> None:
        """``then(value)`` once ``asked`` (a queue's leader's answer) is done, the
        connection's input waiting meanwhile; its error closes the handle."""

        def go_on(done: Completion[T]) -> None:
            if handle_id not in self.handles:
                return  # gone with its channel or connection meanwhile
            try:
                value = done.result()
            except AMQPError as exc:
                self.server.close_handle(handle_id, exc.reply_code, exc.full_text())
            else:
                then(value)
            self._wrote()

        self.shell.defer(asked, go_on)

    def _may_read(self, handle_id: int, destination: str) -> bool:
        """Browsing reads a queue as basic.get does (read permission); a refusal closes the
        handle."""
        assert self.guard is not None
        try:
            self.guard.get(destination)
        except AMQPError as exc:
            self.server.close_handle(handle_id, exc.reply_code, exc.full_text())
            return False
        return True

    def _browsable(self, handle_id: int, destination: str) -> list[QueuedMessage]:
        """The ready messages of queue ``destination`` (the full name), in order."""
        handle = self.handles.get(handle_id)
        if handle is None:
            return []
        vhost = self.channels[handle.channel_id].session.vhost
        queue = vhost.queues.get(destination)
        return [] if queue is None else queue.ready_entries()

    # -- deliveries ------------------------------------------------------------------------

    def deliver(
        self,
        channel_id: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
    ) -> None:
        handle_id = self._by_tag.get(consumer_tag)
        channel = self.channels.get(channel_id)
        if handle_id is None or channel is None:
            return
        handle = self.handles[handle_id]
        header, body = from_message(message, channel.session.vhost.timers.wall)
        nbr = self.server.notify(
            handle_id,
            header,
            body,
            dest_name=message.routing_key if handle.service is ev.ServiceType.TOPIC else "",
            redelivered=redelivered,
        )
        if not handle.unreliable:
            channel.tags[nbr] = delivery_tag
        self._wrote()

    def consumer_gone(self, consumer_tag: str) -> None:
        """The consumer's queue was deleted: the handle can no longer consume."""
        handle_id = self._by_tag.pop(consumer_tag, None)
        if handle_id is not None and handle_id in self.handles:
            self.handles[handle_id].consumer_tag = ""
            self.server.close_handle(handle_id, 404, "NOT_FOUND - the queue was deleted")
            self._wrote()
