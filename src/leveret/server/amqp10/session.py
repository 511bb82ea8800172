"""One AMQP 1.0 session of the broker's 1.0 front end: its links (what each attach
resolves to in the broker), its unsettled outgoing deliveries (delivery-id → the core's
``Delivery``; the machine only moves the ranges) and the peer's dispositions applied to
them. The model side of a session: ``Client.attach`` holds it (``close``, ``set_writable``).

Attaches are resolved with RabbitMQ's addresses (``address.py``; v1's queue addresses
declare their queue first): a source names a queue to consume (a stream reads from
``rabbitmq:stream-offset-spec``), a dynamic source is a new exclusive queue
(request/reply), a v1 exchange or topic source a temporary queue bound to it; a target
names an exchange and key, a queue, or nothing (each message's ``to``);
``/management`` is the management node (``management.py``). What cannot be resolved is
refused with the spec's condition (``amqp:not-found``, ``amqp:unauthorized-access``,
``amqp:invalid-field``). A coordinator target is the session's transaction coordinator
(``transactions.py``), and dispositions in a transaction settle into it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import TYPE_CHECKING, Any

from leveret.errors import AMQPError, InternalError, NotFound, PreconditionFailed
from leveret.model import settle
from leveret.model.completion import every
from leveret.model.queues.classic import selectable
from leveret.model.queues.stream_log import OFFSET_HEADER
from leveret.protocol.amqp10 import (
    AMQP10Error,
    Coordinator,
    Described,
    Error,
    Role,
    SenderSettleMode,
    Source,
    Symbol,
    Target,
    TerminusDurability,
    Timestamp,
    TransactionalState,
)
from leveret.server.amqp10 import selector
from leveret.server.amqp10.address import AddressError, parse_source, parse_target, queue_address
from leveret.server.amqp10.coordinator import CoordinatorLink
from leveret.server.amqp10.errors import error_for
from leveret.server.amqp10.links import (
    CopyLink,
    IncomingLink,
    OutgoingLink,
    SelectorLink,
    outcome,
)
from leveret.server.amqp10.management import ManagementNode
from leveret.server.amqp10.session_core import AttachedLink, SessionCore
from leveret.server.amqp10.transactions import LOCAL_TRANSACTIONS

if TYPE_CHECKING:
    from leveret.model.completion import Completion
    from leveret.model.queues.base import Queue
    from leveret.model.settle import Delivery
    from leveret.protocol.amqp10.events import (
        DispositionReceived,
        LinkAttachRequested,
    )
    from leveret.protocol.amqp10.types import Value

log = logging.getLogger("leveret.amqp10")

__all__ = ["INCOMING_CREDIT", "Session"]

# Link credit granted to a publisher's link, topped up at half (RabbitMQ 4 grants 128..170).
INCOMING_CREDIT = 2048
STREAM_FILTER = "rabbitmq:stream-offset-spec"
# The selector filter's descriptor as a symbol, and as the ulong Qpid's registry gives it.
SELECTOR_CODE = 0x0000468C00000004
# A source's distribution mode that leaves the messages for other links (spec 3.5.3).
COPY = "copy"


class Session(SessionCore):
    """One 1.0 session: links, unsettled deliveries, the peer's dispositions."""

    # -- attach --------------------------------------------------------------------------

    def attach(
        self,
        event: LinkAttachRequested,
        written: Completion[Any] | None = None,
        declared: str = "",
        bound: bool = False,
    ) -> None:
        """``written``, ``declared``, ``bound``: attached again once a queue it declares
        (a server-named one: ``declared``) or its binding (``bound``) is in the cluster's
        metadata store (``_shared``, ``_again``)."""
        machine = self.conn.machine
        try:
            if written is not None:
                written.result()  # etcd could not be reached: refused, as 0-9-1's 541
            if event.role == Role.SENDER:
                self._attach_outgoing(event, declared, bound)
            else:
                self._attach_incoming(event)
        except AMQPError as exc:
            machine.refuse_link(self.channel, event.handle, error_for(exc))
        except AddressError as exc:
            machine.refuse_link(
                self.channel,
                event.handle,
                Error(condition="amqp:invalid-field", description=str(exc)),
            )
        except AMQP10Error as exc:
            machine.refuse_link(
                self.channel,
                event.handle,
                Error(condition=exc.condition, description=exc.description),
            )
        self.conn.wrote()

    def _shared(
        self, name: str, *, durable: bool, exclusive: bool, server_named: bool = False
    ) -> Completion[Any] | None:
        """On a cluster node, the queue ``name`` this link declares goes to etcd first, as
        0-9-1's do, and the attach is answered once it is there and in this node's copy
        (``_again``; a reply sent to a dynamic node through any node then routes): what
        to wait for, None if nothing."""
        shared = self.vhost.shared
        if shared is None or self.vhost.find_queue(name) is not None:
            return None
        return shared.declare_queue(
            "" if server_named else name,
            generated_name=name,
            owner=self.client,
            durable=durable,
            exclusive=exclusive,
            auto_delete=False,
            arguments={},
        )

    def _temporary(self, event: LinkAttachRequested, name: str, declared: str) -> Queue | None:
        """The link's server-named exclusive queue ``name`` (a dynamic node's, a v1
        exchange source's), declared as on one node; None while its declaration goes to
        etcd first (``_shared``: ``declared`` names it when the attach comes again)."""
        written = (
            None
            if declared
            else self._shared(name, durable=False, exclusive=True, server_named=True)
        )
        if written is not None:
            self._again(event, written, name)
            return None
        return self.vhost.declare_queue("", owner=self.client, exclusive=True, generated_name=name)

    def _again(
        self,
        event: LinkAttachRequested,
        written: Completion[Any],
        declared: str = "",
        bound: bool = False,
    ) -> None:
        """The attach again once ``written`` (``_shared``), the connection's input waiting
        meanwhile."""
        self.conn.defer(written, lambda: self.attach(event, written, declared, bound))

    def _attach_outgoing(
        self, event: LinkAttachRequested, declared: str = "", bound: bool = False
    ) -> None:
        source = event.source
        machine = self.conn.machine
        if source is None:
            raise AddressError("a receiving link needs a source")
        settled = event.snd_settle_mode == SenderSettleMode.SETTLED
        # Spec 3.5.3: the messages stay available to other links; it browses a queue
        # (``_browse``). A v1 exchange source's own queue is consumed: every such link
        # gets its own copy of what the exchange routes, which is a copy already.
        copy = source.distribution_mode == COPY
        vhost, owner = self.vhost, self.client
        answer: Source | None = None
        temporary = False
        guard = self.guard
        if source.dynamic:
            name = declared or guard.queue_declare("", passive=False, arguments=None)
            guard.consume(name)
            queue = self._temporary(event, name, declared)
            if queue is None:
                return
            answer = dataclasses.replace(source, address=queue_address(queue.name))
            temporary = True
        else:
            address = source.address
            if not isinstance(address, str):
                raise AddressError("a receiving link needs a source address")
            where = parse_source(address)
            if where.management:
                node = ManagementNode(self, event.handle, event.name, sending=True)
                machine.accept_link(self.channel, event.handle)
                self.links[event.handle] = node
                return
            if where.bind:
                assert where.exchange is not None
                vhost.exchange(where.exchange)
                key = where.routing_key or ""
                # RabbitMQ 3's plugin: a server-named queue, bound, consumed.
                name = declared or guard.queue_declare("", passive=False, arguments=None)
                guard.queue_bind(name, where.exchange, key)
                guard.consume(name)
                queue = self._temporary(event, name, declared)
                if queue is None:
                    return
                shared = vhost.shared
                if shared is not None and not bound:
                    # Its binding next, in etcd before the attach is answered too.
                    written = shared.bind(where.exchange, "queue", name, key, {}, owner=owner)
                    if written is not None:
                        self._again(event, written, name, bound=True)
                        return
                vhost.bind_queue(queue.name, where.exchange, key, {}, owner=owner)
                temporary = True
                copy = False
            else:
                assert where.queue is not None
                if where.declare and self._declare_v1(event, where.queue, source.durable):
                    return
                guard.consume(where.queue)
                queue = vhost.queue(where.queue, owner)
        arguments: dict[str, object] | None = None
        if queue.type.offsets:
            # Where the link starts: RabbitMQ's stream filter, as the queue's type reads it.
            arguments = {OFFSET_HEADER: _offset_spec(source.filter)}
            # Its readers take nothing (the log stays for every reader): its consumer is
            # a copy link already, and the answer's ``copy`` is true.
            copy = False
        if not queue.type.auto_settle:
            settled = False  # a stream's deliveries are unsettled (they only return credit)
        found = _selector(source.filter)
        # Spec 3.5.1: the answer's source lists the filters applied; a selector applies
        # where a browser can take from the middle of the queue (not a stream, nor
        # priority levels).
        applied = dict(source.filter or {})
        chosen: selector.Selector | None = None
        if found is not None:
            filter_key, text = found
            if temporary or not selectable(queue):
                del applied[filter_key]
                source = dataclasses.replace(source, filter=applied or None)
            else:
                try:
                    chosen = selector.parse(text)
                except selector.SelectorError as exc:
                    raise AddressError(f"invalid selector: {exc}") from None
        opened = answer if answer is not None else source
        if copy and not queue.forwards:
            self._browse(event, queue, opened, settled, chosen, temporary)
            return
        if chosen is not None and selectable(queue):  # (chosen only where selectable)
            self._accept(event, opened, settled)
            chooser = SelectorLink(
                self, event.handle, event.name, queue, settled=settled, selector=chosen
            )
            chooser.wire = machine.link(self.channel, event.handle)
            self.links[event.handle] = chooser
            chooser.start()
            return
        link = OutgoingLink(
            self,
            event.handle,
            event.name,
            queue,
            settled=settled,
            temporary=temporary,
            arguments=arguments,
            browses=copy,
        )
        # Consuming starts before the attach is answered (with no credit, nothing goes out
        # yet): a refusal (a queue in exclusive use) refuses the attach, where after it
        # the connection was closed for answering the attach twice.
        link.start()
        pending = queue.answer(link.consumer)
        if pending is not None:
            # Led by another node: answered once its leader took the consume, so its
            # refusal is one node's too, as 0-9-1's consume-ok waits for it.
            self.conn.defer(
                pending, lambda: self._answered(event, link, queue, pending, opened, settled)
            )
            return
        self._open(event, link, opened, settled)

    def _browse(
        self,
        event: LinkAttachRequested,
        queue: Queue,
        source: Source,
        settled: bool,
        chosen: selector.Selector | None,
        temporary: bool,
    ) -> None:
        """A copy link of a queue of this node (``CopyLink``). A type that cannot be
        browsed refuses the attach (amqp:not-implemented) rather than answer ``copy`` and
        take; a queue an exclusive consumer holds refuses it as for a 0-10 browser."""
        queue.browse_after(0, 0)
        queue.check_exclusive_use(False)
        self._accept(event, source, settled)
        link = CopyLink(
            self,
            event.handle,
            event.name,
            queue,
            settled=settled,
            selector=chosen,
            temporary=temporary,
        )
        link.wire = self.conn.machine.link(self.channel, event.handle)
        self.links[event.handle] = link
        link.start()

    def _accept(self, event: LinkAttachRequested, source: Source, settled: bool) -> None:
        self.conn.machine.accept_link(
            self.channel,
            event.handle,
            source=source,
            snd_settle_mode=SenderSettleMode.SETTLED if settled else SenderSettleMode.UNSETTLED,
        )

    def _open(
        self, event: LinkAttachRequested, link: OutgoingLink, source: Source, settled: bool
    ) -> None:
        self._accept(event, source, settled)
        link.wire = self.conn.machine.link(self.channel, event.handle)
        self.links[event.handle] = link

    def _answered(
        self,
        event: LinkAttachRequested,
        link: OutgoingLink,
        queue: Queue,
        pending: Completion[None],
        source: Source,
        settled: bool,
    ) -> None:
        """The leader answered the consume of ``link`` (``RemoteQueue.answer``)."""
        error = pending.error
        if error is not None:
            link.close()
            refusal = error if isinstance(error, AMQPError) else InternalError(str(error))
            self.conn.machine.refuse_link(self.channel, event.handle, error_for(refusal))
            return
        self._open(event, link, source, settled)
        queue.release(link.consumer)

    def _attach_incoming(self, event: LinkAttachRequested) -> None:
        target = event.target
        machine = self.conn.machine
        if isinstance(target, Coordinator):
            capabilities = target.capabilities or (LOCAL_TRANSACTIONS,)
            if LOCAL_TRANSACTIONS not in capabilities:
                raise AMQP10Error("amqp:not-implemented", "only local transactions are supported")
            machine.accept_link(
                self.channel,
                event.handle,
                target=Coordinator(capabilities=(Symbol(LOCAL_TRANSACTIONS),)),
                credit=INCOMING_CREDIT,
                auto_credit=True,
            )
            self.links[event.handle] = CoordinatorLink(self, event.handle, event.name)
            return
        if target is not None and not isinstance(target, Target):
            raise AddressError("the target is neither a target nor a coordinator")
        address = None if target is None else target.address
        exchange: str | None = None
        routing_key: str | None = None
        if address is not None:
            if not isinstance(address, str):
                raise AddressError("a target address must be a string")
            where = parse_target(address)
            if where.management:
                node = ManagementNode(self, event.handle, event.name, sending=False)
                machine.accept_link(
                    self.channel, event.handle, credit=INCOMING_CREDIT, auto_credit=True
                )
                self.links[event.handle] = node
                return
            if where.queue is not None:
                if where.declare and self._declare_v1(
                    event,
                    where.queue,
                    target.durable if target is not None else TerminusDurability.NONE,
                ):
                    return
                self.guard.access.write_exchange("")
                # Existence only: publishing to another connection's exclusive queue is
                # allowed (a request/reply server answers into the client's reply queue).
                if self.vhost.find_queue(where.queue) is None:
                    raise NotFound(f"no queue '{where.queue}' in vhost '{self.vhost.name}'")
                exchange, routing_key = "", where.queue
            else:
                assert where.exchange is not None
                exchange, routing_key = where.exchange, where.routing_key
                # Write permission is asked at attach (RabbitMQ 4), and again per message
                # (the cached ``Guard.publish``: permissions can change, topic keys vary).
                self.guard.access.write_exchange(exchange)
                if exchange:
                    self.vhost.exchange(exchange)
        link = IncomingLink(
            self, event.handle, event.name, exchange=exchange, routing_key=routing_key
        )
        if exchange is not None:
            link.publisher.check(exchange)
        machine.accept_link(self.channel, event.handle, credit=INCOMING_CREDIT, auto_credit=True)
        self.links[event.handle] = link

    def _declare_v1(self, event: LinkAttachRequested, name: str, durability: int) -> bool:
        """A v1 queue address (``/queue/:queue``, a bare name): RabbitMQ declares the queue
        at attach (configure permission), a classic queue, durable unless the terminus's
        durability is ``none``; an existing queue is taken as it is. Whether the attach
        waits for it to be in the cluster's metadata store (``_shared``)."""
        access, vhost = self.guard.access, self.vhost
        access.configure_queue(name)
        if vhost.find_queue(name) is None:
            access.check_queue_limit(name, len(vhost.queues))
            durable = durability != TerminusDurability.NONE
            written = self._shared(name, durable=durable, exclusive=False)
            if written is not None:
                self._again(event, written)
                return True
            vhost.declare_queue(name, owner=self.client, durable=durable)
        return False

    def detached(self, handle: int) -> Completion[None] | None:
        """The link ``handle`` was detached: it stops. Returns what the answer to the
        peer's detach waits for (``_withdrawn``); None: nothing."""
        link = self.links.pop(handle, None)
        if link is None:
            return None
        link.close()
        return self._withdrawn(link)

    def _withdrawn(self, link: AttachedLink) -> Completion[None] | None:
        """After ``link.close()``: done once its queue let its consumer go, when that is
        not known yet (a queue another node leads: once its leader has, so that a consume
        reaching the leader another way right after the answer is not refused for it, as
        0-9-1's cancel-ok waits). Kept in ``withdrawing`` until then: the session's end
        waits for it too."""
        if not isinstance(link, OutgoingLink):
            return None
        consumer = link.consumer
        gone = consumer.queue.withdrawn(consumer)
        if gone is None or gone.done:
            return None
        waiting = self.withdrawing
        waiting.append(gone)
        gone.on_done(lambda _done: waiting.remove(gone))
        return gone

    # -- dispositions --------------------------------------------------------------------

    def disposition(self, event: DispositionReceived) -> None:
        if event.role != Role.RECEIVER:
            return  # the peer settling its own transfers to us: nothing to do
        state = event.state
        if not event.settled and state is None:
            return  # a non-terminal state (received): nothing to apply
        unsettled = self.unsettled
        taken: list[Delivery] = []
        first, last = event.first, event.last
        if last - first > len(unsettled):
            ids = [i for i in unsettled if first <= i <= last]
        else:
            ids = [i for i in range(first, last + 1) if i in unsettled]
        for delivery_id in ids:
            delivery = unsettled.pop(delivery_id)
            consumer = delivery.consumer
            if consumer is not None:
                consumer.unsettled -= 1
            taken.append(delivery)
        if isinstance(state, TransactionalState):
            try:
                self.transactions.settle(state.txn_id, state.outcome, taken)
            except AMQP10Error as exc:
                # Unknown transaction: the deliveries go back, the session ends (spec 4.4.4).
                settle.release(taken)
                self.conn.machine.end(
                    self.channel, Error(condition=exc.condition, description=exc.description)
                )
                self.conn.wrote()
                return
        elif taken:
            outcome(state, taken)
        if not event.settled:
            self.conn.machine.settle(self.channel, first, last, role=Role.SENDER, state=state)
            self.conn.wrote()

    # -- the model's Attachment ----------------------------------------------------------

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        if writable:
            for link in list(self.links.values()):
                if isinstance(link, OutgoingLink) and link.consumer.credit > 0:
                    link.queue.dispatch()
                elif isinstance(link, (SelectorLink, CopyLink)):
                    link.browse()

    def close(self) -> None:
        """The session ended (or the connection went): stop every link and requeue what
        the peer had not settled."""
        if self.closed:
            return
        self.closed = True
        for link in list(self.links.values()):
            link.close()
            self._withdrawn(link)
        self.links.clear()
        self.withdrawn = every(self.withdrawing)
        held = list(self.unsettled.values())
        self.unsettled.clear()
        for delivery in held:
            if delivery.consumer is not None:
                delivery.consumer.unsettled -= 1
        if held:
            settle.release(held)


def _selector(filters: dict[Value, Value] | None) -> tuple[Value, str] | None:
    """The JMS selector among a source's filters: (its key, its text)."""
    for key, value in (filters or {}).items():
        if isinstance(value, Described) and value.descriptor in (
            selector.SELECTOR_FILTER,
            SELECTOR_CODE,
        ):
            text = value.value
            if isinstance(text, str):
                return key, str(text)
    return None


def _offset_spec(filters: dict[Value, Value] | None) -> object:
    """RabbitMQ's ``rabbitmq:stream-offset-spec`` filter as an ``x-stream-offset`` value."""
    if not filters:
        return "next"
    value = filters.get(STREAM_FILTER)
    if value is None:
        for item in filters.values():
            if isinstance(item, Described) and item.descriptor == STREAM_FILTER:
                value = item
                break
    if value is None:
        return "next"
    if isinstance(value, Described):
        value = value.value
    if isinstance(value, Timestamp):
        return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
    if isinstance(value, bool):
        raise NotFound("bad stream offset")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    raise PreconditionFailed(f"invalid stream offset {value!r}")
