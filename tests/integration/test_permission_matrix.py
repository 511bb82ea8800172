"""The permission matrix through a real client (pika): each operation x allowed/denied x
resource kind, topic permissions, and the limits refusing the N+1th connection, channel
and queue, with RabbitMQ 3.10.8's reply codes and texts (recorded in
tests/unit/auth/test_access.py and test_connections.py).

Set-up: vhost ``m``; user ``mx`` (password ``pw``) with configure, write and read
``^ok`` there, topic permissions on ``ok-t`` (write and read ``^ok\\.``), and the
resources made by guest (who has full permissions in ``m``).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.sasl import plain_response
from tests.integration.ctl_support import login, new_data_dir, ok, start

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]

V = "m"


@pytest.fixture(scope="module")
def matrix_broker() -> Iterator[tuple[Broker, Any]]:
    data = new_data_dir()
    broker = start(data)
    try:
        ok(data, "add_vhost", V)
        ok(data, "set_permissions", "-p", V, "guest", ".*", ".*", ".*")
        ok(data, "add_user", "mx", "pw")
        ok(data, "set_permissions", "-p", V, "mx", "^ok", "^ok", "^ok")
        ok(data, "set_topic_permissions", "-p", V, "mx", "ok-t", "^ok\\.", "^ok\\.")
        admin = login(broker, "guest", "guest", V)
        ch = admin.channel()
        for queue in ("ok-q", "no-q", "ok-qdel"):
            ch.queue_declare(queue)
        for exchange, kind in [("ok-x", "direct"), ("no-x", "direct"), ("ok-xdel", "direct")]:
            ch.exchange_declare(exchange, kind)
        ch.exchange_declare("ok-t", "topic")
        ch.exchange_declare("no-xdel", "direct")
        ch.queue_declare("no-qdel")
        admin.close()
        yield broker, data
    finally:
        broker.stop()


def refused(what: str) -> str:
    return f"ACCESS_REFUSED - access to {what} in vhost '{V}' refused for user 'mx'"


def topic_refused(key: str) -> str:
    return (
        f"ACCESS_REFUSED - access to topic '{key}' in exchange 'ok-t' in vhost '{V}' refused "
        "for user 'mx'"
    )


Op = Callable[[Any], object]


def _publish(exchange: str, key: str) -> Op:
    def op(ch: Any) -> None:
        ch.confirm_delivery()
        ch.basic_publish(exchange, key, b"x")

    return op


# (operation, permission, resource kind, allowed?, the operation, RabbitMQ's text if denied)
MATRIX: list[tuple[str, str, str, bool, Op, str]] = [
    ("exchange.declare", "configure", "exchange", True,
     lambda ch: ch.exchange_declare("ok-new-x", "direct"), ""),
    ("exchange.declare", "configure", "exchange", False,
     lambda ch: ch.exchange_declare("no-new-x", "direct"), refused("exchange 'no-new-x'")),
    ("exchange.declare", "write", "alternate exchange", False,
     lambda ch: ch.exchange_declare("ok-ae", "direct", arguments={"alternate-exchange": "no-x"}),
     refused("exchange 'no-x'")),
    ("exchange.delete", "configure", "exchange", True,
     lambda ch: ch.exchange_delete("ok-xdel"), ""),
    ("exchange.delete", "configure", "exchange", False,
     lambda ch: ch.exchange_delete("no-xdel"), refused("exchange 'no-xdel'")),
    ("queue.declare", "configure", "queue", True,
     lambda ch: ch.queue_declare("ok-new-q"), ""),
    ("queue.declare", "configure", "queue", False,
     lambda ch: ch.queue_declare("no-new-q"), refused("queue 'no-new-q'")),
    ("queue.declare", "configure", "server-named queue", False,
     lambda ch: ch.queue_declare("", exclusive=True), "ACCESS_REFUSED - access to queue 'amq.gen-"),
    ("queue.declare", "write", "dead-letter exchange", False,
     lambda ch: ch.queue_declare("ok-dlx", arguments={"x-dead-letter-exchange": "no-x"}),
     refused("exchange 'no-x'")),
    ("queue.declare passive", "none", "queue", True,
     lambda ch: ch.queue_declare("no-q", passive=True), ""),
    ("queue.delete", "configure", "queue", True, lambda ch: ch.queue_delete("ok-qdel"), ""),
    ("queue.delete", "configure", "queue", False,
     lambda ch: ch.queue_delete("no-qdel"), refused("queue 'no-qdel'")),
    ("queue.purge", "read", "queue", True, lambda ch: ch.queue_purge("ok-q"), ""),
    ("queue.purge", "read", "queue", False,
     lambda ch: ch.queue_purge("no-q"), refused("queue 'no-q'")),
    ("queue.bind", "write+read", "queue, exchange", True,
     lambda ch: ch.queue_bind("ok-q", "ok-x", "k"), ""),
    ("queue.bind", "write", "queue", False,
     lambda ch: ch.queue_bind("no-q", "ok-x", "k"), refused("queue 'no-q'")),
    ("queue.bind", "read", "exchange", False,
     lambda ch: ch.queue_bind("ok-q", "no-x", "k"), refused("exchange 'no-x'")),
    ("queue.unbind", "write", "queue", False,
     lambda ch: ch.queue_unbind("no-q", "ok-x", "k"), refused("queue 'no-q'")),
    ("queue.unbind", "read", "exchange", False,
     lambda ch: ch.queue_unbind("ok-q", "no-x", "k"), refused("exchange 'no-x'")),
    ("exchange.bind", "write+read", "exchange, exchange", True,
     lambda ch: ch.exchange_bind("ok-x", "ok-t", "ok.k"), ""),
    ("exchange.bind", "write", "destination exchange", False,
     lambda ch: ch.exchange_bind("no-x", "ok-x", "k"), refused("exchange 'no-x'")),
    ("exchange.bind", "read", "source exchange", False,
     lambda ch: ch.exchange_bind("ok-x", "no-x", "k"), refused("exchange 'no-x'")),
    ("exchange.unbind", "write", "destination exchange", False,
     lambda ch: ch.exchange_unbind("no-x", "ok-x", "k"), refused("exchange 'no-x'")),
    ("basic.publish", "write", "exchange", True, _publish("ok-x", "k"), ""),
    ("basic.publish", "write", "exchange", False,
     _publish("no-x", "k"), refused("exchange 'no-x'")),
    ("basic.publish", "write", "default exchange", False,
     _publish("", "ok-q"), refused("exchange 'amq.default'")),
    ("basic.get", "read", "queue", True, lambda ch: ch.basic_get("ok-q"), ""),
    ("basic.get", "read", "queue", False,
     lambda ch: ch.basic_get("no-q"), refused("queue 'no-q'")),
    ("basic.consume", "read", "queue", True,
     lambda ch: ch.basic_consume("ok-q", lambda *a: None), ""),
    ("basic.consume", "read", "queue", False,
     lambda ch: ch.basic_consume("no-q", lambda *a: None), refused("queue 'no-q'")),
    ("basic.consume", "none", "direct reply-to", True,
     lambda ch: ch.basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=True), ""),
    ("basic.publish", "topic write", "routing key", True, _publish("ok-t", "ok.key"), ""),
    ("basic.publish", "topic write", "routing key", False,
     _publish("ok-t", "bad.key"), topic_refused("bad.key")),
    ("queue.bind", "topic read", "routing key", True,
     lambda ch: ch.queue_bind("ok-q", "ok-t", "ok.#"), ""),
    ("queue.bind", "topic read", "routing key", False,
     lambda ch: ch.queue_bind("ok-q", "ok-t", "bad.#"), topic_refused("bad.#")),
]  # fmt: skip


def _cases() -> list[Any]:
    cases = []
    for operation, permission, kind, allowed, op, text in MATRIX:
        case_id = f"{operation}-{permission}-{kind}-{'allowed' if allowed else 'denied'}"
        cases.append(pytest.param(allowed, op, text, id=case_id))
    return cases


@pytest.mark.parametrize(("allowed", "op", "text"), _cases())
def test_matrix(matrix_broker: tuple[Broker, Any], allowed: bool, op: Op, text: str) -> None:
    broker, _ = matrix_broker
    conn = login(broker, "mx", "pw", V)
    try:
        ch = conn.channel()
        if allowed:
            op(ch)
            return
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            op(ch)
        assert info.value.reply_code == 403
        assert info.value.reply_text.startswith(text)
    finally:
        if conn.is_open:
            conn.close()


# -- connection.open, limits, the failed-login delay ---------------------------------------


def test_vhost_without_permissions_is_530(matrix_broker: tuple[Broker, Any]) -> None:
    broker, data = matrix_broker
    ok(data, "add_user", "stranger", "pw")
    text = _refused_login(broker, "stranger", "pw", V)
    assert "(530) \"NOT_ALLOWED - access to vhost 'm' refused for user 'stranger'\"" in text


def _refused_login(broker: Broker, user: str, password: str, vhost: str) -> str:
    """The refusal's text; an accepted connection is closed and the test fails."""
    try:
        conn = login(broker, user, password, vhost)
    except pika.exceptions.ProbableAccessDeniedError as exc:
        return str(exc)
    conn.close()
    pytest.fail("the connection was accepted")


