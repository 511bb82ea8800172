"""The AMQP 0-9-1 methods a client sends on an open channel, each mapped onto the broker
core: exchange, queue, basic (but the per-message publish and ack, which the connection
reads on its fast path), tx and confirm. ``HANDLERS`` maps a method's index to its handler;
errors are raised as ``AMQPError`` and turned into closes by the connection machine.

Each handler that touches a resource first asks the connection's ``Guard`` (permissions,
topic permissions, the vhost's queue limit) with the names the core will see, after the
protocol's shortcuts (the empty queue name, the empty binding key) are resolved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from leveret.convert.formats import amqp091_parts
from leveret.errors import InternalError, NotAllowed
from leveret.model.queues.remote import RemoteQueue
from leveret.model.router import REPLY_TO
from leveret.model.vhost import Declared
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.completion import Completion
    from leveret.model.entry import QueuedMessage
    from leveret.protocol.amqp091.channel import ChannelState
    from leveret.server.amqp091.channel import Channel


T = TypeVar("T")


class _Defers(Protocol):
    """The connection's ``defer`` (``connection.AMQP091Connection``): a method answered
    once a completion is done (a queue led by another node)."""

    def defer(
        self,
        channel: ChannelState,
        completion: Completion[T],
        reply: Callable[[T], None],
        *,
        class_id: int = 0,
        method_id: int = 0,
    ) -> None: ...


def channel_flow(channel: Channel, method: m.ChannelFlow) -> None:
    channel.session.set_flow(method.active)
    channel.conn.send_method(channel.id, m.ChannelFlowOk(active=method.active))


def ignore(channel: Channel, method: Any) -> None:
    pass


def _shared_first(
    channel: Channel,
    method: Any,
    written: Completion[Any] | None,
    then: Callable[[], None],
) -> None:
    """``then()`` once ``written`` (the declaration in the cluster's metadata store, and
    so in this node's model) is done; at once when there is nothing to wait for."""
    if written is None:
        then()
        return
    cast("_Defers", channel.conn).defer(
        channel,
        written,
        lambda _none: then(),
        class_id=method.CLASS_ID,
        method_id=method.METHOD_ID,
    )


def exchange_declare(channel: Channel, method: m.ExchangeDeclare) -> None:
    channel.guard.exchange_declare(
        method.exchange, method.type, passive=method.passive, arguments=method.arguments
    )
    vhost = channel.session.vhost
    shared = vhost.shared
    written = None
    if shared is not None and not method.passive and method.exchange not in vhost.exchanges:
        written = shared.declare_exchange(
            method.exchange,
            method.type,
            durable=method.durable,
            auto_delete=method.auto_delete,
            internal=method.internal,
            arguments=method.arguments,
        )
    _shared_first(channel, method, written, lambda: _declare_exchange(channel, method))


def _declare_exchange(channel: Channel, method: m.ExchangeDeclare) -> None:
    channel.session.vhost.declare_exchange(
        method.exchange,
        method.type,
        passive=method.passive,
        durable=method.durable,
        auto_delete=method.auto_delete,
        internal=method.internal,
        arguments=method.arguments,
    )
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.ExchangeDeclareOk())


def exchange_delete(channel: Channel, method: m.ExchangeDelete) -> None:
    channel.guard.exchange_delete(method.exchange)
    shared = channel.session.vhost.shared
    written = None
    if shared is not None:
        written = shared.delete_exchange(method.exchange, if_unused=method.if_unused)
    _shared_first(channel, method, written, lambda: _delete_exchange(channel, method))


def _delete_exchange(channel: Channel, method: m.ExchangeDelete) -> None:
    channel.session.vhost.delete_exchange(method.exchange, if_unused=method.if_unused)
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.ExchangeDeleteOk())


