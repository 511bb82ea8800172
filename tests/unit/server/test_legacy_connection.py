"""The AMQP 0-8 and 0-9 front ends (server/legacy/), without sockets: RabbitMQ 3.10.8's
recorded answers (tests/data/rabbitmq-headers) replayed octet for octet, the translation
tables against the generated method sets, and the methods only the older versions have."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from leveret.model.broker import Broker
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m091
from leveret.server import frontend
from leveret.server.legacy.connection import LegacyConnection
from leveret.server.legacy.dialects import AMQP08, AMQP09, DIALECTS, Dialect
from leveret.server.legacy.handlers import (
    BOUND_OK,
    EXCHANGE_NOT_FOUND,
    NO_BINDINGS,
    NO_QUEUE_BOUND_WITH_RK,
    QUEUE_NOT_BOUND,
    QUEUE_NOT_FOUND,
    SPECIFIC_QUEUE_NOT_BOUND_WITH_RK,
)
from leveret.testing.client import new_shell
from leveret.testing.legacy_client import LegacyClient, LegacyContent

if TYPE_CHECKING:
    from leveret.server.shell.shell import Shell

DATA = Path(__file__).resolve().parents[2] / "data" / "rabbitmq-headers" / "captures.json"
CAPTURES: dict[str, Any] = json.loads(DATA.read_text())["headers"]
HEADER_DIALECT = {"AMQP 1 1 8 0": AMQP08, "AMQP 1 1 9 1": AMQP08, "AMQP 1 1 0 9": AMQP09}


def _frame(channel: int, payload: bytes) -> bytes:
    return framing.encode_method_frame(channel, payload)


def _shortstr(text: str) -> bytes:
    return bytes((len(text),)) + text.encode()


def _rabbit_login(conn: Shell, header: str) -> bytes:
    """The capture tool's login, octet for octet; returns what the server sent for it."""
    out = []

    def feed(data: bytes) -> None:
        conn.data_received(data, 0.0)
        out.append(b"".join(conn.take_output(0.0)))

    feed(bytes.fromhex(CAPTURES[header]["sent"]))
    feed(
        _frame(
            0,
            b"\x00\x0a\x00\x0b\x00\x00\x00\x00"
            + _shortstr("PLAIN")
            + struct.pack(">L", 12)
            + b"\x00guest\x00guest"
            + _shortstr("en_US"),
        )
    )
    feed(_frame(0, b"\x00\x0a\x00\x1f" + struct.pack(">HLH", 2047, 131072, 0)))
    feed(_frame(0, b"\x00\x0a\x00\x28" + _shortstr("/") + _shortstr("") + b"\x00"))
    feed(_frame(1, b"\x00\x14\x00\x0a" + _shortstr("")))
    return b"".join(out)


def _connection(header: str) -> Shell:
    """A connection's shell with the front end of ``header`` (as if it had chosen it)."""
    dialect = HEADER_DIALECT[header]
    return new_shell(
        lambda shell: LegacyConnection(shell, dialect, choose=frontend.choose),
        peer="127.0.0.1:1",
    )


def _split(data: bytes) -> list[framing.Frame]:
    return framing.FrameDecoder(frame_max=0).feed(data)


# -- RabbitMQ's recorded answers ---------------------------------------------------------


@pytest.mark.parametrize("header", sorted(HEADER_DIALECT))
def test_every_old_header_picks_its_front_end(header: str) -> None:
    octets = bytes.fromhex(CAPTURES[header]["sent"])
    factory = frontend.choose(octets)
    assert factory is not None
    assert factory is not frontend.DEFAULT_FRONT_END
    for cut in range(1, 8):
        assert frontend.choose(octets[:cut]) is None  # still a prefix of a listed header


@pytest.mark.parametrize("header", sorted(HEADER_DIALECT))
def test_connection_start_is_rabbitmqs_but_for_the_server_properties(header: str) -> None:
    conn = _connection(header)
    conn.data_received(bytes.fromhex(CAPTURES[header]["sent"]), 0.0)
    (ours,) = _split(b"".join(conn.take_output(0.0)))
    (theirs,) = _split(bytes.fromhex(CAPTURES[header]["reply"]))
    codec: Any = m08 if HEADER_DIALECT[header] is AMQP08 else m091
    a, b = codec.decode_method(ours[2]), codec.decode_method(theirs[2])
    assert (a.version_major, a.version_minor) == (b.version_major, b.version_minor)
    assert (a.mechanisms, a.locales) == (b.mechanisms, b.locales)
    assert set(b.server_properties) <= set(a.server_properties)
    if HEADER_DIALECT[header] is AMQP08:
        # Only 0-8's types: strings and an empty capabilities table.
        assert a.server_properties["capabilities"] == b.server_properties["capabilities"] == {}
        assert all(
            isinstance(v, str) for k, v in a.server_properties.items() if k != "capabilities"
        )
    else:
        assert a.server_properties["capabilities"]


