"""The connection class end to end with pika's BlockingConnection: server properties and
capabilities, authentication and virtual hosts, tune negotiation, close handshakes and channel
lifecycle.

Every test here passes against RabbitMQ (``LEVERET_TEST_AMQP_URL``), except the ones marked
``leveret_only``, which need a broker process of their own.
"""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest

from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

# The capabilities the issue names; each must be advertised and true.
REQUIRED_CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "authentication_failure_close",
    "per_consumer_qos",
)


# --------------------------------------------------------------------------- connection.start


def test_server_properties(conn: Any) -> None:
    props = conn._impl.server_properties
    for key in ("product", "version", "platform", "copyright", "information"):
        assert isinstance(props.get(key), str), key
        assert props[key], key


def test_server_capabilities(conn: Any) -> None:
    capabilities = conn._impl.server_properties["capabilities"]
    assert isinstance(capabilities, dict)
    for capability in REQUIRED_CAPABILITIES:
        assert capabilities.get(capability) is True, capability
    # Every advertised capability is a boolean flag.
    assert all(isinstance(value, bool) for value in capabilities.values())


def test_pika_sees_confirm_support(conn: Any) -> None:
    """pika gates confirm_delivery() on publisher_confirms and basic.nack."""
    assert conn._impl.publisher_confirms
    assert conn._impl.basic_nack
    assert conn._impl.consumer_cancel_notify
    assert conn._impl.exchange_exchange_bindings
    conn.channel().confirm_delivery()


# --------------------------------------------------------------------------- authentication


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
@pytest.mark.parametrize(
    ("user", "password"), [("guest", "wrong"), ("no-such-user", "guest"), ("guest", "")]
)
def test_bad_credentials_refused_with_403(broker: Broker, user: str, password: str) -> None:
    """pika advertises authentication_failure_close, so the broker says 403 before closing."""
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as exc:
        connect(broker, credentials=pika.PlainCredentials(user, password))
    assert "(403)" in str(exc.value)
    assert "ACCESS_REFUSED" in str(exc.value)


def test_unknown_vhost_refused_with_530(broker: Broker, name: str) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
        connect(broker, virtual_host=name)
    assert "(530)" in str(exc.value)  # NOT_ALLOWED
    assert "NOT_ALLOWED" in str(exc.value)


def test_default_vhost_explicit(broker: Broker) -> None:
    with Opened(connect(broker, virtual_host="/")) as c:
        c.channel().queue_declare(queue="", exclusive=True)


# pure_only: auth/'s refusal, 3 s each (docs/architecture.md, "How it is tested")
@pytest.mark.pure_only
def test_broker_survives_refused_logins(broker: Broker) -> None:
    def refused() -> None:
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            connect(broker, credentials=pika.PlainCredentials("guest", "bad"))

    # At once: each refusal takes the broker's failed-login delay (3 s).
    with ThreadPoolExecutor(3) as pool:
        for future in [pool.submit(refused) for _ in range(3)]:
            future.result()
    with Opened(connect(broker)) as c:
        assert c.is_open


# --------------------------------------------------------------------------- tune


def test_heartbeat_negotiation_client_lower(broker: Broker) -> None:
    proposed: list[int] = []

    def choose(_conn: Any, server_value: int) -> int:
        proposed.append(server_value)
        return 7

    with Opened(connect(broker, heartbeat=choose)) as c:
        assert len(proposed) == 1
        assert proposed[0] >= 0  # the server's proposal (RabbitMQ: 60)
        assert c._impl.params.heartbeat == 7
        c.channel().queue_declare(queue="", exclusive=True)


def test_heartbeat_disabled_by_client(broker: Broker) -> None:
    with Opened(connect(broker, heartbeat=0)) as c:
        assert c._impl.params.heartbeat == 0
        c.channel().queue_declare(queue="", exclusive=True)


def test_short_heartbeat_keeps_busy_connection_alive(broker: Broker) -> None:
    """With heartbeat=1 both peers keep the link alive across several intervals."""
    with Opened(connect(broker, heartbeat=1)) as c:
        assert c._impl.params.heartbeat == 1
        c.process_data_events(time_limit=3.5)
        assert c.is_open
        c.channel().queue_declare(queue="", exclusive=True)


def test_frame_max_negotiation(broker: Broker) -> None:
    with Opened(connect(broker, frame_max=8192)) as c:
        assert c._impl.params.frame_max == 8192
        ch = c.channel()
        q = ch.queue_declare(queue="", exclusive=True).method.queue
        body = bytes(range(256)) * 200  # 51200 bytes: seven body frames each way
        ch.basic_publish(exchange="", routing_key=q, body=body)
        got: list[bytes] = []
        ch.basic_consume(queue=q, on_message_callback=lambda _c, _m, _p, b: got.append(b))
        assert pump(c, lambda: bool(got))
        assert got == [body]


