"""One AMQP 0-10 session's semantics over the broker core: subscriptions (a ``Consumer`` per
acquiring subscription, a ``Browser`` per not-acquired one) with 0-10 flow control (credit
and window modes, message and byte units), the transfers it sent and what settles them
(``message.accept``/``reject``/``release``/``acquire``), publishing with completion after
the store has what it must keep (the core's confirms), ``tx`` and ``dtx``.

The session outlives its transport: it is the ``context`` of the protocol machine's session
(``protocol/amqp010/session.py``), detached when the connection drops and attached again on
resume, so its subscriptions, unsettled deliveries and branch associations follow it. While
detached it takes no deliveries. Owned by the 0-10 front end's connection
(``connection.py``), which hands it commands (``handlers.py``) and the completions the
client reports.

Byte credit: a transfer costs its header and body octets (Qpid's count), and is sent only
when the credit covers both: an acquiring subscription's consumer asks with the whole
message (``SubscriptionConsumer.can_take``), a browser measures each entry before it sends.
Unlimited byte credit (the common case) costs nothing per message.

No-local (Qpid's queue argument ``no-local``): a message published on the connection of the
queue's exclusive owner, or of a session with an exclusive subscription to it, is dropped
when it reaches a subscriber of that queue instead of being sent (so it never blocks the
ones behind it), wherever it came from (an alternate exchange's reroute included): the
message keeps its publishing connection's token (``Message.origin``).

Alternate exchanges (a 0-10 queue's is the core's ``x-dead-letter-exchange``): when such a
queue is deleted — by ``queue.delete``, with its exclusive owner's session, or as an
auto-delete queue losing its last subscriber — what it held goes there, oldest first:
its ready messages and the ones 0-10 sessions acquired and had not accepted
(``delete_rerouting``; Qpid C++'s behaviour; settling those later changes nothing).

Browsing reads the queue through ``Queue.browse_after``, so a browser sees the paged tail of
a deep queue too (read from its pages in batches of ``BROWSE_BATCH``), and
``message.acquire`` of a browsed entry takes it wherever it is (a paged one is brought in).
"""

from __future__ import annotations

import weakref
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol

from leveret.convert.amqp010 import delivery_parts
from leveret.errors import NotAllowed, NotFound, PreconditionFailed
from leveret.model import settle
from leveret.model.completion import Completion, every
from leveret.model.consumer import UNLIMITED, Browser, Consumer, ConsumerOwner, Source
from leveret.model.publisher import Publisher
from leveret.model.settle import Delivery
from leveret.model.shared_metadata import RecordOwner
from leveret.model.transaction import ACCEPT
from leveret.protocol.amqp010._generated.commands import MessageTransfer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from leveret.model.dtx import Branch, Coordinator
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.transaction import Transaction
    from leveret.model.vhost import VirtualHost
    from leveret.protocol.amqp010.sequence import SequenceSet

__all__ = [
    "BROWSE_BATCH",
    "DLX",
    "UNLIMITED_WIRE",
    "Session",
    "SessionLink",
    "Subscription",
    "delete_rerouting",
]

# The queue argument that carries a 0-10 queue's alternate exchange in the core (a rejected
# message goes there: the core's dead-lettering, RabbitMQ's name).
DLX = "x-dead-letter-exchange"

# A flow value of 2**32 - 1 means "no limit" (spec: message.flow).
UNLIMITED_WIRE = 0xFFFFFFFF
# Entries a browser reads from its queue at a time (pages of a deep queue are read whole).
BROWSE_BATCH = 256
_ACCEPT_EXPLICIT = 0
_ACCEPT_NONE = 1
_PRE_ACQUIRED = 0
_NOT_ACQUIRED = 1


class SessionLink(Protocol):
    """What a session needs of the connection it is attached to."""

    origin: object  # the token its transfers carry (``Message.origin``)

    def send_transfer(
        self, channel: int, command: MessageTransfer, header: bytes, body: bytes
    ) -> int: ...

    def complete(self, channel: int, command_id: int) -> None: ...

    def output_ready(self) -> None: ...