@pytest.mark.parametrize("header", sorted(HEADER_DIALECT))
def test_the_handshake_after_start_is_octet_for_octet_rabbitmqs(header: str) -> None:
    conn = _connection(header)
    ours = _rabbit_login(conn, header)
    theirs = bytes.fromhex(CAPTURES[header]["handshake_received"])
    start_size = 8 + len(_split(theirs)[0][2])
    our_start = 8 + len(_split(ours)[0][2])
    # tune, open-ok and channel.open-ok (0-8's without the channel-id) as RabbitMQ sent them.
    assert ours[our_start:] == theirs[start_size:]


PROBES = [
    pytest.param(header, probe)
    for header in sorted(HEADER_DIALECT)
    for probe in sorted(CAPTURES[header]["probes"])
]


@pytest.mark.parametrize(("header", "probe"), PROBES)
def test_every_probe_is_answered_octet_for_octet_as_rabbitmq_did(header: str, probe: str) -> None:
    conn = _connection(header)
    _rabbit_login(conn, header)
    entry = CAPTURES[header]["probes"][probe]
    for hex_frame in entry["sent"]:
        conn.data_received(bytes.fromhex(hex_frame), 0.0)
    assert b"".join(conn.take_output(0.0)).hex() == entry["received"]
    # (RabbitMQ leaves closing the socket to the client after close-ok; Leveret closes it.)


# -- the translation tables ----------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_every_id_of_a_version_is_shared_renamed_refused_or_its_own(dialect: Dialect) -> None:
    codec: Any = m08 if dialect is AMQP08 else m09
    for key, cls in codec.METHODS.items():
        if key in dialect.own or key in dialect.renamed or key in dialect.refused:
            continue
        if key in dialect.outbound:
            continue  # a reply only the server sends, encoded by the version's codec
        # Shared: 0-9-1 decodes the version's encoding of it to the same field values.
        shared = m091.METHODS[key]
        sample = cls().encode() + dialect.padded.get(key, b"")
        assert m091.decode_method(sample).INDEX == shared.INDEX
    for key, target in dialect.renamed.items():
        assert codec.METHODS[key].NAME == m091.METHODS[target].NAME
    assert not dialect.own & set(dialect.renamed)
    for key in dialect.outbound:
        assert key not in codec.METHODS or key in m091.METHODS


def test_0_8_consume_with_and_without_qpids_arguments_table() -> None:
    client = LegacyClient.connect(AMQP08)
    client.handshake()
    client.open_channel(1)
    client.send(1, m08.QueueDeclare(queue="q"))
    client.expect(1, m08.QueueDeclareOk)
    client.send(1, m08.BasicConsume(queue="q", consumer_tag="plain"))
    client.expect(1, m08.BasicConsumeOk)
    # Qpid's 0-8 XML adds a trailing table: its octets, then the frame.
    with_table = m08.BasicConsume(queue="q", consumer_tag="qpid").encode() + b"\x00\x00\x00\x00"
    client.send_raw(framing.encode_method_frame(1, with_table))
    client.expect(1, m08.BasicConsumeOk)
    client.send_content(1, m08.BasicPublish(routing_key="q"), b"x")
    delivery = client.expect_content(1, m08.BasicDeliver)
    assert delivery.method.consumer_tag in ("plain", "qpid")


def test_0_8_close_channel_open_ok_and_no_blocked() -> None:
    client = LegacyClient.connect(AMQP08)
    client.handshake()
    client.open_channel(1)
    client.conn.client_capabilities = {"connection.blocked": True}
    client.shell.block("memory")
    client.shell.unblock(0.0)
    client.expect_nothing()  # 10/60 would be connection.close in 0-8
    client.send(1, m08.QueueDeclare(queue="q", passive=True))
    close = client.expect(1, m08.ChannelClose)
    assert close.reply_code == 404
    client.send(1, m08.ChannelCloseOk())
    client.shell.close(320, "shutdown", 0.0)
    close08 = client.expect(0, m08.ConnectionClose)
    assert (close08.reply_code, close08.reply_text) == (320, "CONNECTION_FORCED - shutdown")


def test_0_8_alerts_where_0_9_1_cancels() -> None:
    broker = Broker()
    client = LegacyClient.connect(AMQP08, broker)
    client.handshake()
    client.open_channel(1)
    client.send(1, m08.QueueDeclare(queue="gone"))
    client.expect(1, m08.QueueDeclareOk)
    client.send(1, m08.BasicConsume(queue="gone", consumer_tag="c"))
    client.expect(1, m08.BasicConsumeOk)
    broker.vhosts["/"].delete_queue("gone", owner=None)
    alert = client.expect(1, m08.ChannelAlert)
    assert alert.reply_code == 404
    assert alert.details == {"consumer-tag": "c"}


