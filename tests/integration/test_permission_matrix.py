"""The permission matrix through a real client (pika): every operation that names a
resource x the permission or rule it needs x allowed and refused, with RabbitMQ 3.10.8's
reply codes and texts; connection.open's 530s; the limits refusing the N+1th connection,
channel and queue; the failed-login delay.

The texts are RabbitMQ's: the same cases run against RabbitMQ with
``LEVERET_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2F`` (set up through its
management API, ``tests/integration/access_support.py``); tests marked ``leveret_only``
cover where Leveret differs on purpose (docs/compatibility.md). A refused operation must
also have changed nothing: where it can be seen through AMQP (an exchange or queue that
would have been made or deleted, messages that would have been taken, a binding or a
publish that would have routed), an administrator's connection looks before and after.

Set-up, in vhost ``authz-m``: user ``authz-mx`` may configure ``^(ok|c)-``, write
``^(ok|w)-`` and read ``^(ok|r)-``, so each case shows which permission an operation
needs (``c-q`` may only be configured, ``w-x`` only written to, ...); its topic
permissions on ``ok-t`` are write ``^{username}\\.`` and read ``^{vhost}\\.``. User
``authz-ax`` has ``.*`` everywhere and the ``impersonator`` tag: what even full
permissions may not do. guest (full permissions) makes the resources.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.sasl import plain_response
from tests.integration.access_support import Definitions, LeveretTarget, Target, target
from tests.integration.ctl_support import login

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

__all__ = ["target"]

pytestmark = [pytest.mark.interop]

V = "authz-m"
MX, MX_PW = "authz-mx", "pw-mx"
AX, AX_PW = "authz-ax", "pw-ax"
PASSWORDS = {MX: MX_PW, AX: AX_PW, "guest": "guest"}

QUEUES = ("ok-q", "c-q", "w-q", "r-q", "no-q", "c-qm", "c-qdel", "r-qdel", "sink-q", "sink-t")
DIRECT = ("ok-x", "c-x", "w-x", "r-x", "no-x", "c-xdel", "w-xdel")
TOPIC = ("ok-t", "ok-t2")


@pytest.fixture(scope="module")
def matrix(target: Target) -> Target:
    defs = Definitions(
        vhosts=[V],
        users={MX: (MX_PW, ()), AX: (AX_PW, ("impersonator",))},
        permissions=[
            ("guest", V, ".*", ".*", ".*"),
            (MX, V, "^(ok|c)-", "^(ok|w)-", "^(ok|r)-"),
            (AX, V, ".*", ".*", ".*"),
        ],
        topic_permissions=[(MX, V, "ok-t", "^{username}\\.", "^{vhost}\\.")],
    )
    target.apply(defs)
    conn = login(target.broker, "guest", "guest", V)
    try:
        ch = conn.channel()
        for queue in QUEUES:
            ch.queue_declare(queue)
        for exchange in DIRECT:
            ch.exchange_declare(exchange, "direct")
        for exchange in TOPIC:
            ch.exchange_declare(exchange, "topic")
        # Where a refused publish would have gone.
        ch.queue_bind("sink-q", "r-x", "sink")
        ch.queue_bind("sink-t", "ok-t", "#")
        ch.confirm_delivery()
        ch.basic_publish("", "c-qm", b"must stay")
    finally:
        conn.close()
    return target


# -- what an administrator sees ----------------------------------------------------------

Op = Callable[[Any], object]
Observe = Callable[[Any], object]


def _passive(conn: Any, declare: Callable[[Any], Any]) -> Any:
    """``declare``'s answer on a fresh channel, or None for 404."""
    ch = conn.channel()
    try:
        result = declare(ch)
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code != 404:
            raise
        return None
    ch.close()
    return result


def exchange_exists(name: str) -> Observe:
    return lambda conn: _passive(conn, lambda ch: ch.exchange_declare(name, passive=True))


def queue_exists(name: str) -> Observe:
    return lambda conn: _passive(conn, lambda ch: ch.queue_declare(name, passive=True)) is not None


def message_count(queue: str) -> Observe:
    return lambda conn: conn.channel().queue_declare(queue, passive=True).method.message_count