class Subscription(Browser):
    """One ``message.subscribe`` of a session."""

    def __init__(
        self,
        session: Session,
        destination: str,
        queue: Queue,
        *,
        explicit_accept: bool,
        acquire: bool,
    ) -> None:
        self.session = session
        self.destination = destination
        self.queue = queue
        self.explicit_accept = explicit_accept
        self.acquire = acquire
        self.consumer: Consumer | None = None
        # Spec: window mode until set-flow-mode says otherwise; no credit at first.
        self.window = True
        self.byte_credit = 0
        # A browser's own message credit (an acquiring one's is its consumer's) and the
        # sequence number of the last ready entry it saw.
        self.browse_credit = 0
        self.browsed_upto = 0
        self.browsing = False
        self.no_local = _truthy(queue.arguments.get("no-local"))

    def __repr__(self) -> str:
        return f"Subscription({self.destination!r})"

    @property
    def message_credit(self) -> int:
        consumer = self.consumer
        return consumer.credit if consumer is not None else self.browse_credit

    def add_credit(self, messages: int, octets: int) -> None:
        if messages:
            consumer = self.consumer
            current = consumer.credit if consumer is not None else self.browse_credit
            value = (
                UNLIMITED
                if messages == UNLIMITED_WIRE or current >= UNLIMITED
                else (current + messages)
            )
            if consumer is not None:
                consumer.credit = value
            else:
                self.browse_credit = value
        if octets:
            if octets == UNLIMITED_WIRE or self.byte_credit >= UNLIMITED:
                self.byte_credit = UNLIMITED
            else:
                self.byte_credit += octets

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.credit = 0
        self.browse_credit = 0
        self.byte_credit = 0

    def browse(self) -> None:
        self.session.browse(self)


class SubscriptionConsumer(Consumer):
    """The consumer of an acquiring subscription: it takes a message only when its byte
    credit covers the transfer's header and body (the queue asks with the message)."""

    __slots__ = ("subscription",)

    def __init__(
        self,
        subscription: Subscription,
        queue: Source,
        owner: Session,
        *,
        auto_settle: bool,
        exclusive: bool,
        arguments: dict[str, object],
        browses: bool = False,
    ) -> None:
        super().__init__(
            subscription.destination,
            queue,
            owner,
            auto_settle=auto_settle,
            exclusive=exclusive,
            credit=0,
            arguments=arguments,
            browses=browses,
        )
        self.subscription = subscription

    def can_take(self, message: Message) -> bool:
        if self.credit <= 0:
            return False
        sub = self.subscription
        if sub.byte_credit < UNLIMITED:
            header, body = delivery_parts(message, False)  # the flag bit takes no octet
            if sub.byte_credit < len(body):
                return False
            size = len(header) + len(body)
        else:
            size = len(message.body)
        return self.owner.accepts(self, size)


class _Sent(NamedTuple):
    """A transfer this session sent: what window-mode completion gives back."""

    subscription: Subscription
    size: int


