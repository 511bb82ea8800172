"""AMQP 1.0 links over the broker core: a link the broker sends on is a consumer of a queue
(:class:`OutgoingLink`, a ``ConsumerOwner``), a link the broker receives on is a publisher
(:class:`IncomingLink`, with the core's ``Publisher``).

- Outgoing: link credit is the consumer's credit (a ``flow`` sets it; every transfer spends
  one; settling gives none back, unlike 0-9-1's prefetch). A drain hands out what is ready
  and then gives up the rest (``drained``): at once, or once the queue says it handed what
  it held (``Source.drain``: a queue led by another node asks its leader). Sender settle
  mode ``settled`` is at-most-once: the consumer settles automatically and transfers go
  pre-settled; otherwise each delivery stays unsettled in its queue until the peer's
  disposition says accepted (it leaves), rejected (dead-lettered where the queue says),
  released (back to its place, as redelivered), or modified (``settle.modify``: its ``x-``
  message annotations merged into the queue's copy, a failed delivery counted in
  ``delivery-count``, released, or rejected when ``undeliverable-here``, as RabbitMQ 4).
- Copies: a source with ``distribution-mode: copy`` (spec 3.5.3: the messages stay
  available to other links) browses its queue (:class:`CopyLink`, one of the queue's
  ``browsers``; of a queue led by another node, an ``OutgoingLink`` whose consumer
  ``browses``, the leader browsing for it): copies of what the queue holds ready, then of
  what arrives, within the link's credit. A copy takes nothing, so no outcome of it
  changes the queue: ``accepted``, ``released``, ``rejected`` and ``modified`` are all
  taken (answered, as settled) and do nothing (:data:`COPIES`, where a copy's delivery
  settles); a copy is never redelivered by a release, nor dead-lettered by a reject.
- Incoming: every message is published through the core with confirms, so an unsettled
  transfer is settled (``accepted``) once the store has what it routed, ``released`` when
  no queue took it (RabbitMQ 4's answer to an unroutable message), ``rejected`` with the
  error when the publish failed or a queue refused it (``x-overflow reject-publish``).
  Dispositions for contiguous deliveries with one outcome go as one range.

Made by ``session.py``; a link holds its session as ``session_core.SessionCore``; sans-IO
(the machine queues frames, the adapter writes them).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Final

from leveret.convert.amqp10 import (
    FORMAT,
    amqp10_message,
    field_value,
    payload_for_amqp10,
)
from leveret.convert.amqp10_amqp091 import payload_from_amqp091
from leveret.errors import AMQPError, NotFound, PreconditionFailed
from leveret.model import settle
from leveret.model.consumer import Browser, Consumer, ConsumerOwner, Source
from leveret.model.dead_letter import REJECTED
from leveret.model.message import HINT_USER_ID
from leveret.model.publisher import Publisher
from leveret.model.settle import Delivery
from leveret.protocol.amqp10 import (
    Accepted,
    AMQP10Error,
    Error,
    Modified,
    Rejected,
    Released,
    Role,
    TransactionalState,
)
from leveret.server.amqp10.address import AddressError, parse_target
from leveret.server.amqp10.errors import error_for
from leveret.server.amqp10.selector import message_lookup

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.base import Queue
    from leveret.model.queues.fifo import ClassicQueue
    from leveret.protocol.amqp10.events import CreditGranted, MessageReceived
    from leveret.protocol.amqp10.session import Link as WireLink
    from leveret.protocol.amqp10.types import Value
    from leveret.server.amqp10.selector import Selector
    from leveret.server.amqp10.session_core import AttachedLink, SessionCore

log = logging.getLogger("leveret.amqp10")

__all__ = ["COPIES", "CopyLink", "IncomingLink", "OutgoingLink", "SelectorLink"]

_ACCEPTED: Final = Accepted()
_RELEASED: Final = Released()
_new_tuple: Final = tuple.__new__
# Entries a copy link reads from its queue at a time (0-10's ``BROWSE_BATCH``).
BROWSE_BATCH: Final = 256


class _Copies(Source):
    """Where the delivery of a copy settles (``Delivery.queue``): its message was never
    taken from its queue, so whatever the peer's outcome says (accepted, released,
    rejected, modified, in a transaction or not, or the session ending with it
    unsettled) there is nothing to give back, remove or dead-letter."""

    def __init__(self) -> None:
        self.name = ""
        self.vhost_name = ""
        self.deleted = False

    def settle(self, entry: QueuedMessage) -> None:
        return None

    def discard(self, entry: QueuedMessage, reason: str = REJECTED) -> None:
        return None

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        return None

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        return None


COPIES: Final = _Copies()


def _payload(entry: QueuedMessage) -> bytes:
    message = entry.message
    if message.format == FORMAT:
        return payload_for_amqp10(message, entry.redelivered, entry.deliveries)
    return payload_from_amqp091(message, entry.redelivered, entry.deliveries)


def _queue_deleted(session: SessionCore, link: AttachedLink, queue: Queue) -> None:
    """Detach ``link`` because ``queue`` was deleted: amqp:resource-deleted (RabbitMQ 4)."""
    session.link_lost(
        link,
        Error(condition="amqp:resource-deleted", description=f"queue '{queue.name}' was deleted"),
    )


class OutgoingLink(ConsumerOwner):
    """A link the broker sends on: one consumer of one queue."""

    def __init__(
        self,
        session: SessionCore,
        handle: int,
        name: str,
        queue: Queue,
        *,
        settled: bool,
        temporary: bool = False,
        arguments: Mapping[str, object] | None = None,
        browses: bool = False,
    ) -> None:
        self.session = session
        self.handle = handle
        self.name = name
        self.queue = queue
        self.settled = settled
        # A temporary queue made for this link (dynamic node, v1 exchange source): deleted
        # with it.
        self.temporary = temporary
        self.closed = False
        # The machine's end of the link once attached (``Connection.link``): a delivery
        # goes out only while it can take one, even when the events saying it cannot (a
        # detach later in the same read) are not handled yet.
        self.wire: WireLink | None = None
        # Flows granted so far: a drain answered later (a queue led by another node) is
        # completed only if no flow came since.
        self.flows = 0
        if browses:
            # A copy link of a queue led by another node: the leader browses for this
            # consumer (``Consumer.browses``). Unsettled, so that a leader that predates
            # browsing holds what it sends rather than taking it (as 0-10's browser).
            self.consumer = Consumer(
                name, queue, self, auto_settle=False, exclusive=False, credit=0, browses=True
            )
            return
        # ``arguments``: what the queue's type reads (a stream: where the link starts).
        self.consumer = queue.consumer(
            name, self, auto_settle=settled, credit=0, arguments=arguments
        )

    def start(self) -> None:
        self.queue.add_consumer(self.consumer)

    # -- ConsumerOwner -----------------------------------------------------------------

    def accepts(self, consumer: Consumer, size: int) -> bool:
        wire = self.wire
        return (
            self.session.writable
            and not self.closed
            and wire is not None
            and wire.sending
            and wire.credit > 0
        )

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        session = self.session
        message = entry.message
        redelivered = entry.redelivered
        if message.format == FORMAT:
            payload = payload_for_amqp10(message, redelivered, entry.deliveries)
        else:
            payload = payload_from_amqp091(message, redelivered, entry.deliveries)
        consumer.credit -= 1
        delivery_id = session.send(self.handle, payload, self.settled)
        if consumer.browses:
            # A copy from the leader: its settlement changes nothing (``COPIES``).
            if not self.settled:
                session.unsettled[delivery_id] = _new_tuple(
                    Delivery, (entry, COPIES, None, session.timers.now)
                )
            return
        if not self.settled:
            consumer.unsettled += 1
            session.unsettled[delivery_id] = _new_tuple(
                Delivery, (entry, consumer.queue, consumer, session.timers.now)
            )

    def consumer_removed(self, consumer: Consumer) -> None:
        """The queue was deleted: detach with amqp:resource-deleted (RabbitMQ 4)."""
        if not self.closed:
            _queue_deleted(self.session, self, self.queue)

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        """1.0 consumers have no settlement deadline."""

    # -- the link ----------------------------------------------------------------------

    def credit_granted(self, event: CreditGranted) -> None:
        consumer = self.consumer
        consumer.credit = event.credit
        self.flows += 1
        if not event.drain or event.credit <= 0:
            # Told of less credit too: a queue led by another node tells its leader.
            self.queue.dispatch()
            if event.drain:
                self._drained(self.flows)
            return
        pending = self.queue.drain(consumer)
        if pending is None:
            self._drained(self.flows)
            return
        flow = self.flows
        pending.on_done(lambda _done: self._drained(flow))

    def _drained(self, flow: int) -> None:
        """The queue handed what it held for the drain of flow number ``flow``: the credit
        left is given up, unless a later flow came meanwhile (it stands) or the link
        went."""
        if flow != self.flows or self.closed:
            return
        consumer = self.consumer
        wire = self.wire
        if consumer.credit > 0 and wire is not None and wire.sending:
            self.session.drained(self.handle)
        consumer.credit = 0

    def close(self) -> None:
        """The link is detached (or its session ended): stop consuming. Its unsettled
        deliveries stay with the session, which releases them when it ends."""
        if self.closed:
            return
        self.closed = True
        self.queue.remove_consumer(self.consumer)
        if self.temporary and not self.queue.deleted:
            self.session.delete_queue(self.queue)


class _BrowsingLink(Browser):
    """What a link the broker sends on as a browser of its queue (``Queue.browsers``, woken
    when messages become ready) is, a ``SelectorLink`` or a ``CopyLink``: it sends within
    the credit its receiver gives (``_browse``), is detached when its queue is deleted,
    and leaves the queue's browsers when it closes."""

    def __init__(
        self, session: SessionCore, handle: int, name: str, queue: Queue, *, settled: bool
    ) -> None:
        self.session = session
        self.handle = handle
        self.name = name
        self.queue = queue
        self.settled = settled
        self.credit = 0
        self.closed = False
        self.browsing = False
        self.wire: WireLink | None = None  # as OutgoingLink's

    def start(self) -> None:
        self.queue.browsers.append(self)
        self.browse()

    def browse(self) -> None:
        if self.browsing or self.closed:
            return
        if self.queue.deleted:
            # Woken by the deletion (``VirtualHost.remove_queue``): RabbitMQ 4's detach.
            _queue_deleted(self.session, self, self.queue)
            return
        self.browsing = True
        try:
            self._browse()
        finally:
            self.browsing = False

    def _browse(self) -> None:
        raise NotImplementedError

    def credit_granted(self, event: CreditGranted) -> None:
        self.credit = event.credit
        self.browse()
        if event.drain:
            if self.credit > 0 and not self.closed:
                self.session.drained(self.handle)
            self.credit = 0

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self in self.queue.browsers:
            self.queue.browsers.remove(self)