def routes(exchange: str, routing_key: str) -> Observe:
    """Whether a publish to ``exchange`` with ``routing_key`` reaches a queue (mandatory)."""

    def observe(conn: Any) -> bool:
        ch = conn.channel()
        ch.confirm_delivery()
        try:
            ch.basic_publish(exchange, routing_key, b"probe", mandatory=True)
        except pika.exceptions.UnroutableError:
            return False
        return True

    return observe


# -- the operations --------------------------------------------------------------------------


def declare_x(
    name: str,
    *,
    passive: bool = False,
    durable: bool = False,
    ae: str | None = None,
    kind: str = "direct",
) -> Op:
    arguments = {"alternate-exchange": ae} if ae is not None else None
    return lambda ch: ch.exchange_declare(
        name, kind, passive=passive, durable=durable, arguments=arguments
    )


def declare_q(
    name: str, *, passive: bool = False, exclusive: bool = False, dlx: str | None = None
) -> Op:
    arguments = {"x-dead-letter-exchange": dlx} if dlx is not None else None
    return lambda ch: ch.queue_declare(
        name, passive=passive, exclusive=exclusive, arguments=arguments
    )


def then(first: Op, second: Op) -> Op:
    def op(ch: Any) -> None:
        first(ch)
        second(ch)

    return op


def publish(exchange: str, routing_key: str, *, user_id: str | None = None) -> Op:
    def op(ch: Any) -> None:
        ch.confirm_delivery()
        ch.basic_publish(exchange, routing_key, b"x", pika.BasicProperties(user_id=user_id))

    return op


def tx_publish(exchange: str, routing_key: str) -> Op:
    def op(ch: Any) -> None:
        ch.tx_select()
        ch.basic_publish(exchange, routing_key, b"x")
        ch.tx_commit()

    return op


def consume(queue: str, *, auto_ack: bool = False) -> Op:
    return lambda ch: ch.basic_consume(queue, lambda *a: None, auto_ack=auto_ack)


# -- RabbitMQ's answers --------------------------------------------------------------------


def refused(user: str, what: str) -> str:
    return f"ACCESS_REFUSED - access to {what} in vhost '{V}' refused for user '{user}'"


def topic_refused(user: str, key: str, exchange: str = "ok-t") -> str:
    return (
        f"ACCESS_REFUSED - access to topic '{key}' in exchange '{exchange}' in vhost '{V}' "
        f"refused for user '{user}'"
    )


def reserved(kind: str, name: str) -> str:
    return f"ACCESS_REFUSED - {kind} name '{name}' contains reserved prefix 'amq.*'"


DEFAULT = "ACCESS_REFUSED - operation not permitted on the default exchange"


@dataclass(frozen=True)
class Case:
    operation: str
    rule: str  # the permission or rule the case is about
    user: str
    op: Op
    refusal: str = ""  # the start of RabbitMQ's reply text; "" = allowed
    code: int = 403
    # What an administrator sees that a refused operation must not change.
    observe: Observe | None = None

    @property
    def hard(self) -> bool:
        """Refused with a connection error (5xx but 506), not a channel one."""
        return self.code >= 500

    @property
    def id(self) -> str:
        outcome = f"refused-{self.code}" if self.refusal else "allowed"
        who = "" if self.user == MX else f"-{self.user}"
        return f"{self.operation}: {self.rule}{who} -> {outcome}"