def _limited(data: Any, user: str, vhost_limits: str, user_limits: str) -> None:
    ok(data, "add_vhost", f"lim-{user}")
    ok(data, "add_user", user, "pw")
    ok(data, "set_permissions", "-p", f"lim-{user}", user, ".*", ".*", ".*")
    ok(data, "set_vhost_limits", "-p", f"lim-{user}", vhost_limits)
    ok(data, "set_user_limits", user, user_limits)


@pytest.mark.parametrize(
    ("vhost_limits", "user_limits", "allowed", "text"),
    [
        (
            '{"max-connections": 2}',
            "{}",
            2,
            "NOT_ALLOWED - access to vhost 'lim-{u}' refused for user '{u}': connection limit "
            "(2) is reached",
        ),
        (
            "{}",
            '{"max-connections": 1}',
            1,
            "NOT_ALLOWED - connection refused for user '{u}': user connection limit (1) is reached",
        ),
    ],
    ids=["vhost-max-connections", "user-max-connections"],
)
def test_the_n_plus_first_connection_is_refused(
    matrix_broker: tuple[Broker, Any],
    vhost_limits: str,
    user_limits: str,
    allowed: int,
    text: str,
) -> None:
    broker, data = matrix_broker
    user = f"u{allowed}{len(vhost_limits)}"
    _limited(data, user, vhost_limits, user_limits)
    conns = [login(broker, user, "pw", f"lim-{user}") for _ in range(allowed)]
    try:
        assert text.format(u=user) in _refused_login(broker, user, "pw", f"lim-{user}")
    finally:
        for conn in conns:
            conn.close()