class SelectorLink(_BrowsingLink):
    """A link the broker sends on with a JMS selector (``apache.org:selector-filter:string``):
    not a consumer that the queue hands its head to, but a browser of the queue
    (``Queue.browsers``) that takes (``Queue.acquire``) the ready messages its selector
    matches, in queue order, while it has credit; the others stay for other consumers.

    Woken at every enqueue and requeue, it walks the resident ready messages from the head
    and skips the ones it has judged already (a set of their sequence numbers), so a
    message released back in front of it is seen again. Deliveries are settled like an
    ``OutgoingLink``'s (the session's unsettled map, outcomes through ``settle``)."""

    def __init__(
        self,
        session: SessionCore,
        handle: int,
        name: str,
        queue: ClassicQueue,
        *,
        settled: bool,
        selector: Selector,
    ) -> None:
        super().__init__(session, handle, name, queue, settled=settled)
        # The same queue as a classic one: its ready entries are walked (``_browse``).
        self.classic: ClassicQueue = queue
        self.selector = selector
        self.unmatched: set[int] = set()

    def _browse(self) -> None:
        queue = self.classic
        session = self.session
        ready = queue.ready
        if not isinstance(ready, deque):
            return  # priority levels: the session makes selector links only where selectable()
        unmatched = self.unmatched
        if len(unmatched) > 2 * len(ready) + 64:
            self.unmatched = unmatched = {e.seq for e in ready if e.seq in unmatched}
        matches = self.selector.matches
        wire = self.wire
        if wire is None:
            return
        i = 0
        while (
            self.credit > 0
            and wire.sending
            and wire.credit > 0
            and session.writable
            and not self.closed
            and i < len(ready)
        ):
            entry = ready[i]
            seq = entry.seq
            if seq in unmatched:
                i += 1
                continue
            if not matches(message_lookup(entry.message)):
                unmatched.add(seq)
                i += 1
                continue
            if queue.acquire(entry):
                self._send(entry)
            else:
                i += 1

    def _send(self, entry: QueuedMessage) -> None:
        session = self.session
        self.credit -= 1
        delivery_id = session.send(self.handle, _payload(entry), self.settled)
        if self.settled:
            self.queue.settle(entry)
        else:
            session.unsettled[delivery_id] = _new_tuple(
                Delivery, (entry, self.queue, None, session.timers.now)
            )