MATRIX: list[Case] = [
    # exchange.declare: configure on the exchange (new or not); if new, amq. is reserved and
    # an alternate exchange needs read on the new one and write on the AE; passive: nothing.
    Case("exchange.declare", "configure, new", MX, declare_x("c-new-x")),
    Case("exchange.declare", "configure, new", MX, declare_x("w-new-x"),
         refused(MX, "exchange 'w-new-x'"), observe=exchange_exists("w-new-x")),
    Case("exchange.declare", "configure, existing", MX, declare_x("c-x")),
    Case("exchange.declare", "configure, existing", MX, declare_x("r-x"),
         refused(MX, "exchange 'r-x'")),
    Case("exchange.declare", "passive, no permission", MX, declare_x("no-x", passive=True)),
    Case("exchange.declare", "an unknown type, before the permission", MX,
         declare_x("w-new-x", kind="no-such-type"),
         "COMMAND_INVALID - unknown exchange type 'no-such-type'", code=503),
    Case("exchange.declare", "alternate-exchange: read new + write AE", MX,
         declare_x("ok-ae", ae="w-x")),
    Case("exchange.declare", "alternate-exchange: write on the AE", MX,
         declare_x("ok-ae2", ae="r-x"), refused(MX, "exchange 'r-x'"),
         observe=exchange_exists("ok-ae2")),
    Case("exchange.declare", "alternate-exchange: read on the new exchange", MX,
         declare_x("c-ae", ae="w-x"), refused(MX, "exchange 'c-ae'"),
         observe=exchange_exists("c-ae")),
    Case("exchange.declare", "the default exchange", AX, declare_x(""), DEFAULT),
    Case("exchange.declare", "the default exchange, passive", AX, declare_x("", passive=True),
         DEFAULT),
    Case("exchange.declare", "amq. prefix, new", AX, declare_x("amq.new"),
         reserved("exchange", "amq.new"), observe=exchange_exists("amq.new")),
    Case("exchange.declare", "amq. exchange that exists", AX,
         declare_x("amq.direct", durable=True)),
    Case("exchange.declare", "amq. exchange that exists", MX,
         declare_x("amq.direct", durable=True), refused(MX, "exchange 'amq.direct'")),
    # exchange.delete: configure, whether it exists or not; never "" or amq.*
    Case("exchange.delete", "configure", MX, lambda ch: ch.exchange_delete("c-xdel")),
    Case("exchange.delete", "configure", MX, lambda ch: ch.exchange_delete("w-xdel"),
         refused(MX, "exchange 'w-xdel'"), observe=exchange_exists("w-xdel")),
    Case("exchange.delete", "configure, missing", MX, lambda ch: ch.exchange_delete("w-gone"),
         refused(MX, "exchange 'w-gone'")),
    Case("exchange.delete", "the default exchange", AX, lambda ch: ch.exchange_delete(""),
         DEFAULT),
    Case("exchange.delete", "amq. exchange", AX, lambda ch: ch.exchange_delete("amq.direct"),
         "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost 'authz-m' not "
         "allowed", observe=exchange_exists("amq.direct")),
    # exchange.bind / unbind: write on the destination, read on the source, topic read
    Case("exchange.bind", "write dest + read source", MX,
         lambda ch: ch.exchange_bind("w-x", "r-x", "eb")),
    Case("exchange.bind", "write on the destination", MX,
         lambda ch: ch.exchange_bind("c-x", "r-x", "eb-c"), refused(MX, "exchange 'c-x'")),
    Case("exchange.bind", "read on the source", MX,
         lambda ch: ch.exchange_bind("w-x", "c-x", "eb-c"), refused(MX, "exchange 'c-x'")),
    Case("exchange.bind", "the default exchange as destination", AX,
         lambda ch: ch.exchange_bind("", "r-x", "eb"), DEFAULT),
    Case("exchange.bind", "the default exchange as source", MX,
         lambda ch: ch.exchange_bind("w-x", "", "eb"), DEFAULT),
    Case("exchange.bind", "topic read on the key", MX,
         lambda ch: ch.exchange_bind("w-x", "ok-t", f"{V}.eb")),
    Case("exchange.bind", "topic read on the key", MX,
         lambda ch: ch.exchange_bind("w-x", "ok-t", "bad.eb"), topic_refused(MX, "bad.eb")),
    Case("exchange.unbind", "write dest + read source", MX,
         lambda ch: ch.exchange_unbind("w-x", "r-x", "eb")),
    Case("exchange.unbind", "write on the destination", MX,
         lambda ch: ch.exchange_unbind("c-x", "r-x", "eb"), refused(MX, "exchange 'c-x'")),
    Case("exchange.unbind", "read on the source", MX,
         lambda ch: ch.exchange_unbind("w-x", "c-x", "eb"), refused(MX, "exchange 'c-x'")),
    Case("exchange.unbind", "topic read on the key", MX,
         lambda ch: ch.exchange_unbind("w-x", "ok-t", "bad.eb"), topic_refused(MX, "bad.eb")),
    Case("exchange.unbind", "the default exchange as source", AX,
         lambda ch: ch.exchange_unbind("w-x", "", "eb"), DEFAULT),
    # queue.declare: amq. reserved first, configure (server-named: on the generated name);
    # if new, a dead-letter exchange needs read on the queue and write on the DLX.
    Case("queue.declare", "configure, new", MX, declare_q("c-new-q")),
    Case("queue.declare", "configure, new", MX, declare_q("w-new-q"),
         refused(MX, "queue 'w-new-q'"), observe=queue_exists("w-new-q")),
    Case("queue.declare", "configure, existing", MX, declare_q("c-q")),
    Case("queue.declare", "configure, existing", MX, declare_q("r-q"), refused(MX, "queue 'r-q'")),
    Case("queue.declare", "passive, no permission", MX, declare_q("no-q", passive=True)),
    Case("queue.declare", "server-named: configure on amq.gen-*", MX,
         declare_q("", exclusive=True), "ACCESS_REFUSED - access to queue 'amq.gen-"),
    Case("queue.declare", "server-named: configure on amq.gen-*", AX,
         declare_q("", exclusive=True)),
    Case("queue.declare", "amq. prefix", AX, declare_q("amq.q"), reserved("queue", "amq.q"),
         observe=queue_exists("amq.q")),
    Case("queue.declare", "amq. prefix, before the permission", MX, declare_q("amq.q"),
         reserved("queue", "amq.q")),
    Case("queue.declare", "x-dead-letter-exchange: read queue + write DLX", MX,
         declare_q("ok-dlq1", dlx="w-x")),
    Case("queue.declare", "x-dead-letter-exchange: write on the DLX", MX,
         declare_q("ok-dlq2", dlx="r-x"), refused(MX, "exchange 'r-x'"),
         observe=queue_exists("ok-dlq2")),
    Case("queue.declare", "x-dead-letter-exchange: read on the queue", MX,
         declare_q("c-dlq", dlx="w-x"), refused(MX, "queue 'c-dlq'"),
         observe=queue_exists("c-dlq")),
    Case("queue.declare", "x-dead-letter-exchange: the default exchange", MX,
         declare_q("ok-dlq3", dlx=""), refused(MX, "exchange 'amq.default'")),
    # queue.delete: configure, whether it exists or not
    Case("queue.delete", "configure", MX, lambda ch: ch.queue_delete("c-qdel")),
    Case("queue.delete", "configure", MX, lambda ch: ch.queue_delete("r-qdel"),
         refused(MX, "queue 'r-qdel'"), observe=queue_exists("r-qdel")),
    Case("queue.delete", "configure, missing", MX, lambda ch: ch.queue_delete("w-gone-q"),
         refused(MX, "queue 'w-gone-q'")),
    # queue.purge: read
    Case("queue.purge", "read", MX, lambda ch: ch.queue_purge("r-q")),
    Case("queue.purge", "read", MX, lambda ch: ch.queue_purge("c-qm"),
         refused(MX, "queue 'c-qm'"), observe=message_count("c-qm")),
    # queue.bind / unbind: write on the queue, read on the exchange, topic read on the key
    Case("queue.bind", "write queue + read exchange", MX,
         lambda ch: ch.queue_bind("w-q", "r-x", "qb")),
    Case("queue.bind", "write on the queue", MX, lambda ch: ch.queue_bind("r-q", "r-x", "qb-r"),
         refused(MX, "queue 'r-q'"), observe=routes("r-x", "qb-r")),
    Case("queue.bind", "read on the exchange", MX, lambda ch: ch.queue_bind("w-q", "c-x", "qb-c"),
         refused(MX, "exchange 'c-x'"), observe=routes("c-x", "qb-c")),
    Case("queue.bind", "read on an amq. exchange", MX,
         lambda ch: ch.queue_bind("w-q", "amq.topic", "qb"), refused(MX, "exchange 'amq.topic'")),
    Case("queue.bind", "the default exchange", MX, lambda ch: ch.queue_bind("w-q", "", "qb"),
         DEFAULT),
    Case("queue.bind", "topic read on the key", MX,
         lambda ch: ch.queue_bind("w-q", "ok-t", f"{V}.#")),
    Case("queue.bind", "topic read on the key", MX,
         lambda ch: ch.queue_bind("w-q", "ok-t", "bad.#"), topic_refused(MX, "bad.#"),
         observe=routes("ok-t", "bad.qb")),
    Case("queue.bind", "the channel's last queue", MX,
         then(declare_q("ok-q"), lambda ch: ch.queue_bind("", "r-x", "qb-last"))),
    Case("queue.bind", "the channel's last queue", MX,
         then(declare_q("c-q"), lambda ch: ch.queue_bind("", "r-x", "qb-last-c")),
         refused(MX, "queue 'c-q'"), observe=routes("r-x", "qb-last-c")),
    Case("queue.unbind", "write queue + read exchange", MX,
         lambda ch: ch.queue_unbind("w-q", "r-x", "qb")),
    Case("queue.unbind", "write on the queue", MX,
         lambda ch: ch.queue_unbind("r-q", "r-x", "qb"), refused(MX, "queue 'r-q'")),
    Case("queue.unbind", "read on the exchange", MX,
         lambda ch: ch.queue_unbind("w-q", "c-x", "qb"), refused(MX, "exchange 'c-x'")),
    Case("queue.unbind", "topic read on the key", MX,
         lambda ch: ch.queue_unbind("w-q", "ok-t", "bad.#"), topic_refused(MX, "bad.#")),
    Case("queue.unbind", "the default exchange", MX, lambda ch: ch.queue_unbind("w-q", "", "qb"),
         DEFAULT),
    # basic.publish: write on the exchange before it is looked up; topic write on the key;
    # user-id must be the user's own unless an impersonator.
    Case("basic.publish", "write", MX, publish("w-x", "k")),
    Case("basic.publish", "write", MX, publish("r-x", "sink"), refused(MX, "exchange 'r-x'"),
         observe=message_count("sink-q")),
    Case("basic.publish", "write on the default exchange", MX, publish("", "sink-q"),
         refused(MX, "exchange 'amq.default'"), observe=message_count("sink-q")),
    Case("basic.publish", "write on the default exchange", AX, publish("", "no-such-queue")),
    Case("basic.publish", "write on an amq. exchange", MX, publish("amq.direct", "k"),
         refused(MX, "exchange 'amq.direct'")),
    Case("basic.publish", "write, before the exchange is looked up", MX, publish("r-gone", "k"),
         refused(MX, "exchange 'r-gone'")),
    Case("basic.publish", "write, then the exchange must exist", MX, publish("w-gone", "k"),
         f"NOT_FOUND - no exchange 'w-gone' in vhost '{V}'", code=404),
    Case("basic.publish", "write, in a transaction", MX, tx_publish("r-x", "sink"),
         refused(MX, "exchange 'r-x'"), observe=message_count("sink-q")),
    Case("basic.publish", "topic write on the key", MX, publish("ok-t", f"{MX}.k")),
    Case("basic.publish", "topic write on the key", MX, publish("ok-t", "bad.k"),
         topic_refused(MX, "bad.k"), observe=message_count("sink-t")),
    Case("basic.publish", "topic exchange without topic permissions", MX,
         publish("ok-t2", "any.k")),
    Case("basic.publish", "user-id of the user", MX, publish("w-x", "k", user_id=MX)),
    Case("basic.publish", "user-id of another user", MX, publish("w-x", "k", user_id="someone"),
         f"PRECONDITION_FAILED - user_id property set to 'someone' but authenticated user was "
         f"'{MX}'", code=406),
    Case("basic.publish", "user-id of another user, impersonator", AX,
         publish("w-x", "k", user_id="someone")),
    # basic.get / basic.consume: read (direct reply-to: nothing)
    Case("basic.get", "read", MX, lambda ch: ch.basic_get("r-q")),
    Case("basic.get", "read", MX, lambda ch: ch.basic_get("c-qm"), refused(MX, "queue 'c-qm'"),
         observe=message_count("c-qm")),
    Case("basic.consume", "read", MX, consume("r-q")),
    Case("basic.consume", "read", MX, consume("c-qm"), refused(MX, "queue 'c-qm'"),
         observe=message_count("c-qm")),
    Case("basic.consume", "the channel's last queue", MX,
         then(declare_q("c-q"), consume("")), refused(MX, "queue 'c-q'")),
    Case("basic.consume", "direct reply-to, no permission", MX,
         consume("amq.rabbitmq.reply-to", auto_ack=True)),
]  # fmt: skip


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in MATRIX]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", MATRIX, ids=[case.id for case in MATRIX])
def test_matrix(matrix: Target, case: Case) -> None:
    broker = matrix.broker
    admin = login(broker, "guest", "guest", V)
    conn = login(broker, case.user, PASSWORDS[case.user], V)
    try:
        ch = conn.channel()
        if not case.refusal:
            case.op(ch)
            assert ch.is_open
            return
        before = case.observe(admin) if case.observe is not None else None
        closed: type[pika.exceptions.AMQPError] = (
            pika.exceptions.ConnectionClosedByBroker
            if case.hard
            else pika.exceptions.ChannelClosedByBroker
        )
        with pytest.raises(closed) as info:
            case.op(ch)
        assert info.value.reply_code == case.code
        assert info.value.reply_text.startswith(case.refusal), info.value.reply_text
        if case.observe is not None:
            assert case.observe(admin) == before
        assert conn.is_open is not case.hard  # a channel error: the connection stays
    finally:
        for c in (conn, admin):
            if c.is_open:
                c.close()