# -- the methods only the older versions have -------------------------------------------------


@pytest.fixture(params=DIALECTS, ids=lambda d: d.name)
def legacy(request: pytest.FixtureRequest) -> LegacyClient:
    client = LegacyClient.connect(request.param)
    client.handshake()
    client.open_channel(1)
    return client


def test_access_request_gets_a_ticket_that_every_method_accepts(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.AccessRequest(realm="/data", exclusive=True, active=True, read=True))
    ticket = legacy.expect(1, mm.AccessRequestOk).ticket
    assert ticket == 1
    legacy.send(1, mm.QueueDeclare(ticket=ticket, queue="t"))
    legacy.expect(1, mm.QueueDeclareOk)
    legacy.send(1, mm.QueueDeclare(ticket=12345, queue="t"))  # any ticket, as RabbitMQ
    legacy.expect(1, mm.QueueDeclareOk)


def test_exchange_bound_answers_every_case(legacy: LegacyClient) -> None:
    mm = legacy.methods

    def bound(exchange: str, routing_key: str = "", queue: str = "") -> int:
        legacy.send(1, mm.ExchangeBound(exchange=exchange, routing_key=routing_key, queue=queue))
        code: int = legacy.expect(1, mm.ExchangeBoundOk).reply_code
        return code

    legacy.send(1, mm.QueueDeclare(queue="bq"))
    legacy.expect(1, mm.QueueDeclareOk)
    legacy.send(1, mm.ExchangeDeclare(exchange="bx", type="direct"))
    legacy.expect(1, mm.ExchangeDeclareOk)
    assert bound("nope") == EXCHANGE_NOT_FOUND
    assert bound("bx", queue="nope") == QUEUE_NOT_FOUND
    assert bound("bx") == NO_BINDINGS
    assert bound("bx", queue="bq") == QUEUE_NOT_BOUND
    legacy.send(1, mm.QueueBind(queue="bq", exchange="bx", routing_key="k"))
    legacy.expect(1, mm.QueueBindOk)
    assert bound("bx") == BOUND_OK
    assert bound("bx", queue="bq") == BOUND_OK
    assert bound("bx", routing_key="k") == BOUND_OK
    assert bound("bx", routing_key="k", queue="bq") == BOUND_OK
    assert bound("bx", routing_key="other") == NO_QUEUE_BOUND_WITH_RK
    assert bound("bx", routing_key="other", queue="bq") == SPECIFIC_QUEUE_NOT_BOUND_WITH_RK
    # The default exchange binds every queue by its name.
    assert bound("", routing_key="bq", queue="bq") == BOUND_OK
    assert bound("", routing_key="zz", queue="bq") == SPECIFIC_QUEUE_NOT_BOUND_WITH_RK


def test_methods_of_the_version_a_client_may_not_send(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.FileDeliver(consumer_tag="x"))
    close = legacy.expect(0, mm.ConnectionClose)
    assert (close.reply_code, close.class_id, close.method_id) == (503, 70, 80)
    assert legacy.closed is False  # waits for close-ok
    legacy.send(0, mm.ConnectionCloseOk())
    assert legacy.closed