class Session(ConsumerOwner):
    """The broker's state of one 0-10 session; see the module docstring."""

    def __init__(
        self,
        vhost: VirtualHost,
        coordinator: Coordinator,
        user: str,
        name: bytes,
    ) -> None:
        self.vhost = vhost
        self.coordinator = coordinator
        self.user = user
        self.name = name
        self.link: SessionLink | None = None
        self.channel = 0
        self.writable = True
        self.closed = False
        # Set by ``close``: done once the queues have let its subscriptions go (a queue led
        # by another node: once its leader has, ``Source.withdrawn``); None: at once.
        self.withdrawn: Completion[None] | None = None
        self.publisher = Publisher(vhost, self)
        self.publisher.select_confirms()
        # (confirm sequence number, command id) of transfers waiting for the store.
        self._waiting: deque[tuple[int, int]] = deque()
        # Command ids completed while detached, for the protocol machine on reattach.
        self.completed_detached: list[int] = []
        self.subscriptions: dict[str, Subscription] = {}
        self._by_consumer: dict[Consumer, Subscription] = {}
        # Transfers sent: acquired and not settled; sent not acquired; counted in a window.
        self.unsettled: dict[int, Delivery] = {}
        self.browsed: dict[int, tuple[Subscription, QueuedMessage]] = {}
        self.windowed: dict[int, _Sent] = {}
        # Exclusive queues declared auto-delete (they go with the session; queue.query says so).
        self.auto_delete_exclusive: set[str] = set()
        # This session as a cluster's records name the owner of its exclusive queues (a
        # compiled session cannot be weakly referenced, as SharedMetadata keeps owners).
        self.record_owner = RecordOwner()
        self.dtx_selected = False
        self.branch: Branch | None = None
        self.branches: set[Branch] = set()
        live = _SESSIONS.get(vhost)
        if live is None:
            live = _SESSIONS[vhost] = set()
        live.add(self)

    def __repr__(self) -> str:
        return f"Session({self.name!r})"

    # -- attachment ----------------------------------------------------------------------

    def attach(self, link: SessionLink, channel: int) -> None:
        self.link = link
        self.channel = channel
        self.redispatch()

    def detach(self) -> None:
        self.link = None

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        if writable:
            self.redispatch()

    def redispatch(self) -> None:
        for sub in list(self.subscriptions.values()):
            if sub.consumer is not None:
                sub.queue.dispatch()
            else:
                self.browse(sub)

    # -- ConsumerOwner -------------------------------------------------------------------

    def accepts(self, consumer: Consumer, size: int) -> bool:
        """``size``: the transfer's octets, header included (``SubscriptionConsumer``)."""
        if self.link is None or not self.writable or self.closed:
            return False
        sub = self._by_consumer.get(consumer)
        return sub is not None and sub.byte_credit >= size and sub.byte_credit > 0

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        sub = self._by_consumer[consumer]
        if consumer.browses:
            # A copy from the leader of a queue led by another node (``subscribe``).
            if not (sub.no_local and _is_local(sub.queue, entry.message)):
                consumer.credit -= 1
                self.browsed[self._send(sub, entry, acquired=False)] = (sub, entry)
            return
        if sub.no_local and _is_local(sub.queue, entry.message):
            if not consumer.auto_settle:
                sub.queue.settle(entry)
            return  # dropped, as Qpid C++ drops it; no credit spent
        consumer.credit -= 1
        command_id = self._send(sub, entry, acquired=True)
        if not consumer.auto_settle:
            self.unsettled[command_id] = Delivery(entry, sub.queue, consumer)

    def consumer_removed(self, consumer: Consumer) -> None:
        # The queue was deleted: the subscription stays the session's until cancelled (Qpid
        # C++; qpid.messaging cancels its subscriptions when it closes), taking nothing.
        sub = self._by_consumer.pop(consumer, None)
        if sub is not None:
            sub.consumer = None

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        return None  # 0-10 subscriptions have no settlement timeout

    def _send(
        self,
        sub: Subscription,
        entry: QueuedMessage,
        *,
        acquired: bool,
        parts: tuple[bytes, bytes] | None = None,
    ) -> int:
        link = self.link
        assert link is not None
        if parts is None:
            parts = delivery_parts(entry.message, entry.redelivered)
        header, body = parts
        command = MessageTransfer(
            destination=sub.destination,
            accept_mode=_ACCEPT_EXPLICIT if sub.explicit_accept else _ACCEPT_NONE,
            acquire_mode=_PRE_ACQUIRED if acquired else _NOT_ACQUIRED,
        )
        command_id = link.send_transfer(self.channel, command, header, body)
        size = len(header) + len(body)
        if sub.byte_credit < UNLIMITED:
            sub.byte_credit = max(0, sub.byte_credit - size)
        if sub.window:
            self.windowed[command_id] = _Sent(sub, size)
        link.output_ready()
        return command_id

    # -- browsing (not-acquired subscriptions) -------------------------------------------

    def browse(self, sub: Subscription) -> None:
        """Send copies of the ready entries ``sub`` has not seen, while it has credit."""
        if (
            sub.browsing
            or sub.consumer is not None
            or sub.queue.deleted
            or self.subscriptions.get(sub.destination) is not sub
        ):
            return
        sub.browsing = True
        try:
            while True:
                if self.link is None or not self.writable or sub.browse_credit <= 0:
                    return
                batch = sub.queue.browse_after(
                    sub.browsed_upto, min(sub.browse_credit, BROWSE_BATCH)
                )
                if not batch:
                    return
                for entry in batch:
                    if self.link is None or not self.writable or sub.browse_credit <= 0:
                        return
                    if sub.no_local and _is_local(sub.queue, entry.message):
                        sub.browsed_upto = entry.seq
                        continue
                    parts = delivery_parts(entry.message, entry.redelivered)
                    if sub.byte_credit < UNLIMITED and (
                        sub.byte_credit <= 0 or sub.byte_credit < len(parts[0]) + len(parts[1])
                    ):
                        return
                    sub.browse_credit -= 1
                    sub.browsed_upto = entry.seq
                    command_id = self._send(sub, entry, acquired=False, parts=parts)
                    self.browsed[command_id] = (sub, entry)
        finally:
            sub.browsing = False

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(
        self,
        queue_name: str,
        destination: str,
        *,
        accept_mode: int,
        acquire_mode: int,
        exclusive: bool,
        arguments: dict[str, object],
    ) -> Subscription:
        if not queue_name:
            raise NotFound("message.subscribe: no queue given")
        queue = self.vhost.queue(queue_name, self)
        if queue.type.offsets:
            # Its consumers choose an offset, which 0-10's subscribe cannot say.
            raise NotAllowed(f"stream queue '{queue_name}' cannot be subscribed to over 0-10")
        if destination in self.subscriptions:
            raise NotAllowed(f"subscription '{destination}' already exists on the session")
        sub = Subscription(
            self,
            destination,
            queue,
            explicit_accept=accept_mode == _ACCEPT_EXPLICIT,
            acquire=acquire_mode != _NOT_ACQUIRED,
        )
        if sub.acquire or queue.forwards:
            # A browser of a queue led by another node is a browsing consumer: its leader
            # sends it copies through the link (``codec.BROWSE``). Unsettled, so that a
            # leader that predates browsing holds what it sends rather than taking it.
            consumer = SubscriptionConsumer(
                sub,
                queue,
                self,
                auto_settle=sub.acquire and not sub.explicit_accept,
                exclusive=exclusive,
                arguments=arguments,
                browses=not sub.acquire,
            )
            queue.add_consumer(consumer)
            sub.consumer = consumer
            self._by_consumer[consumer] = sub
        else:
            queue.check_exclusive_use(exclusive)
            queue.browsers.append(sub)
        self.subscriptions[destination] = sub
        return sub

    def subscription(self, destination: str) -> Subscription:
        sub = self.subscriptions.get(destination)
        if sub is None:
            raise NotFound(f"no subscription '{destination}' on the session")
        return sub

    def cancel(self, destination: str) -> None:
        sub = self.subscription(destination)
        del self.subscriptions[destination]
        self._drop_subscription(sub)

    def _drop_subscription(self, sub: Subscription) -> None:
        consumer = sub.consumer
        if consumer is not None:
            self._by_consumer.pop(consumer, None)
            queue = sub.queue
            if queue.auto_delete and queue.consumers == [consumer] and not consumer.browses:
                # The last subscriber: the queue goes, what it holds to its alternate.
                delete_rerouting(self.vhost, queue, lambda: queue.remove_consumer(consumer))
            else:
                queue.remove_consumer(consumer)
        elif sub in sub.queue.browsers:
            sub.queue.browsers.remove(sub)

    def flow(self, destination: str, unit: int, value: int) -> None:
        sub = self.subscription(destination)
        if unit == 0:
            sub.add_credit(value, 0)
        else:
            sub.add_credit(0, value)
        self._kick(sub)

    def set_flow_mode(self, destination: str, mode: int) -> None:
        sub = self.subscription(destination)
        sub.window = mode == 1

    def flush(self, destination: str) -> Completion[None] | None:
        """Use up the credit on what is there now, then have none (spec: message.flush).
        None: done; else done once the queue handed what it held (a queue led by another
        node asks its leader: ``Source.drain``), the credit given up then."""
        sub = self.subscription(destination)
        consumer = sub.consumer
        if consumer is None:
            self.browse(sub)
            self._zero(sub)
            return None
        pending = sub.queue.drain(consumer)
        if pending is None:
            self._zero(sub)
            return None
        pending.on_done(lambda _done: self._zero(sub))
        return pending

    def stop(self, destination: str) -> None:
        sub = self.subscription(destination)
        self._zero(sub)
        if sub.consumer is not None:
            sub.queue.dispatch()  # a queue led by another node tells its leader

    def _zero(self, sub: Subscription) -> None:
        """No credit, and none coming back from transfers already sent (Qpid C++)."""
        sub.stop()
        windowed = self.windowed
        for command_id in [i for i, sent in windowed.items() if sent.subscription is sub]:
            del windowed[command_id]

    def _kick(self, sub: Subscription) -> None:
        if sub.consumer is not None:
            sub.queue.dispatch()
        else:
            self.browse(sub)

    def completed_by_peer(self, commands: SequenceSet) -> None:
        """The client completed transfers we sent: window mode gives their credit back."""
        windowed = self.windowed
        if not windowed:
            return
        kicked: set[Subscription] = set()
        for command_id in _select(windowed, commands):
            sent = windowed.pop(command_id)
            sub = sent.subscription
            if sub.window and self.subscriptions.get(sub.destination) is sub:
                sub.add_credit(1, sent.size)
                kicked.add(sub)
        for sub in kicked:
            self._kick(sub)

    # -- settling transfers --------------------------------------------------------------

    def accept(self, transfers: SequenceSet) -> None:
        deliveries = [self.unsettled.pop(i) for i in _select(self.unsettled, transfers)]
        for command_id in _select(self.browsed, transfers):
            del self.browsed[command_id]  # not acquired: nothing to accept (spec)
        if not deliveries:
            return
        tx = self._holding_tx()
        if tx is not None:
            for delivery in deliveries:
                tx.settle(ACCEPT, delivery, None)
            return
        settle.accept(deliveries)

    def reject(self, transfers: SequenceSet) -> None:
        deliveries = [self.unsettled.pop(i) for i in _select(self.unsettled, transfers)]
        for command_id in _select(self.browsed, transfers):
            del self.browsed[command_id]
        settle.reject(deliveries)
        self._redispatch_queues(deliveries)

    def release(self, transfers: SequenceSet, *, redelivered: bool = True) -> None:
        """Give the transfers back to their queues; ``redelivered`` False (0-10's
        set-redelivered unset) leaves their redelivered mark as it was."""
        deliveries = [self.unsettled.pop(i) for i in _select(self.unsettled, transfers)]
        for command_id in _select(self.browsed, transfers):
            del self.browsed[command_id]
        settle.release(deliveries, redelivered=redelivered)

    def acquire(self, transfers: SequenceSet) -> Completion[list[int]]:
        """Acquire browsed transfers that are still available: done with their ids, at
        once unless one is of a queue led by another node (its leader is asked:
        ``Queue.claim``)."""
        claims: list[tuple[int, Subscription, Completion[QueuedMessage | None]]] = []
        for command_id in _select(self.browsed, transfers):
            sub, browsed = self.browsed.pop(command_id)
            queue = sub.queue
            if not queue.deleted:
                claims.append((command_id, sub, queue.claim(browsed)))
        done: Completion[list[int]] = Completion()
        answered = every(claim for _, _, claim in claims)
        if answered is None:
            done.resolve(self._acquired(claims))
        else:
            # (A claim that failed is not acquired: ``_acquired`` reads each one's error.)
            answered.on_done(lambda _answered: done.resolve(self._acquired(claims)))
        return done

    def _acquired(
        self, claims: list[tuple[int, Subscription, Completion[QueuedMessage | None]]]
    ) -> list[int]:
        """The transfers ``claims`` took, now unsettled (or accepted, in accept-mode
        none); released at once if the session ended meanwhile."""
        acquired = []
        for command_id, sub, claim in claims:
            entry = claim.result() if claim.error is None else None
            if entry is None:
                continue
            delivery = Delivery(entry, sub.queue, None)
            if self.closed:
                settle.release([delivery])
                continue
            acquired.append(command_id)
            if sub.explicit_accept:
                self.unsettled[command_id] = delivery
            else:
                settle.accept([delivery])
        return acquired

    def _redispatch_queues(self, deliveries: Iterable[Delivery]) -> None:
        for queue in {d.queue for d in deliveries}:
            queue.dispatch()

    def _holding_tx(self) -> Transaction | None:
        branch = self.branch
        if branch is not None:
            return branch.tx
        return self.publisher.tx

    # -- publishing ----------------------------------------------------------------------

    def publish(self, command_id: int, exchange: str, routing_key: str, message: Message) -> bool:
        """Route ``message``; True when the transfer is complete now, False when it
        completes once the store has it (``confirm``)."""
        branch = self.branch
        if branch is not None:
            self.publisher.check(exchange)
            branch.tx.publishes.append((exchange, routing_key, message, False, False))
            return True
        if self.publisher.tx is not None:
            self.publisher.publish(exchange, routing_key, message)
            return True
        confirms = self.publisher.confirms
        assert confirms is not None
        self._waiting.append((confirms.seq + 1, command_id))
        self.publisher.publish(exchange, routing_key, message)
        return False

    def returned(self, reason: str, message: Message) -> None:
        return None  # 0-10 has no returns: an unroutable message is dropped

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        waiting = self._waiting
        while waiting and waiting[0][0] <= upto:
            _seq, command_id = waiting.popleft()
            self.complete(command_id)

    def complete(self, command_id: int) -> None:
        if self.link is not None:
            self.link.complete(self.channel, command_id)
            self.link.output_ready()
        else:
            self.completed_detached.append(command_id)

    def flush_confirms(self) -> None:
        self.publisher.flush_confirms()

    # -- tx ------------------------------------------------------------------------------

    def select_tx(self) -> None:
        if self.dtx_selected:
            raise PreconditionFailed("session is selected for dtx, not tx")
        publisher = self.publisher
        if publisher.tx is None:
            # Transfers before tx.select still complete through the confirms they started.
            publisher.flush_confirms()
            publisher.confirms = None
            publisher.select_tx()

    def tx(self) -> Transaction:
        tx = self.publisher.tx
        if tx is None:
            raise PreconditionFailed("session is not transactional (tx.select first)")
        return tx

    def commit(self, done: Callable[[bool], None]) -> None:
        self.tx().commit(
            self.publisher.route, _apply, self.vhost.journal, done, self.publisher.take_remote
        )

    def rollback(self) -> None:
        held = self.tx().rollback()
        if held:
            settle.release(d for d, _token in held)

    # -- dtx -----------------------------------------------------------------------------

    def select_dtx(self) -> None:
        if self.publisher.tx is not None:
            raise PreconditionFailed("session is selected for tx, not dtx")
        self.dtx_selected = True

    # -- teardown ------------------------------------------------------------------------

    def close(self) -> None:
        """The session ended: cancel its subscriptions, release what it had not settled,
        end its branch associations (rollback-only), delete its exclusive queues."""
        if self.closed:
            return
        self.closed = True
        self.link = None
        consumers = []
        for sub in list(self.subscriptions.values()):
            self._drop_subscription(sub)
            if sub.consumer is not None:
                consumers.append(sub.consumer)
        self.withdrawn = every(consumer.queue.withdrawn(consumer) for consumer in consumers)
        self.subscriptions.clear()
        self._by_consumer.clear()
        for branch in list(self.branches):
            self.coordinator.session_gone(self, branch)
        self.branches.clear()
        self.branch = None
        held = []
        if self.publisher.tx is not None:
            held = [d for d, _token in self.publisher.tx.rollback()]
        self.publisher.close()
        deliveries = held + list(self.unsettled.values())
        self.unsettled.clear()
        self.browsed.clear()
        self.windowed.clear()
        if deliveries:
            settle.release(deliveries)
        vhost = self.vhost
        for queue in list(vhost.owned_queues(self)):
            if queue.config.auto_delete_timeout and queue.name in self.auto_delete_exclusive:
                # Qpid's qpid.auto_delete_timeout: the queue outlives its session that long.
                queue.exclusive_owner = None
                if vhost.shared is not None:
                    vhost.shared.released(queue)  # anyone's on every node meanwhile
                vhost.remove_later(
                    queue, partial(delete_rerouting, vhost, queue, _remover(vhost, queue))
                )
                continue
            delete_rerouting(vhost, queue, _remover(vhost, queue))
        if vhost.shared is not None:
            vhost.shared.owner_gone(self.record_owner)
        live = _SESSIONS.get(vhost)
        if live is not None:
            live.discard(self)


