"""The methods only AMQP 0-8 and 0-9 have, mapped onto the broker core: ``access.request``
(tickets), ``exchange.bound`` (Qpid's binding query), 0-9's ``channel.ping``/``pong``/``ok``/
``resume`` and ``basic.recover-sync``, and 0-8's ``test`` class. The classes with more to
them register their handlers from their own modules (``filexfer.py``, ``ratestream.py``,
``references.py``, ``tunnel.py``, ``dtx.py``).

``LEGACY_HANDLERS`` maps a generated method class (of ``protocol/amqp08`` or ``amqp09``) to
its handler; ids are not enough, since 0-8 and 0-9 give 120/x to different classes. A method
without a handler is answered 540 NOT_IMPLEMENTED (channel methods a server never receives,
such as ``file.deliver``, included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from leveret.errors import CommandInvalid, NotFound, NotImplemented_
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp08._generated import properties as p08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09

if TYPE_CHECKING:
    from leveret.server.legacy.channel import LegacyChannel

__all__ = [
    "LEGACY_HANDLERS",
    "Handler",
    "methods_of",
    "not_implemented",
    "properties_of",
    "register",
    "reply",
]

Handler = Callable[["LegacyChannel", Any], None]

LEGACY_HANDLERS: dict[type[Any], Handler] = {}

# RabbitMQ grants every access.request the same ticket (tests/data/rabbitmq-headers); tickets
# are accepted and ignored, as 0-9-1 made them reserved fields.
TICKET = 1


def register(*classes: type[Any]) -> Callable[[Handler], Handler]:
    def add(handler: Handler) -> Handler:
        for cls in classes:
            LEGACY_HANDLERS[cls] = handler
        return handler

    return add


def methods_of(channel: LegacyChannel) -> Any:
    """The generated method classes of the channel's version (0-8 and 0-9 share ids but
    not all fields)."""
    return m08 if channel.legacy.dialect.name == "0-8" else m09


def properties_of(channel: LegacyChannel) -> Any:
    """The generated property classes of the channel's version (0-8's field tables differ)."""
    return p08 if channel.legacy.dialect.name == "0-8" else p09


def reply(channel: LegacyChannel, method: Any) -> None:
    """Send a method of the version's own codec on the channel."""
    channel.legacy.send_legacy(channel.id, method.encode())


def not_implemented(channel: LegacyChannel, method: Any) -> None:
    if method.NAME.endswith("-ok") or method.NAME in _SERVER_ONLY:
        raise CommandInvalid(f"method {method.NAME} is not allowed from a client")
    raise NotImplemented_(f"method {method.NAME} is not implemented")


_SERVER_ONLY = frozenset(
    {
        "connection.redirect",
        "channel.alert",
        "file.deliver",
        "file.return",
        "stream.deliver",
        "stream.return",
        "message.empty",
        "message.offset",
    }
)


@register(m08.AccessRequest, m09.AccessRequest)
def access_request(channel: LegacyChannel, method: Any) -> None:
    reply = m08.AccessRequestOk if channel.legacy.dialect.name == "0-8" else m09.AccessRequestOk
    channel.legacy.send_legacy(channel.id, reply(ticket=TICKET).encode())


# exchange.bound's reply codes, as Qpid's brokers answer them (the XML leaves them open).
BOUND_OK = 0
EXCHANGE_NOT_FOUND = 1
QUEUE_NOT_FOUND = 2
NO_BINDINGS = 3
QUEUE_NOT_BOUND = 4
NO_QUEUE_BOUND_WITH_RK = 5
SPECIFIC_QUEUE_NOT_BOUND_WITH_RK = 6


def bound_reply(
    channel: LegacyChannel, exchange_name: str, routing_key: str, queue_name: str
) -> tuple[int, str]:
    """exchange.bound's (reply-code, reply-text): whether the exchange has bindings (to the
    queue, with the key, or both, as the fields given ask)."""
    vhost = channel.session.vhost
    exchange = vhost.exchanges.get(exchange_name)
    if exchange is None:
        return EXCHANGE_NOT_FOUND, f"exchange '{exchange_name}' not found"
    queue = None
    if queue_name:
        queue = vhost.queues.get(queue_name)
        if queue is None:
            return QUEUE_NOT_FOUND, f"queue '{queue_name}' not found"
    if exchange_name == "":
        # The default exchange binds every queue with its own name, implicitly.
        pairs: list[tuple[object, str]] = [(q, q.name) for q in vhost.queues.values()]
    else:
        pairs = [(destination, key) for destination, key, _args in exchange.kind.bindings()]
    bindings = [(d, key) for d, key in pairs if queue is None or d is queue]
    if queue is None and not routing_key:
        if not bindings:
            return NO_BINDINGS, "no bindings"
    elif not routing_key:
        if not bindings:
            return QUEUE_NOT_BOUND, f"queue '{queue_name}' not bound to '{exchange_name}'"
    elif not any(key == routing_key for _d, key in bindings):
        if queue is None:
            return NO_QUEUE_BOUND_WITH_RK, f"no queue bound with routing key '{routing_key}'"
        return (
            SPECIFIC_QUEUE_NOT_BOUND_WITH_RK,
            f"queue '{queue_name}' not bound with routing key '{routing_key}'",
        )
    return BOUND_OK, "OK"