# -- connection.open -----------------------------------------------------------------------


def _refused_login(broker: Broker, user: str, password: str, vhost: str) -> str:
    """The refusal's text; an accepted connection is closed and the test fails."""
    try:
        conn = login(broker, user, password, vhost)
    except pika.exceptions.ProbableAccessDeniedError as exc:
        return str(exc)
    conn.close()
    pytest.fail("the connection was accepted")


def test_vhost_without_permissions_is_530(matrix: Target) -> None:
    matrix.apply(Definitions(users={"authz-stranger": ("pw", ())}))
    text = _refused_login(matrix.broker, "authz-stranger", "pw", V)
    assert "(530)" in text
    assert f"NOT_ALLOWED - access to vhost '{V}' refused for user 'authz-stranger'" in text


def test_missing_vhost_is_530(matrix: Target) -> None:
    text = _refused_login(matrix.broker, MX, MX_PW, "authz-no-such-vhost")
    assert "(530)" in text
    assert "NOT_ALLOWED - vhost authz-no-such-vhost not found" in text


# -- limits --------------------------------------------------------------------------------


def _limited(
    target: Target, user: str, vhost_limits: dict[str, int], user_limits: dict[str, int]
) -> str:
    vhost = f"authz-lim-{user}"
    target.apply(
        Definitions(
            vhosts=[vhost], users={user: ("pw", ())}, permissions=[(user, vhost, ".*", ".*", ".*")]
        )
    )
    if vhost_limits:
        target.set_vhost_limits(vhost, vhost_limits)
    if user_limits:
        target.set_user_limits(user, user_limits)
    return vhost