class CopyLink(_BrowsingLink):
    """A link the broker sends on whose source says ``distribution-mode: copy``: a browser
    of its queue (``Queue.browsers``, woken when messages become ready), not a consumer.
    While it has credit it sends copies of the ready messages it has not seen, oldest
    first (``Queue.browse_after``: a paged tail too), then of what arrives; those that a
    selector (``apache.org:selector-filter:string``, a JMS ``QueueBrowser``'s) does not
    match are skipped. Nothing is taken: the messages stay for the queue's consumers, and a
    copy's outcome does nothing (``COPIES``). A drain sends what the queue holds up to the
    credit, then gives up the rest. A message handed to a consumer as it arrives is never
    ready, so a copy link does not see it (as a 0-10 browser)."""

    def __init__(
        self,
        session: SessionCore,
        handle: int,
        name: str,
        queue: Queue,
        *,
        settled: bool,
        selector: Selector | None = None,
        temporary: bool = False,
    ) -> None:
        super().__init__(session, handle, name, queue, settled=settled)
        self.selector = selector
        # A dynamic node of this link's own: deleted with it (as ``OutgoingLink``'s).
        self.temporary = temporary
        # The sequence number of the last ready entry it looked at.
        self.upto = 0

    def _sending(self) -> bool:
        wire = self.wire
        return (
            self.credit > 0
            and wire is not None
            and wire.sending
            and wire.credit > 0
            and self.session.writable
            and not self.closed
        )

    def _browse(self) -> None:
        queue = self.queue
        matches = None if self.selector is None else self.selector.matches
        while self._sending():
            batch = queue.browse_after(self.upto, min(self.credit, BROWSE_BATCH))
            if not batch:
                return
            for entry in batch:
                if not self._sending():
                    return
                self.upto = entry.seq
                if matches is None or matches(message_lookup(entry.message)):
                    self._send(entry)

    def _send(self, entry: QueuedMessage) -> None:
        session = self.session
        self.credit -= 1
        delivery_id = session.send(self.handle, _payload(entry), self.settled)
        if not self.settled:
            session.unsettled[delivery_id] = _new_tuple(
                Delivery, (entry, COPIES, None, session.timers.now)
            )

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        if self.temporary and not self.queue.deleted:
            self.session.delete_queue(self.queue)