def test_frame_max_server_proposal(broker: Broker) -> None:
    """Asking for more than the server offers gets the server's value (at least 4096)."""
    with Opened(connect(broker, frame_max=pika.spec.FRAME_MAX_SIZE)) as c:
        negotiated = c._impl.params.frame_max
        assert 4096 <= negotiated <= pika.spec.FRAME_MAX_SIZE


def test_channel_max_negotiation(broker: Broker) -> None:
    with Opened(connect(broker, channel_max=5)) as c:
        assert c._impl.params.channel_max == 5
        channels = [c.channel() for _ in range(5)]
        assert sorted(ch.channel_number for ch in channels) == [1, 2, 3, 4, 5]
        with pytest.raises(pika.exceptions.NoFreeChannels):
            c.channel()  # pika itself enforces the negotiated limit


def test_channel_beyond_channel_max_closes_connection(broker: Broker) -> None:
    """Opening one channel more than channel-max allows is a connection error, 530 NOT_ALLOWED."""
    with Opened(connect(broker, channel_max=3)) as c:
        for _ in range(3):
            c.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            c.channel(channel_number=4)
        assert exc.value.reply_code == 530
        assert not c.is_open


def test_server_channel_max_proposal(conn: Any) -> None:
    assert 0 < conn._impl.params.channel_max <= 65535


# --------------------------------------------------------------------------- close handshakes


def test_client_close(broker: Broker) -> None:
    c = connect(broker)
    ch = c.channel()
    q = ch.queue_declare(queue="", exclusive=True).method.queue
    ch.basic_consume(queue=q, on_message_callback=lambda *a: None)
    c.close()  # waits for connection.close-ok
    assert c.is_closed
    assert not ch.is_open


def test_client_close_with_reply_code(broker: Broker) -> None:
    c = connect(broker)
    c.close(reply_code=320, reply_text="going away")
    assert c.is_closed
    with Opened(connect(broker)) as again:
        assert again.is_open


def test_server_close_on_hard_error(broker: Broker, name: str) -> None:
    """A hard error: the broker sends connection.close with the code, pika answers close-ok."""
    c = connect(broker)
    try:
        ch = c.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            ch.exchange_declare(exchange=name, exchange_type="no-such-type")
        assert exc.value.reply_code == 503
        assert exc.value.reply_text.startswith("COMMAND_INVALID")
        assert c.is_closed
    finally:
        if c.is_open:
            c.close()
    with Opened(connect(broker)) as again:
        assert again.is_open


@pytest.mark.leveret_only
def test_server_shutdown_closes_with_320(fresh_broker: Broker) -> None:
    c = connect(fresh_broker)
    try:
        assert fresh_broker.process is not None
        fresh_broker.process.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            pump(c, lambda: c.is_closed, timeout=10)
        assert exc.value.reply_code == 320  # CONNECTION_FORCED
        assert fresh_broker.process.wait(15) == 0
    finally:
        if c.is_open:
            c.close()


# --------------------------------------------------------------------------- channels


def test_channel_close_then_reuse_connection(conn: Any) -> None:
    ch = conn.channel()
    q = ch.queue_declare(queue="", exclusive=True).method.queue
    ch.close()  # waits for channel.close-ok
    assert ch.is_closed
    again = conn.channel()
    again.basic_publish(exchange="", routing_key=q, body=b"after")
    assert again.basic_get(queue=q, auto_ack=True)[2] == b"after"


def test_channel_number_reused_after_close(conn: Any) -> None:
    ch = conn.channel(channel_number=9)
    ch.close()
    again = conn.channel(channel_number=9)
    again.queue_declare(queue="", exclusive=True)
    assert again.channel_number == 9


def test_soft_error_closes_only_the_channel(conn: Any, name: str) -> None:
    ch = conn.channel()
    keep = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare(queue=name, passive=True)
    assert exc.value.reply_code == 404
    assert exc.value.reply_text.startswith("NOT_FOUND")
    assert ch.is_closed
    assert conn.is_open
    assert keep.is_open
    keep.queue_declare(queue="", exclusive=True)
    # The number of the closed channel may be opened again.
    again = conn.channel(channel_number=ch.channel_number)
    again.queue_declare(queue="", exclusive=True)


def test_many_channels(conn: Any) -> None:
    channels = [conn.channel() for _ in range(50)]
    for ch in channels:
        ch.queue_declare(queue="", exclusive=True)
    for ch in channels[::2]:
        ch.close()
    for ch in channels[1::2]:
        assert ch.is_open
        ch.basic_qos(prefetch_count=1)


def test_many_connections(broker: Broker) -> None:
    conns: list[Any] = []
    try:
        while len(conns) < 20:
            conns.append(connect(broker))
        for c in conns:
            c.channel().queue_declare(queue="", exclusive=True)
    finally:
        for c in conns:
            if c.is_open:
                c.close()