@pytest.mark.parametrize(
    ("vhost_limits", "user_limits", "allowed", "text"),
    [
        (
            {"max-connections": 2},
            {},
            2,
            "NOT_ALLOWED - access to vhost 'authz-lim-{u}' refused for user '{u}': connection "
            "limit (2) is reached",
        ),
        (
            {},
            {"max-connections": 1},
            1,
            "NOT_ALLOWED - connection refused for user '{u}': user connection limit (1) is reached",
        ),
    ],
    ids=["vhost-max-connections", "user-max-connections"],
)
def test_the_n_plus_first_connection_is_refused(
    matrix: Target,
    vhost_limits: dict[str, int],
    user_limits: dict[str, int],
    allowed: int,
    text: str,
) -> None:
    user = f"authz-c{allowed}{len(vhost_limits)}"
    vhost = _limited(matrix, user, vhost_limits, user_limits)
    conns = [login(matrix.broker, user, "pw", vhost) for _ in range(allowed)]
    try:
        assert text.format(u=user) in _refused_login(matrix.broker, user, "pw", vhost)
        # A place freed is a place taken.
        conns.pop().close()
        conns.append(login(matrix.broker, user, "pw", vhost))
    finally:
        for conn in conns:
            conn.close()


def test_the_n_plus_first_channel_is_refused(matrix: Target) -> None:
    user = "authz-chans"
    vhost = _limited(matrix, user, {}, {"max-channels": 2})
    first = login(matrix.broker, user, "pw", vhost)
    conn = login(matrix.broker, user, "pw", vhost)
    try:
        first.channel()  # the limit counts the user's channels on all connections
        closed = conn.channel()
        closed.close()  # a closed channel no longer counts
        conn.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.channel()
    finally:
        for c in (first, conn):
            if c.is_open:
                c.close()
    assert info.value.reply_code == 530
    assert info.value.reply_text == (
        f"NOT_ALLOWED - number of channels opened for user '{user}' has reached the maximum "
        "allowed user limit of (2)"
    )
    # The refused connection's channel was given back: the user may open one again.
    again = login(matrix.broker, user, "pw", vhost)
    again.channel()
    again.close()