class IncomingLink:
    """A link the broker receives on: messages are published with the core's
    ``Publisher``; its ``PublishSink`` turns confirms into dispositions."""

    def __init__(
        self,
        session: SessionCore,
        handle: int,
        name: str,
        *,
        exchange: str | None,
        routing_key: str | None,
    ) -> None:
        self.session = session
        self.handle = handle
        self.name = name
        # None: the anonymous terminus (each message's ``to``); a key of None: the message's
        # ``subject`` gives it.
        self.exchange = exchange
        self.routing_key = routing_key
        self.publisher = Publisher(session.vhost, self)
        self.publisher.select_confirms()
        # Publish number (the confirms' sequence) -> delivery-id, for unsettled transfers.
        self.waiting: dict[int, int] = {}
        self._confirmed = 0
        self._released: set[int] = set()
        self.closed = False

    def receive(self, event: MessageReceived) -> None:
        if event.state is not None:
            self._receive_other(event)
            return
        publisher = self.publisher
        confirms = publisher.confirms
        assert confirms is not None
        session = self.session
        seq = 0
        try:
            exchange, routing_key = self._route_of(event.payload)
            # Write permission (cached), the exchange, a topic exchange's key (RabbitMQ's order).
            session.guard.publish(exchange, routing_key, publisher)
            message = amqp10_message(exchange, routing_key, event.payload)
            if message.hints & HINT_USER_ID and session.check_user_id:
                session.check_user(message)
            seq = confirms.seq + 1
            if not event.settled:
                self.waiting[seq] = event.delivery_id
            publisher.publish(exchange, routing_key, message, report_unroutable=True)
        except AMQPError as exc:
            # Refused before or inside the publish: forget its number (never the one
            # before it, still waiting for the store).
            if seq:
                self.waiting.pop(seq, None)
            self._refuse(event, exc)
            return
        session.published(self.publisher)

    def _receive_other(self, event: MessageReceived) -> None:
        """A transfer with a delivery state: in a transaction (``transactional-state``),
        published into it; any other state is not the sender's to set on a first transfer."""
        state = event.state
        session = self.session
        answer: Value
        if not isinstance(state, TransactionalState):
            if not event.settled:
                error = error_for(PreconditionFailed(f"unexpected delivery state {state!r}"))
                session.settle_incoming(event.delivery_id, event.delivery_id, Rejected(error=error))
            return
        try:
            exchange, routing_key = self._route_of(event.payload)
            session.guard.publish(exchange, routing_key, self.publisher)
            message = amqp10_message(exchange, routing_key, event.payload)
            if message.hints & HINT_USER_ID and session.check_user_id:
                session.check_user(message)
            session.transactions.publish(state.txn_id, exchange, routing_key, message)
            answer = TransactionalState(txn_id=state.txn_id, outcome=_ACCEPTED)
        except AMQPError as exc:
            answer = TransactionalState(txn_id=state.txn_id, outcome=Rejected(error=error_for(exc)))
        except AMQP10Error as exc:
            error = Error(condition=exc.condition, description=exc.description)
            answer = TransactionalState(txn_id=state.txn_id, outcome=Rejected(error=error))
        if not event.settled:
            session.settle_incoming(event.delivery_id, event.delivery_id, answer)

    def _refuse(self, event: MessageReceived, exc: AMQPError) -> None:
        if not event.settled:
            self.session.settle_incoming(
                event.delivery_id, event.delivery_id, Rejected(error=error_for(exc))
            )

    def _route_of(self, payload: bytes) -> tuple[str, str]:
        exchange = self.exchange
        routing_key = self.routing_key
        if exchange is not None and routing_key is not None:
            return exchange, routing_key
        to, subject = self.session.to_and_subject(payload)
        if exchange is None:
            if to is None:
                raise NotFound("message without 'to' sent to the anonymous terminus")
            try:
                address = parse_target(to)
            except AddressError as exc:
                raise NotFound(str(exc)) from None
            if address.queue is not None:
                return "", address.queue
            if address.exchange is None:
                raise NotFound(f"'{to}' is not an address to send to")
            exchange, routing_key = address.exchange, address.routing_key
        if routing_key is None:
            routing_key = subject or ""
        return exchange, routing_key

    # -- PublishSink -----------------------------------------------------------------------

    def returned(self, reason: str, message: Message) -> None:
        confirms = self.publisher.confirms
        assert confirms is not None
        self._released.add(confirms.seq)

    def confirm(self, upto: int, *, multiple: bool, ack: bool) -> None:
        first = self._confirmed + 1 if multiple else upto
        if upto > self._confirmed:
            self._confirmed = upto
        waiting = self.waiting
        released = self._released
        run_first = run_last = -1
        run_state: Value = None
        settle_incoming = self.session.settle_incoming
        for seq in range(first, upto + 1):
            delivery_id = waiting.pop(seq, None)
            if delivery_id is None:
                continue
            if seq in released:
                released.discard(seq)
                state: Value = _RELEASED
            else:
                state = _ACCEPTED if ack else Rejected()
            if run_first >= 0 and state is run_state and delivery_id == run_last + 1:
                run_last = delivery_id
                continue
            if run_first >= 0:
                settle_incoming(run_first, run_last, run_state)
            run_first = run_last = delivery_id
            run_state = state
        if run_first >= 0:
            settle_incoming(run_first, run_last, run_state)
        if released:
            self._released = {s for s in released if s > upto}

    def close(self) -> None:
        self.closed = True
        self.publisher.close()


def outcome(state: Value, deliveries: list[Delivery]) -> None:
    """Apply a consumer's outcome to unsettled ``deliveries`` (spec 3.4)."""
    if state is None or isinstance(state, Accepted):
        settle.accept(deliveries)
    elif isinstance(state, Rejected):
        settle.reject(deliveries)
    elif isinstance(state, Modified):
        settle.modify(
            deliveries,
            headers=modified_headers(state.message_annotations),
            failed=bool(state.delivery_failed),
            undeliverable=bool(state.undeliverable_here),
        )
    else:
        settle.release(deliveries)


def modified_headers(annotations: dict[Value, Value] | None) -> dict[str, object] | None:
    """A ``modified`` outcome's message annotations as the core's headers: the ``x-`` keys
    (``x-opt-`` for applications, other ``x-`` ones the broker's, as RabbitMQ 4 takes them);
    others are not message annotations a consumer may set, and are left out."""
    if not annotations:
        return None
    out = {
        str(key): field_value(value)
        for key, value in annotations.items()
        if isinstance(key, str) and key.startswith("x-")
    }
    return out or None


_ROLE_RECEIVER = Role.RECEIVER