@register(m08.ExchangeBound, m09.ExchangeBound)
def exchange_bound(channel: LegacyChannel, method: Any) -> None:
    code, text = bound_reply(channel, method.exchange, method.routing_key, method.queue)
    reply = m08.ExchangeBoundOk if channel.legacy.dialect.name == "0-8" else m09.ExchangeBoundOk
    channel.legacy.send_legacy(channel.id, reply(reply_code=code, reply_text=text).encode())


# -- 0-9's channel methods ---------------------------------------------------------------


@register(m09.ChannelPing)
def channel_ping(channel: LegacyChannel, method: m09.ChannelPing) -> None:
    # ping is answered with ok, then the recipient issues a pong request of its own (which
    # the client answers with ok).
    send = channel.legacy.send_legacy
    send(channel.id, m09.ChannelOk().encode())
    send(channel.id, m09.ChannelPong().encode())


@register(m09.ChannelPong)
def channel_pong(channel: LegacyChannel, method: m09.ChannelPong) -> None:
    channel.legacy.send_legacy(channel.id, m09.ChannelOk().encode())


@register(m09.ChannelOk)
def channel_ok(channel: LegacyChannel, method: m09.ChannelOk) -> None:
    """The completion of a request of ours (a pong): nothing to do."""


@register(m09.ChannelResume)
def channel_resume(channel: LegacyChannel, method: m09.ChannelResume) -> None:
    # Channels do not outlive their connection (channel.open-ok gives no channel-id, as
    # RabbitMQ's does not), so only the channel itself can be "resumed".
    if method.channel_id in (b"", str(channel.id).encode()):
        channel.legacy.send_legacy(channel.id, m09.ChannelOk().encode())
        return
    raise NotFound(f"no interrupted channel '{method.channel_id.decode(errors='replace')}'")


@register(m09.BasicRecoverSync)
def basic_recover_sync(channel: LegacyChannel, method: m09.BasicRecoverSync) -> None:
    channel.session.recover(method.requeue)
    channel.legacy.send_legacy(channel.id, m09.BasicRecoverSyncOk().encode())


# -- 0-8's test class: the peer's codec checked by the other -----------------------------

_MASKS = (0xFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


@register(m08.TestInteger)
def test_integer(channel: LegacyChannel, method: m08.TestInteger) -> None:
    values = (method.integer_1, method.integer_2, method.integer_3, method.integer_4)
    if method.operation == 0:  # add
        result = sum(values)
    elif method.operation == 1:  # min
        result = min(values)
    elif method.operation == 2:  # max
        result = max(values)
    else:
        raise CommandInvalid(f"test.integer: unknown operation {method.operation}")
    channel.legacy.send_legacy(channel.id, m08.TestIntegerOk(result=result & _MASKS[3]).encode())


def _string_op(values: list[bytes], operation: int) -> bytes:
    if operation == 0:  # add
        return b"".join(values)
    if operation == 1:  # min
        return min(values)
    if operation == 2:  # max
        return max(values)
    raise CommandInvalid(f"test: unknown string operation {operation}")


@register(m08.TestString)
def test_string(channel: LegacyChannel, method: m08.TestString) -> None:
    result = _string_op([method.string_1.encode(), method.string_2], method.operation)
    channel.legacy.send_legacy(channel.id, m08.TestStringOk(result=result).encode())


@register(m08.TestTable)
def test_table(channel: LegacyChannel, method: m08.TestTable) -> None:
    integers = [v for v in method.table.values() if isinstance(v, int) and not isinstance(v, bool)]
    strings = [
        v.encode() if isinstance(v, str) else v
        for v in method.table.values()
        if isinstance(v, str | bytes)
    ]
    if method.integer_op == 0:
        integer = sum(integers)
    elif method.integer_op == 1:
        integer = min(integers, default=0)
    elif method.integer_op == 2:
        integer = max(integers, default=0)
    else:
        raise CommandInvalid(f"test.table: unknown integer operation {method.integer_op}")
    string = _string_op(strings, method.string_op) if strings else b""
    channel.legacy.send_legacy(
        channel.id,
        m08.TestTableOk(integer_result=integer & _MASKS[3], string_result=string).encode(),
    )