def test_the_n_plus_first_queue_is_refused(matrix: Target) -> None:
    user = "authz-queues"
    vhost = _limited(matrix, user, {"max-queues": 1}, {})
    conn = login(matrix.broker, user, "pw", vhost)
    try:
        ch = conn.channel()
        ch.queue_declare("q1")
        ch.queue_declare("q1")  # redeclaring is not a new queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("q2")
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as server_named:
            ch.queue_declare("", exclusive=True)
    finally:
        conn.close()
    assert (info.value.reply_code, info.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost '{vhost}' "
        "(1) is reached",
    )
    assert server_named.value.reply_code == 406
    assert server_named.value.reply_text.startswith(
        "PRECONDITION_FAILED - cannot declare queue 'amq.gen-"
    )


@pytest.mark.leveret_only
def test_node_connection_limit() -> None:
    target = LeveretTarget("--connection-max", "2")
    conns = []
    try:
        conns = [login(target.broker, "guest", "guest") for _ in range(2)]
        text = _refused_login(target.broker, "guest", "guest", "/")
        assert "connection refused: node connection limit (2) is reached" in text
    finally:
        for conn in conns:
            conn.close()
        target.close()


# -- Leveret's own rules (docs/compatibility.md) ---------------------------------------------


@pytest.mark.leveret_only
def test_a_revoked_permission_applies_at_once(matrix: Target) -> None:
    """RabbitMQ caches permission checks per channel until it closes; Leveret drops each
    connection's cache whenever the registry changes."""
    user = "authz-revoked"
    matrix.apply(Definitions(users={user: ("pw", ())}, permissions=[(user, V, ".*", "^ok-", ".*")]))
    conn = login(matrix.broker, user, "pw", V)
    try:
        ch = conn.channel()
        publish("ok-x", "k")(ch)
        matrix.clear_permissions(user, V)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("ok-x", "k", b"x")
    finally:
        if conn.is_open:
            conn.close()
    assert info.value.reply_text == refused(user, "exchange 'ok-x'")