def test_own_methods_before_a_channel_is_open(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(2, mm.AccessRequest(realm="/data"))
    close = legacy.expect(0, mm.ConnectionClose)
    assert close.reply_code == 504


def test_own_methods_on_channel_zero(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(0, mm.AccessRequest(realm="/data"))
    close = legacy.expect(0, mm.ConnectionClose)
    assert close.reply_code == 505


def test_a_malformed_own_method_is_a_frame_error(legacy: LegacyClient) -> None:
    legacy.send_raw(framing.encode_method_frame(1, b"\x00\x1e\x00\x0a\x05ab"))
    close = legacy.expect(0, legacy.methods.ConnectionClose)
    assert close.reply_code == 501


def test_channel_ping_pong_ok_and_resume() -> None:
    client = LegacyClient.connect(AMQP09)
    client.handshake()
    client.open_channel(1)
    client.send(1, m09.ChannelPing())
    client.expect(1, m09.ChannelOk)
    client.expect(1, m09.ChannelPong)
    client.send(1, m09.ChannelOk())  # our pong completed
    client.send(1, m09.ChannelPong())
    client.expect(1, m09.ChannelOk)
    client.send(1, m09.ChannelResume(channel_id=b""))
    client.expect(1, m09.ChannelOk)
    client.send(1, m09.ChannelResume(channel_id=b"elsewhere"))
    close = client.expect(1, m09.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (404, 20, 50)


def test_basic_recover_sync_requeues_and_answers() -> None:
    client = LegacyClient.connect(AMQP09)
    client.handshake()
    client.open_channel(1)
    client.send(1, m09.QueueDeclare(queue="r"))
    client.expect(1, m09.QueueDeclareOk)
    client.send(1, m09.BasicConsume(queue="r", consumer_tag="c"))
    client.expect(1, m09.BasicConsumeOk)
    client.send_content(1, m09.BasicPublish(routing_key="r"), b"again")
    first = client.expect_content(1, m09.BasicDeliver)
    assert not first.method.redelivered
    client.send(1, m09.BasicRecoverSync(requeue=True))
    items = client.frames()
    assert isinstance(items[0].method, m09.BasicRecoverSyncOk) or any(
        isinstance(i.method, m09.BasicRecoverSyncOk) for i in items
    )
    again = [i for i in items if isinstance(i, LegacyContent)]
    assert [(i.body, i.method.redelivered) for i in again] == [(b"again", True)]


def test_0_8_basic_recover_has_no_reply_and_redelivers() -> None:
    client = LegacyClient.connect(AMQP08)
    client.handshake()
    client.open_channel(1)
    client.send(1, m08.QueueDeclare(queue="r"))
    client.expect(1, m08.QueueDeclareOk)
    client.send(1, m08.BasicConsume(queue="r", consumer_tag="c"))
    client.expect(1, m08.BasicConsumeOk)
    client.send_content(1, m08.BasicPublish(routing_key="r"), b"m")
    client.expect_content(1, m08.BasicDeliver)
    client.send(1, m08.BasicRecover(requeue=True))
    again = client.expect_content(1, m08.BasicDeliver)
    assert again.method.redelivered
    client.expect_nothing()


def test_0_8_test_class() -> None:
    client = LegacyClient.connect(AMQP08)
    client.handshake()
    client.open_channel(1)
    client.send(
        1,
        m08.TestInteger(integer_1=1, integer_2=300, integer_3=70000, integer_4=2**40, operation=0),
    )
    assert client.expect(1, m08.TestIntegerOk).result == 1 + 300 + 70000 + 2**40
    client.send(1, m08.TestInteger(integer_1=5, integer_2=3, integer_3=9, integer_4=4, operation=1))
    assert client.expect(1, m08.TestIntegerOk).result == 3
    client.send(1, m08.TestString(string_1="ab", string_2=b"cd", operation=0))
    assert client.expect(1, m08.TestStringOk).result == b"abcd"
    client.send(1, m08.TestString(string_1="ab", string_2=b"cd", operation=2))
    assert client.expect(1, m08.TestStringOk).result == b"cd"
    client.send(1, m08.TestTable(table={"a": 2, "b": 5, "s": "x"}, integer_op=2, string_op=0))
    ok = client.expect(1, m08.TestTableOk)
    assert (ok.integer_result, ok.string_result) == (5, b"x")
    client.send(1, m08.TestInteger(operation=9))
    assert client.expect(0, m08.ConnectionClose).reply_code == 503


# -- through the core to 0-9-1 and back ----------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_messages_cross_between_the_old_versions_and_0_9_1(dialect: Dialect) -> None:
    from leveret.protocol.amqp091._generated.properties import BasicProperties
    from leveret.testing import CodecClient

    broker = Broker()
    old = LegacyClient.connect(dialect, broker)
    old.handshake()
    old.open_channel(1)
    new = CodecClient.connect(broker)
    new.handshake()
    new.open_channel(1)
    mm = old.methods
    old.send(1, mm.QueueDeclare(queue="x"))
    old.expect(1, mm.QueueDeclareOk)
    props = old.properties.BasicProperties(
        content_type="text/plain", headers={"n": 1, "s": "v"}, delivery_mode=2, priority=4
    )
    old.send_content(1, mm.BasicPublish(routing_key="x"), b"old to new", props)
    new.send(1, m091.BasicGet(queue="x", no_ack=True))
    got = new.expect_content(1, m091.BasicGetOk)
    assert got.body == b"old to new"
    assert got.properties == BasicProperties(
        content_type="text/plain", headers={"n": 1, "s": "v"}, delivery_mode=2, priority=4
    )
    new.publish(1, "", "x", b"new to old", BasicProperties(correlation_id="c", reply_to="r"))
    old.send(1, mm.BasicGet(queue="x", no_ack=True))
    back = old.expect_content(1, mm.BasicGetOk)
    assert back.body == b"new to old"
    assert (back.properties.correlation_id, back.properties.reply_to) == ("c", "r")