# The open 0-10 sessions of each vhost: a queue's deletion reroutes what they hold of it.
_SESSIONS: weakref.WeakKeyDictionary[VirtualHost, set[Session]] = weakref.WeakKeyDictionary()


def delete_rerouting(vhost: VirtualHost, queue: Queue, delete: Callable[[], object]) -> None:
    """Run ``delete`` (which may delete ``queue``); if it did and the queue has an alternate
    exchange, route there what the queue held: its ready messages and those acquired by
    0-10 sessions and not accepted, in queue order."""
    reroute = rerouting(vhost, queue)
    delete()
    reroute()


def rerouting(vhost: VirtualHost, queue: Queue) -> Callable[[], None]:
    """What ``queue`` holds now (``delete_rerouting``), to route to its alternate exchange
    by the call this answers, once the queue is deleted (nothing when it is not): a cluster
    node's deletion, which this node's model makes once etcd has it."""
    name = queue.arguments.get(DLX)
    entries: list[QueuedMessage] = []
    if isinstance(name, str) and name in vhost.exchanges:
        entries = queue.ready_entries()
        for session in _SESSIONS.get(vhost, ()):
            entries += [d.entry for d in session.unsettled.values() if d.queue is queue]
        entries.sort(key=lambda e: e.seq)

    def reroute() -> None:
        if not queue.deleted or not entries:
            return
        alternate = vhost.exchanges.get(str(name))
        if alternate is None:
            return
        for entry in entries:
            message = entry.message
            for target in vhost.router.route(alternate, message.routing_key, message):
                target.enqueue(message)

    return reroute