def _frame(method: m.Method) -> bytes:
    payload = method.encode()
    return struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce"


def _refused_login_time(broker: Broker, capability: bool) -> tuple[float, bytes]:
    """Seconds from a bad start-ok to the refusal (the close method, or the end of the
    stream without one); a close method is answered with close-ok at once."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sock.recv(4096)
        start_ok = m.ConnectionStartOk(
            client_properties={"capabilities": {"authentication_failure_close": capability}},
            mechanism="PLAIN",
            response=plain_response(MX, "wrong"),
            locale="en_US",
        )
        started = time.monotonic()
        sock.sendall(_frame(start_ok))
        received = sock.recv(4096)
        elapsed = time.monotonic() - started
        if received:
            sock.sendall(_frame(m.ConnectionCloseOk()))
    return elapsed, received


@pytest.mark.leveret_only
@pytest.mark.parametrize("capability", [True, False], ids=["failure-close", "no-capability"])
def test_a_failed_login_costs_the_client_three_seconds(matrix: Target, capability: bool) -> None:
    """Every refused login is answered 3 s late (auth.authn.FAILURE_DELAY), with the 403
    close for clients with authentication_failure_close, by closing the socket for others
    (RabbitMQ 3.10.8's answers; RabbitMQ itself holds only clients that do not close)."""
    elapsed, received = _refused_login_time(matrix.broker, capability)
    assert 2.9 <= elapsed < 4.5
    if capability:
        assert received.startswith(b"\x01\x00\x00")  # a method frame on channel 0
        assert (
            b"ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
            b"For details see the broker logfile." in received
        )
    else:
        assert received == b""