def test_the_n_plus_first_channel_is_refused(matrix_broker: tuple[Broker, Any]) -> None:
    broker, data = matrix_broker
    _limited(data, "chans", "{}", '{"max-channels": 2}')
    conn = login(broker, "chans", "pw", "lim-chans")
    try:
        conn.channel()
        conn.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            conn.channel()
    finally:
        if conn.is_open:
            conn.close()
    assert info.value.reply_code == 530
    assert info.value.reply_text == (
        "NOT_ALLOWED - number of channels opened for user 'chans' has reached the maximum "
        "allowed user limit of (2)"
    )


def test_the_n_plus_first_queue_is_refused(matrix_broker: tuple[Broker, Any]) -> None:
    broker, data = matrix_broker
    _limited(data, "queues", '{"max-queues": 1}', "{}")
    conn = login(broker, "queues", "pw", "lim-queues")
    try:
        ch = conn.channel()
        ch.queue_declare("q1")
        ch.queue_declare("q1")  # redeclaring is not a new queue
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("q2")
    finally:
        conn.close()
    assert (info.value.reply_code, info.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim-queues' "
        "(1) is reached",
    )


def test_node_connection_limit() -> None:
    broker = start(new_data_dir(), "--connection-max", "2")
    conns = []
    try:
        conns = [login(broker, "guest", "guest") for _ in range(2)]
        text = _refused_login(broker, "guest", "guest", "/")
        assert "connection refused: node connection limit (2) is reached" in text
    finally:
        for conn in conns:
            conn.close()
        broker.stop()


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
            response=plain_response("mx", "wrong"),
            locale="en_US",
        )
        started = time.monotonic()
        sock.sendall(_frame(start_ok))
        received = sock.recv(4096)
        elapsed = time.monotonic() - started
        if received:
            sock.sendall(_frame(m.ConnectionCloseOk()))
    return elapsed, received


@pytest.mark.parametrize("capability", [True, False], ids=["failure-close", "no-capability"])
def test_a_failed_login_costs_the_client_three_seconds(
    matrix_broker: tuple[Broker, Any], capability: bool
) -> None:
    """Every refused login is answered 3 s late (auth.authn.FAILURE_DELAY), with the 403
    close for clients with authentication_failure_close, by closing the socket for others
    (RabbitMQ 3.10.8's answers; RabbitMQ itself holds only clients that do not close)."""
    broker, _ = matrix_broker
    elapsed, received = _refused_login_time(broker, capability)
    assert elapsed >= 2.9
    if capability:
        assert b"Login was refused using authentication mechanism PLAIN" in received
    else:
        assert received == b""