def _remover(vhost: VirtualHost, queue: Queue) -> Callable[[], None]:
    return lambda: vhost.remove_queue(queue)


def _truthy(value: object) -> bool:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        return value.lower() not in ("", "false", "0", "no")
    return bool(value)


def _is_local(queue: Queue, message: Message) -> bool:
    """Whether ``message`` was published on the connection of ``queue``'s exclusive owner
    or of an exclusive subscriber (Qpid C++'s ``Queue::isLocal``)."""
    origin = message.origin
    if origin is None:
        return False
    owner = queue.exclusive_owner
    if isinstance(owner, Session) and owner.link is not None and owner.link.origin is origin:
        return True
    for consumer in queue.consumers:
        session = consumer.owner
        if (
            consumer.exclusive
            and isinstance(session, Session)
            and session.link is not None
            and session.link.origin is origin
        ):
            return True
    return False


def _apply(outcome: str, settlements: list[tuple[Delivery, object]]) -> None:
    deliveries = [d for d, _token in settlements]
    if outcome == ACCEPT:
        settle.accept(deliveries)
    else:
        settle.release(deliveries)


def _select(
    held: dict[int, object]
    | dict[int, Delivery]
    | dict[int, _Sent]
    | dict[int, tuple[Subscription, QueuedMessage]],
    ids: SequenceSet,
) -> list[int]:
    """The ids of ``held`` that are in ``ids`` (in ``ids``' order when it is the smaller)."""
    if ids.count() <= len(held):
        return [i for i in ids.ids() if i in held]
    return [i for i in held if i in ids]