def exchange_bind(channel: Channel, method: m.ExchangeBind) -> None:
    channel.guard.exchange_bind(method.destination, method.source, method.routing_key)
    shared = channel.session.vhost.shared
    written = None
    if shared is not None:
        written = shared.bind(
            method.source,
            "exchange",
            method.destination,
            method.routing_key,
            method.arguments,
            owner=channel.session.owner,
        )
    _shared_first(channel, method, written, lambda: _bind_exchange(channel, method))


def _bind_exchange(channel: Channel, method: m.ExchangeBind) -> None:
    channel.session.vhost.bind_exchange(
        method.destination, method.source, method.routing_key, method.arguments
    )
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.ExchangeBindOk())


def exchange_unbind(channel: Channel, method: m.ExchangeUnbind) -> None:
    channel.guard.exchange_unbind(method.destination, method.source, method.routing_key)
    shared = channel.session.vhost.shared
    written = None
    if shared is not None and "" not in (method.source, method.destination):
        written = shared.unbind(
            method.source, "exchange", method.destination, method.routing_key, method.arguments
        )
    _shared_first(channel, method, written, lambda: _unbind_exchange(channel, method))


def _unbind_exchange(channel: Channel, method: m.ExchangeUnbind) -> None:
    channel.session.vhost.unbind_exchange(
        method.destination, method.source, method.routing_key, method.arguments
    )
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.ExchangeUnbindOk())


def queue_declare(channel: Channel, method: m.QueueDeclare) -> None:
    session = channel.session
    # A server-named queue's name is made first, so that it is checked before it exists.
    name = channel.guard.queue_declare(
        method.queue, passive=method.passive, arguments=method.arguments
    )
    vhost = session.vhost
    shared = vhost.shared
    written = None
    if shared is not None and not method.passive and vhost.find_queue(name) is None:
        written = shared.declare_queue(
            method.queue,
            generated_name=name,
            owner=session.owner,
            durable=method.durable,
            exclusive=method.exclusive,
            auto_delete=method.auto_delete,
            arguments=method.arguments,
        )
    _shared_first(channel, method, written, lambda: _declare_queue(channel, method, name))


def _declare_queue(channel: Channel, method: m.QueueDeclare, name: str) -> None:
    session = channel.session
    vhost = session.vhost
    if method.passive:
        # (A stream answers the offset x-stream-offset points at: a Leveret addition.)
        declared = vhost.passive_declare(
            method.queue, owner=session.owner, arguments=method.arguments
        )
    else:
        queue = vhost.declare_queue(
            method.queue,
            owner=session.owner,
            durable=method.durable,
            exclusive=method.exclusive,
            auto_delete=method.auto_delete,
            arguments=method.arguments,
            generated_name=name,
        )
        declared = Declared(queue.name, queue.message_count, queue.consumer_count)
    session.last_queue = declared.queue
    if method.no_wait:
        return
    target = vhost.find_queue(declared.queue)
    if target is not None and target.forwards:
        # Led by another node: its counts are its leader's, asked over the link.
        cast("_Defers", channel.conn).defer(
            channel,
            target.inspect(purge=False),
            lambda counts: channel.conn.send_method(
                channel.id,
                m.QueueDeclareOk(
                    queue=declared.queue, message_count=counts[0], consumer_count=counts[1]
                ),
            ),
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    channel.conn.send_method(
        channel.id,
        m.QueueDeclareOk(
            queue=declared.queue,
            message_count=declared.message_count,
            consumer_count=declared.consumer_count,
        ),
    )


def _routing_key(method: m.QueueBind | m.QueueUnbind, queue: str) -> str:
    # The spec's rule: an empty key with the last declared queue binds with its name.
    return method.routing_key or (queue if not method.queue else "")


def queue_bind(channel: Channel, method: m.QueueBind) -> None:
    session = channel.session
    queue = session.queue_name(method.queue)
    routing_key = _routing_key(method, queue)
    channel.guard.queue_bind(queue, method.exchange, routing_key)
    shared = session.vhost.shared
    written = None
    if shared is not None:
        written = shared.bind(
            method.exchange, "queue", queue, routing_key, method.arguments, owner=session.owner
        )
    _shared_first(
        channel, method, written, lambda: _bind_queue(channel, method, queue, routing_key)
    )


def _bind_queue(channel: Channel, method: m.QueueBind, queue: str, routing_key: str) -> None:
    session = channel.session
    session.vhost.bind_queue(
        queue,
        method.exchange,
        routing_key,
        method.arguments,
        owner=session.owner,
    )
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.QueueBindOk())


