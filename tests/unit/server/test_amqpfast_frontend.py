"""The AMQP/Fast 0.8a2 front end (server/amqpfast/) in memory: the project's FastClient
against FastConnection on a real core, with a 0-9-1 CodecClient on the same broker for the
messages that cross between the protocols."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqpfast.commands import MessageHeader
from leveret.protocol.amqpfast.events import ServiceType
from leveret.server import frontend
from leveret.server.amqpfast import FastConnection
from leveret.testing import CodecClient
from leveret.testing.amqpfast_client import (
    ChannelClosed,
    ConnectionClosed,
    Created,
    Delivered,
    FastClient,
    HandleClosed,
    Indexed,
    Replied,
)
from leveret.testing.client import feed, new_shell

if TYPE_CHECKING:
    from leveret.testing.amqpfast_client import ClientEvent


class Pair:
    """A FastClient wired to a FastConnection of ``broker``."""

    def __init__(self, broker: Broker, **client_args: object) -> None:
        self.broker = broker
        self.shell = new_shell(
            FastConnection, broker, UserStore.with_default_user(), peer="127.0.0.1:1"
        )
        conn = self.shell.front
        assert isinstance(conn, FastConnection)
        self.conn = conn
        self.client = FastClient(**client_args)  # type: ignore[arg-type]
        self.now = 0.0

    def pump(self) -> list[ClientEvent]:
        events: list[ClientEvent] = []
        while True:
            out = self.client.data_to_send()
            if out:
                feed(self.shell, out, self.now)
            back = b"".join(self.shell.take_output(self.now))
            if not out and not back:
                return events
            events += self.client.receive_data(back)

    def login(self) -> list[ClientEvent]:
        self.client.initiate()
        return self.pump()


def _replies(events: list[ClientEvent]) -> list[tuple[str, int, int]]:
    return [(e.level, e.confirm_tag, e.reply_code) for e in events if isinstance(e, Replied)]


@pytest.fixture
def broker() -> Broker:
    return Broker()


@pytest.fixture
def amqp(broker: Broker) -> CodecClient:
    client = CodecClient.connect(broker)
    client.handshake()
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.expect(1, m.QueueDeclareOk)
    return client


@pytest.fixture
def fast(broker: Broker) -> Pair:
    pair = Pair(broker, client_name="app")
    pair.login()
    pair.client.open_channel(1, confirm_tag=1)
    pair.client.open_handle(
        1, 1, service=ServiceType.QUEUE, dest_name="q", producer=True, consumer=True
    )
    assert _replies(pair.pump()) == [("channel", 1, 200)]
    return pair


def test_the_initiation_picks_the_fast_front_end() -> None:
    factory = frontend.choose(b"\x80")
    assert factory is frontend.choose(b"\x80\x01")
    assert factory is not None
    assert factory is not frontend.DEFAULT_FRONT_END
    # 0-9-1's choice is unchanged.
    assert frontend.choose(b"AMQP\x00\x00\x09\x01") is frontend.DEFAULT_FRONT_END


def test_login_and_vhost_refusals(broker: Broker) -> None:
    bad = Pair(broker, password="wrong")
    # A refusal waits for the login delay.
    assert not any(isinstance(e, ConnectionClosed) for e in bad.login())
    bad.now = FAILURE_DELAY
    bad.shell.tick(bad.now)
    events = bad.pump()
    assert any(isinstance(e, ConnectionClosed) and e.reply_code == 403 for e in events)
    nowhere = Pair(broker, virtual_path="/nowhere")
    events = nowhere.login()
    assert any(isinstance(e, ConnectionClosed) and e.reply_code == 402 for e in events)
    assert nowhere.conn.client is None


def test_a_fast_message_is_consumed_over_0_9_1_with_its_header(
    fast: Pair, amqp: CodecClient
) -> None:
    header = MessageHeader(
        persistent=True,
        priority=7,
        mime_type="text/plain",
        encoding="utf-8",
        identifier="msg-1",
        headers={"Color": "red", "Size": 3},
    )
    fast.client.send(1, b"hello 0-9-1", header=header, confirm_tag=2)
    assert _replies(fast.pump()) == [("handle", 2, 200)]
    amqp.send(1, m.BasicGet(queue="q", no_ack=True))
    got = amqp.expect_content(1, m.BasicGetOk)
    assert got.body == b"hello 0-9-1"
    assert got.properties == BasicProperties(
        content_type="text/plain",
        content_encoding="utf-8",
        headers={"Color": "red", "Size": 3},
        delivery_mode=2,
        priority=7,
        message_id="msg-1",
    )


def test_0_9_1_messages_are_delivered_within_the_prefetch_and_acknowledged(
    fast: Pair, amqp: CodecClient
) -> None:
    props = BasicProperties(
        content_type="a/b", headers={"x-death": "dropped", "Kept": 1, "Flag": True}
    )
    for body in (b"one", b"two", b"three"):
        amqp.publish(1, "", "q", body, props)
    fast.client.consume(1, prefetch=2)
    first = [e for e in fast.pump() if isinstance(e, Delivered)]
    assert [e.body for e in first] == [b"one", b"two"]
    assert first[0].header.mime_type == "a/b"
    assert first[0].header.headers == {"Kept": 1}  # no bool, no x-death in a Fast table
    fast.client.ack(1, first[1].message_nbr)  # acknowledges 1 and 2
    later = [e for e in fast.pump() if isinstance(e, Delivered)]
    assert [e.body for e in later] == [b"three"]
    fast.client.ack(1, later[0].message_nbr)
    fast.pump()
    amqp.send(1, m.QueueDeclare(queue="q", passive=True))
    assert amqp.expect(1, m.QueueDeclareOk).message_count == 0


def test_unget_and_closing_the_handle_give_messages_back(
    fast: Pair, amqp: CodecClient, broker: Broker
) -> None:
    amqp.publish(1, "", "q", b"a")
    amqp.publish(1, "", "q", b"b")
    fast.client.consume(1, prefetch=1)
    (a,) = [e for e in fast.pump() if isinstance(e, Delivered)]
    fast.client.unget(1, a.message_nbr)
    again = [e for e in fast.pump() if isinstance(e, Delivered)]
    assert [(e.body, e.redelivered) for e in again] == [(b"a", True)]
    fast.client.close_handle(1)
    events = fast.pump()
    assert any(isinstance(e, HandleClosed) for e in events)
    assert broker.vhosts["/"].queues["q"].message_count == 2


def test_a_nameless_temporary_queue_is_created_and_goes_with_its_channel(
    fast: Pair, broker: Broker, amqp: CodecClient
) -> None:
    fast.client.open_handle(1, 2, service=ServiceType.QUEUE, consumer=True, temporary=True)
    (created,) = [e for e in fast.pump() if isinstance(e, Created)]
    name = created.dest_name
    assert name in broker.vhosts["/"].queues
    amqp.publish(1, "", name, b"reply")
    fast.client.consume(2, prefetch=5)
    assert [e.body for e in fast.pump() if isinstance(e, Delivered)] == [b"reply"]
    fast.client.close_channel(1)
    assert any(isinstance(e, ChannelClosed) for e in fast.pump())
    assert name not in broker.vhosts["/"].queues


def test_topics_publish_to_amq_topic_and_subscriptions_bind_to_it(
    fast: Pair, amqp: CodecClient, broker: Broker
) -> None:
    amqp.send(1, m.QueueBind(queue="q", exchange="amq.topic", routing_key="news.#"))
    amqp.expect(1, m.QueueBindOk)
    fast.client.open_handle(1, 3, service=ServiceType.TOPIC, dest_name="news.", producer=True)
    fast.client.open_handle(1, 4, service=ServiceType.TOPIC, dest_name="news.*", consumer=True)
    fast.client.consume(4, prefetch=10)
    fast.pump()
    fast.client.send(3, b"story", dest_name="sport")
    got = [e for e in fast.pump() if isinstance(e, Delivered)]
    assert [(e.body, e.dest_name) for e in got] == [(b"story", "news.sport")]
    amqp.send(1, m.BasicGet(queue="q", no_ack=True))
    delivered = amqp.expect_content(1, m.BasicGetOk)
    assert isinstance(delivered.method, m.BasicGetOk)
    assert (delivered.body, delivered.method.routing_key) == (b"story", "news.sport")
    # A temporary subscription's queue goes with its handle.
    vhost = broker.vhosts["/"]
    subscription = fast.conn.handles[4].subscription
    assert subscription in vhost.queues
    fast.client.close_handle(4)
    fast.pump()
    assert subscription not in vhost.queues


def test_durable_subscriptions_outlive_the_connection_until_cancelled(
    broker: Broker, amqp: CodecClient
) -> None:
    def subscribe() -> tuple[Pair, list[ClientEvent]]:
        pair = Pair(broker, client_name="reader")
        pair.login()
        pair.client.open_channel(1)
        pair.client.open_handle(1, 1, service=ServiceType.TOPIC, dest_name="t", consumer=True)
        pair.client.consume(1, prefetch=10, identifier="sub")
        return pair, pair.pump()

    first, _ = subscribe()
    assert "reader.sub" in broker.vhosts["/"].queues
    first.conn.connection_lost()
    amqp.publish(1, "amq.topic", "t", b"while away")
    second, events = subscribe()
    assert [e.body for e in events if isinstance(e, Delivered)] == [b"while away"]
    second.client.cancel(1, identifier="sub")
    second.pump()
    assert "reader.sub" not in broker.vhosts["/"].queues


def test_flow_pauses_a_consumer(fast: Pair, amqp: CodecClient) -> None:
    fast.client.consume(1, prefetch=10)
    fast.pump()
    fast.client.flow(1, pause=True)
    fast.pump()
    amqp.publish(1, "", "q", b"held")
    assert not [e for e in fast.pump() if isinstance(e, Delivered)]
    fast.client.flow(1, pause=False)
    assert [e.body for e in fast.pump() if isinstance(e, Delivered)] == [b"held"]


def test_a_transacted_channel_publishes_on_commit_only(broker: Broker) -> None:
    pair = Pair(broker)
    pair.login()
    queue = broker.vhosts["/"].declare_queue("tq", owner=None)
    pair.client.open_channel(1, transacted=True)
    pair.client.open_handle(1, 1, service=ServiceType.QUEUE, dest_name="tq", producer=True)
    pair.client.send(1, b"later")
    pair.pump()
    assert queue.message_count == 0
    pair.client.rollback(1, confirm_tag=5)
    assert _replies(pair.pump()) == [("channel", 5, 200)]
    pair.client.send(1, b"now")
    pair.client.commit(1, confirm_tag=6)
    assert _replies(pair.pump()) == [("channel", 6, 200)]
    assert queue.message_count == 1


def test_query_and_browse_number_the_ready_messages(fast: Pair, amqp: CodecClient) -> None:
    for body in (b"m1", b"m2", b"m3"):
        amqp.publish(1, "", "q", body)
    fast.client.open_handle(1, 5, service=ServiceType.QUEUE, dest_name="q", browser=True)
    fast.client.query(5)
    (index,) = [e for e in fast.pump() if isinstance(e, Indexed)]
    assert index.message_list == b"1-3"
    fast.client.browse(5, 2)
    (browsed,) = [e for e in fast.pump() if isinstance(e, Delivered)]
    assert (browsed.body, browsed.delivered) == (b"m2", False)
    fast.client.browse(5, 9, confirm_tag=8)
    assert _replies(fast.pump()) == [("handle", 8, 310)]


def test_consuming_a_missing_queue_or_losing_it_closes_the_handle(
    fast: Pair, broker: Broker, amqp: CodecClient
) -> None:
    fast.client.open_handle(1, 6, service=ServiceType.QUEUE, dest_name="missing", consumer=True)
    fast.client.consume(6)
    closed = [e for e in fast.pump() if isinstance(e, HandleClosed)]
    assert [(e.handle_id, e.reply_code) for e in closed] == [(6, 404)]
    fast.client.consume(1)
    fast.pump()
    broker.vhosts["/"].delete_queue("q", owner=None)
    closed = [e for e in fast.pump() if isinstance(e, HandleClosed)]
    assert [(e.handle_id, e.reply_code) for e in closed] == [(1, 404)]


def test_the_connection_gives_back_what_it_held(
    fast: Pair, amqp: CodecClient, broker: Broker
) -> None:
    amqp.publish(1, "", "q", b"unacked")
    fast.client.consume(1, prefetch=1)
    assert [e.body for e in fast.pump() if isinstance(e, Delivered)] == [b"unacked"]
    fast.client.close()
    assert any(isinstance(e, ConnectionClosed) for e in fast.pump())
    assert fast.conn.should_close_transport
    assert fast.conn.client is None
    assert broker.vhosts["/"].queues["q"].message_count == 1