def queue_unbind(channel: Channel, method: m.QueueUnbind) -> None:
    session = channel.session
    queue = session.queue_name(method.queue)
    routing_key = _routing_key(method, queue)
    channel.guard.queue_unbind(queue, method.exchange, routing_key)
    vhost = session.vhost
    shared = vhost.shared
    written = None
    if shared is not None and method.exchange != "":
        if vhost.find_queue(queue) is not None:
            vhost.queue(queue, session.owner)  # 405 for another connection's exclusive queue
        written = shared.unbind(method.exchange, "queue", queue, routing_key, method.arguments)
    _shared_first(
        channel, method, written, lambda: _unbind_queue(channel, method, queue, routing_key)
    )


def _unbind_queue(channel: Channel, method: m.QueueUnbind, queue: str, routing_key: str) -> None:
    session = channel.session
    session.vhost.unbind_queue(
        queue,
        method.exchange,
        routing_key,
        method.arguments,
        owner=session.owner,
    )
    channel.conn.send_method(channel.id, m.QueueUnbindOk())


def queue_purge(channel: Channel, method: m.QueuePurge) -> None:
    session = channel.session
    name = session.queue_name(method.queue)
    channel.guard.queue_purge(name)
    queue = session.vhost.queue(name, session.owner)
    if not queue.type.purges:
        raise queue.unsupported("queue.purge")
    if queue.forwards:
        purged = queue.inspect(purge=True)
        if method.no_wait:
            return
        cast("_Defers", channel.conn).defer(
            channel,
            purged,
            lambda counts: channel.conn.send_method(
                channel.id, m.QueuePurgeOk(message_count=counts[0])
            ),
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    count = queue.purge()
    if not method.no_wait:
        channel.conn.send_method(channel.id, m.QueuePurgeOk(message_count=count))


def queue_delete(channel: Channel, method: m.QueueDelete) -> None:
    session = channel.session
    name = session.queue_name(method.queue)
    channel.guard.queue_delete(name)
    conn = channel.conn
    # delete-ok goes before the basic.cancel the deletion sends to this connection's own
    # consumers of the queue (RabbitMQ's order; py-amqp waits for the delete-ok first).
    target = session.vhost.find_queue(name)
    if isinstance(target, RemoteQueue):
        # Led by another node: the count (and if-unused, if-empty) are its leader's.
        cast("_Defers", conn).defer(
            channel,
            target.deletion_counts(),
            lambda counts: _delete_queue(channel, method, name, counts),
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    _delete_queue(channel, method, name, None)


def _delete_queue(
    channel: Channel, method: m.QueueDelete, name: str, counts: tuple[int, int] | None
) -> None:
    session = channel.session
    conn = channel.conn
    vhost = session.vhost
    shared = vhost.shared
    checked = None
    if shared is not None:
        checked = vhost.check_delete(
            name,
            owner=session.owner,
            if_unused=method.if_unused,
            if_empty=method.if_empty,
            leader_counts=counts,
        )
    written = shared.delete_queue(checked[0]) if shared is not None and checked else None
    if written is not None and checked is not None:
        # In etcd first: this node's model loses it when etcd has (its consumers' cancels
        # held until delete-ok is out), and delete-ok carries the count checked before.
        count = checked[1]
        session.hold_cancels()
        written.on_done(lambda done: session.release_cancels() if done.error else None)

        def answer(_none: None) -> None:
            if not method.no_wait:
                conn.send_method(channel.id, m.QueueDeleteOk(message_count=count))
            session.release_cancels()

        cast("_Defers", conn).defer(
            channel,
            written,
            answer,
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    mark = conn.output_mark()
    count = vhost.delete_queue(
        name,
        owner=session.owner,
        if_unused=method.if_unused,
        if_empty=method.if_empty,
        leader_counts=counts,
    )
    if not method.no_wait:
        conn.send_method_at(mark, channel.id, m.QueueDeleteOk(message_count=count))


def basic_qos(channel: Channel, method: m.BasicQos) -> None:
    channel.session.set_qos(method.prefetch_size, method.prefetch_count, method.global_)
    channel.conn.send_method(channel.id, m.BasicQosOk())


def basic_consume(channel: Channel, method: m.BasicConsume) -> None:
    session = channel.session
    conn = channel.conn
    # consume-ok must precede the first delivery, so register after replying.
    queue_name = session.queue_name(method.queue)
    channel.guard.consume(queue_name)
    target = None
    if queue_name != REPLY_TO:
        target = session.vhost.queue(queue_name, session.owner)
        queue_name = target.name
    tag = method.consumer_tag
    if tag and tag in session.consumers:
        raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    mark = conn.output_mark()
    tag = session.consume(
        queue_name,
        tag,
        no_ack=method.no_ack,
        exclusive=method.exclusive,
        arguments=method.arguments,
    )
    if target is not None:
        # A queue led by another node answers later (``Source.answer``): consume-ok once
        # its leader accepted, so a refusal (403 for an exclusive use) is the channel
        # error one node gives.
        consumer = session.consumers[tag]
        answer = target.answer(consumer)
        if answer is not None:
            remote = target

            def accepted(_: None) -> None:
                if not method.no_wait:
                    conn.send_method(channel.id, m.BasicConsumeOk(consumer_tag=tag))
                remote.release(consumer)

            cast("_Defers", conn).defer(
                channel,
                answer,
                accepted,
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
            return
    if not method.no_wait:
        conn.send_method_at(mark, channel.id, m.BasicConsumeOk(consumer_tag=tag))


def basic_cancel(channel: Channel, method: m.BasicCancel) -> None:
    session = channel.session
    tag = method.consumer_tag
    consumer = session.consumers.get(tag)
    session.cancel(tag)
    if method.no_wait:
        return
    conn = channel.conn
    # A queue led by another node lets the consumer go when its leader has: cancel-ok
    # then, so that a consume reaching the leader through another node right after it
    # is not refused for this one (on one node the queue is free once cancel-ok is out).
    gone = consumer.queue.withdrawn(consumer) if consumer is not None else None
    if gone is not None:
        cast("_Defers", conn).defer(
            channel,
            gone,
            lambda _none: conn.send_method(channel.id, m.BasicCancelOk(consumer_tag=tag)),
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    conn.send_method(channel.id, m.BasicCancelOk(consumer_tag=tag))


def basic_publish(channel: Channel, method: m.BasicPublish) -> None:
    channel.guard.publish(method.exchange, method.routing_key, channel.session.publisher)
    channel.start_content(method)


def basic_get(channel: Channel, method: m.BasicGet) -> None:
    session = channel.session
    queue = session.queue_name(method.queue)
    channel.guard.get(queue)
    target = session.vhost.queue(queue, session.owner)
    if target.forwards:
        # Led by another node: the answer comes over the link; the channel waits for it.
        cast("_Defers", channel.conn).defer(
            channel,
            session.fetch(target, no_ack=method.no_ack),
            lambda result: _get_reply(channel, result),
            class_id=method.CLASS_ID,
            method_id=method.METHOD_ID,
        )
        return
    _get_reply(channel, session.get(queue, no_ack=method.no_ack))


def _get_reply(channel: Channel, result: tuple[int, QueuedMessage, int] | None) -> None:
    if result is None:
        channel.conn.send_method(channel.id, m.BasicGetEmpty())
        return
    delivery_tag, entry, remaining = result
    message = entry.message
    get_ok = m.BasicGetOk(
        delivery_tag=delivery_tag,
        redelivered=entry.redelivered,
        exchange=message.exchange,
        routing_key=message.routing_key,
        message_count=remaining,
    )
    raw, body = amqp091_parts(message)
    channel.conn.send_content(channel.id, get_ok.encode(), raw, body)


def basic_ack(channel: Channel, method: m.BasicAck) -> None:
    channel.session.ack(method.delivery_tag, multiple=method.multiple)


def basic_reject(channel: Channel, method: m.BasicReject) -> None:
    channel.session.reject(method.delivery_tag, requeue=method.requeue)


def basic_nack(channel: Channel, method: m.BasicNack) -> None:
    channel.session.reject(method.delivery_tag, multiple=method.multiple, requeue=method.requeue)


def basic_recover(channel: Channel, method: m.BasicRecover) -> None:
    # recover-ok before the redeliveries it causes, as RabbitMQ sends them.
    conn = channel.conn
    mark = conn.output_mark()
    channel.session.recover(method.requeue)
    conn.send_method_at(mark, channel.id, m.BasicRecoverOk())


def basic_recover_async(channel: Channel, method: m.BasicRecoverAsync) -> None:
    channel.session.recover(method.requeue)


def tx_select(channel: Channel, method: m.TxSelect) -> None:
    channel.session.select_tx()
    channel.conn.send_method(channel.id, m.TxSelectOk())


def tx_commit(channel: Channel, method: m.TxCommit) -> None:
    conn = channel.conn

    def done(ok: bool) -> None:
        # commit-ok only once the transaction is on disk (it may come a loop turn later,
        # from the store's writer); the channel may have gone meanwhile.
        if conn.channels.get(channel.id) is not channel or channel.closing:
            return
        if ok:
            conn.send_method(channel.id, m.TxCommitOk())
        else:
            # The transaction is applied but not durable: the client must not believe it
            # committed, and 541 is the spec's code for a failure of the server.
            conn.fail_channel(
                channel,
                InternalError(
                    "tx.commit failed: the store could not write to disk",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                ),
            )

    channel.session.commit(done)


def tx_rollback(channel: Channel, method: m.TxRollback) -> None:
    channel.session.rollback()
    channel.conn.send_method(channel.id, m.TxRollbackOk())


def confirm_select(channel: Channel, method: m.ConfirmSelect) -> None:
    channel.session.select_confirm()
    if not method.nowait:
        channel.conn.send_method(channel.id, m.ConfirmSelectOk())


_TABLE: dict[type[m.Method], Callable[[Channel, Any], None]] = {
    m.ChannelFlow: channel_flow,
    m.ChannelFlowOk: ignore,
    m.ExchangeDeclare: exchange_declare,
    m.ExchangeDelete: exchange_delete,
    m.ExchangeBind: exchange_bind,
    m.ExchangeUnbind: exchange_unbind,
    m.QueueDeclare: queue_declare,
    m.QueueBind: queue_bind,
    m.QueueUnbind: queue_unbind,
    m.QueuePurge: queue_purge,
    m.QueueDelete: queue_delete,
    m.BasicQos: basic_qos,
    m.BasicConsume: basic_consume,
    m.BasicCancel: basic_cancel,
    m.BasicPublish: basic_publish,
    m.BasicGet: basic_get,
    m.BasicAck: basic_ack,
    m.BasicReject: basic_reject,
    m.BasicNack: basic_nack,
    m.BasicRecover: basic_recover,
    m.BasicRecoverAsync: basic_recover_async,
    m.TxSelect: tx_select,
    m.TxCommit: tx_commit,
    m.TxRollback: tx_rollback,
    m.ConfirmSelect: confirm_select,
}

HANDLERS: dict[int, Callable[[Channel, Any], None]] = {
    cls.INDEX: handler for cls, handler in _TABLE.items()
}
