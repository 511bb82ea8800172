"""The classes AMQP 0-8 and 0-9 have beyond 0-9-1 (server/legacy/: file, stream, message,
dtx, tunnel), driven in memory by the project's ``LegacyClient`` on a real core, with a 0-9-1
``CodecClient`` on the same broker for the messages that cross between the protocols."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from leveret.auth.users import UserStore
from leveret.convert.legacy import FILENAME_HEADER
from leveret.model.broker import Broker
from leveret.model.dtx import XA_OK
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09
from leveret.protocol.amqp09.wiretypes import Content
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp091.connection import Limits
from leveret.protocol.amqpfast.events import ServiceType
from leveret.server.legacy.channel import LegacyChannel
from leveret.server.legacy.dialects import AMQP08, AMQP09, DIALECTS, Dialect
from leveret.server.legacy.dtx import xid_of
from leveret.server.legacy.filexfer import WINDOW, message_identifier
from leveret.server.legacy.ratestream import Pacer
from leveret.testing import CodecClient, FastClient, LegacyClient
from leveret.testing.amqpfast_client import Connected, Delivered, Replied
from leveret.testing.legacy_client import LegacyContent, LegacyMethod

Q = "q"


@pytest.fixture
def broker() -> Broker:
    broker = Broker()
    broker.vhosts["/"].declare_queue(Q, owner=None)
    return broker


@pytest.fixture
def amqp(broker: Broker) -> CodecClient:
    client = CodecClient.connect(broker)
    client.handshake()
    client.open_channel(1)
    return client


def _legacy(
    broker: Broker,
    dialect: Dialect = AMQP09,
    *,
    users: UserStore | None = None,
    limits: Limits | None = None,
) -> LegacyClient:
    client = LegacyClient.connect(dialect, broker, users, limits=limits)
    client.handshake()
    client.open_channel(1)
    return client


@pytest.fixture(params=DIALECTS, ids=lambda d: d.name)
def legacy(request: pytest.FixtureRequest, broker: Broker) -> LegacyClient:
    return _legacy(broker, request.param)


def _channel(client: LegacyClient, channel_id: int = 1) -> LegacyChannel:
    channel = client.conn.channels[channel_id]
    assert isinstance(channel, LegacyChannel)
    return channel


def _count(broker: Broker, queue: str = Q) -> int:
    return broker.vhosts["/"].queues[queue].message_count


def _get(amqp: CodecClient, queue: str = Q) -> Any:
    amqp.send(1, m.BasicGet(queue=queue, no_ack=True))
    return amqp.expect_content(1, m.BasicGetOk)


def _closed(client: LegacyClient) -> tuple[int, int, int]:
    """The reply code, class and method of the channel.close the server sent last."""
    close = [i.method for i in client.frames() if isinstance(i.method, client.methods.ChannelClose)]
    assert close, "no channel.close"
    return close[-1].reply_code, close[-1].class_id, close[-1].method_id


def _stage(client: LegacyClient, body: bytes, props: Any, *, announced: int | None = None) -> None:
    """file.stage with a content header announcing ``announced`` octets (default: the body's)
    and the body frames of ``body`` only."""
    mm = client.methods
    size = len(body) if announced is None else announced
    header = struct.pack(">HHQ", 70, 0, size) + props.encode()
    data = framing.encode_method_frame(1, mm.FileStage().encode())
    data += struct.pack(">BHL", 2, 1, len(header)) + header + b"\xce"
    if body:
        data += struct.pack(">BHL", 3, 1, len(body)) + body + b"\xce"
    client.send_raw(data)


# -- file ---------------------------------------------------------------------------------


def test_a_staged_file_is_published_and_read_over_0_9_1(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    props = legacy.properties.FileProperties(
        content_type="application/pdf", filename="report.pdf", headers={"Dept": "ops"}
    )
    legacy.send(1, mm.FileOpen(identifier="f1", content_size=11))
    assert legacy.expect(1, mm.FileOpenOk).staged_size == 0
    _stage(legacy, b"hello files", props)
    legacy.send(1, mm.FilePublish(exchange="", routing_key=Q, identifier="f1"))
    legacy.expect_nothing()
    got = _get(amqp)
    assert got.body == b"hello files"
    assert got.properties == BasicProperties(
        content_type="application/pdf",
        headers={"Dept": "ops", FILENAME_HEADER: "report.pdf"},
        delivery_mode=2,
    )


def test_staging_restarts_from_the_offset_after_a_dropped_connection(
    broker: Broker, amqp: CodecClient
) -> None:
    first = _legacy(broker)
    first.send(1, m09.FileOpen(identifier="big", content_size=10))
    assert first.expect(1, m09.FileOpenOk).staged_size == 0
    _stage(first, b"0123", p09.FileProperties(filename="big.bin"), announced=10)
    first.conn.connection_lost()  # mid-stage: 4 of 10 octets arrived

    second = _legacy(broker)
    second.send(1, m09.FileOpen(identifier="big", content_size=10))
    assert second.expect(1, m09.FileOpenOk).staged_size == 4
    _stage(second, b"456789", p09.FileProperties(filename="big.bin"))
    second.send(1, m09.FilePublish(routing_key=Q, identifier="big"))
    got = _get(amqp)
    assert got.body == b"0123456789"
    assert got.properties.headers == {FILENAME_HEADER: "big.bin"}


def test_staging_belongs_to_its_user(broker: Broker) -> None:
    users = UserStore.with_default_user()
    users.add_user("other", "pw")
    users.set_permissions("other", "/", ".*", ".*", ".*")
    first = _legacy(broker, users=users)
    first.send(1, m09.FileOpen(identifier="mine", content_size=4))
    first.expect(1, m09.FileOpenOk)
    _stage(first, b"ab", p09.FileProperties(), announced=4)
    client = LegacyClient.connect(AMQP09, broker, users)
    client.send_raw(min(AMQP09.headers))
    client.expect(0, m09.ConnectionStart)
    client.send(
        0,
        m09.ConnectionStartOk(mechanism="PLAIN", response=b"\x00other\x00pw", locale="en_US"),
    )
    tune = client.expect(0, m09.ConnectionTune)
    client.send(0, m09.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max))
    client.send(0, m09.ConnectionOpen(virtual_host="/"))
    client.expect(0, m09.ConnectionOpenOk)
    client.open_channel(1)
    client.send(1, m09.FileOpen(identifier="mine", content_size=4))
    assert client.expect(1, m09.FileOpenOk).staged_size == 0


def test_file_publish_errors(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.FilePublish(routing_key=Q, identifier="nothing"))
    assert _closed(legacy) == (404, 70, 60)
    legacy.open_channel(2)
    legacy.send(2, mm.FileOpen(identifier="half", content_size=6))
    legacy.expect(2, mm.FileOpenOk)
    legacy.send(2, mm.FilePublish(routing_key=Q, identifier="half"))
    close = legacy.expect(2, mm.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 70, 60)


def test_a_stage_that_does_not_add_up_is_refused(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.FileOpen(identifier="x", content_size=6))
    legacy.expect(1, mm.FileOpenOk)
    _stage(legacy, b"12345678", legacy.properties.FileProperties())
    close = legacy.expect(1, mm.ChannelClose)
    assert (close.reply_code, close.class_id) == (406, 70)


def test_a_mandatory_file_that_cannot_be_routed_comes_back(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.FileOpen(identifier="r", content_size=3))
    legacy.expect(1, mm.FileOpenOk)
    _stage(legacy, b"ret", legacy.properties.FileProperties(filename="r.txt"))
    legacy.send(1, mm.FilePublish(routing_key="nowhere", mandatory=True, identifier="r"))
    returned = legacy.expect_content(1, mm.FileReturn)
    assert (returned.method.reply_code, returned.method.routing_key) == (312, "nowhere")
    assert (returned.body, returned.properties.filename) == (b"ret", "r.txt")


def test_a_file_consumer_is_offered_the_message_and_staged_from_its_offset(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    props = BasicProperties(message_id="m-1", headers={FILENAME_HEADER: "a.txt"})
    amqp.publish(1, "", Q, b"abcdefgh", props)
    legacy.send(1, mm.FileConsume(queue=Q, consumer_tag="fc"))
    assert legacy.expect(1, mm.FileConsumeOk).consumer_tag == "fc"
    offer = legacy.expect(1, mm.FileOpen)
    assert offer.content_size == 8
    # The SHA-1 of the properties the file consumer gets, and the body.
    file_props = legacy.properties.FileProperties(message_id="m-1", filename="a.txt")
    assert offer.identifier == message_identifier(file_props.encode(), b"abcdefgh")
    legacy.send(1, mm.FileOpenOk(staged_size=3))  # the client holds 3 octets already
    stage = legacy.expect_content(1, mm.FileStage)
    assert stage.body == b"defgh"
    assert (stage.properties.filename, stage.properties.message_id) == ("a.txt", "m-1")
    assert stage.properties.headers is None
    deliver = legacy.expect(1, mm.FileDeliver)
    assert (deliver.consumer_tag, deliver.identifier, deliver.routing_key) == (
        "fc",
        offer.identifier,
        Q,
    )
    assert broker.vhosts["/"].queues[Q].unacked_count == 1
    legacy.send(1, mm.FileAck(delivery_tag=deliver.delivery_tag))
    legacy.expect_nothing()
    assert broker.vhosts["/"].queues[Q].unacked_count == 0
    assert _count(broker) == 0


def test_a_file_delivery_is_offered_again_with_its_identifier_after_a_drop(
    broker: Broker, amqp: CodecClient
) -> None:
    amqp.publish(1, "", Q, b"payload")
    first = _legacy(broker)
    first.send(1, m09.FileConsume(queue=Q, consumer_tag="a"))
    first.expect(1, m09.FileConsumeOk)
    identifier = first.expect(1, m09.FileOpen).identifier
    first.conn.connection_lost()  # before open-ok: the delivery goes back
    second = _legacy(broker)
    second.send(1, m09.FileConsume(queue=Q, consumer_tag="b"))
    second.expect(1, m09.FileConsumeOk)
    assert second.expect(1, m09.FileOpen).identifier == identifier
    second.send(1, m09.FileOpenOk(staged_size=7))  # it had it all
    stage = second.expect_content(1, m09.FileStage)
    assert stage.body == b""
    deliver = second.expect(1, m09.FileDeliver)
    assert deliver.redelivered


def test_file_transfers_go_one_at_a_time_and_reject_requeues(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    for body in (b"one", b"two"):
        amqp.publish(1, "", Q, body)
    legacy.send(1, mm.FileConsume(queue=Q, consumer_tag="fc"))
    legacy.expect(1, mm.FileConsumeOk)
    legacy.expect(1, mm.FileOpen)
    legacy.expect_nothing()  # the second waits for this one's open-ok
    legacy.send(1, mm.FileOpenOk(staged_size=0))
    assert legacy.expect_content(1, mm.FileStage).body == b"one"
    first = legacy.expect(1, mm.FileDeliver)
    legacy.expect(1, mm.FileOpen)
    legacy.send(1, mm.FileReject(delivery_tag=first.delivery_tag, requeue=True))
    legacy.send(1, mm.FileCancel(consumer_tag="fc"))
    assert legacy.expect(1, mm.FileCancelOk).consumer_tag == "fc"
    legacy.send(1, mm.ChannelClose(reply_code=200, reply_text="bye"))
    legacy.expect(1, mm.ChannelCloseOk)
    assert _count(broker) == 2


def test_a_no_ack_file_consumer_takes_a_window(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    for i in range(WINDOW + 5):
        amqp.publish(1, "", Q, b"m%d" % i)
    legacy.send(1, mm.FileConsume(queue=Q, consumer_tag="fc", no_ack=True))
    legacy.expect(1, mm.FileConsumeOk)
    legacy.expect(1, mm.FileOpen)
    assert _count(broker) == 5
    legacy.send(1, mm.FileOpenOk(staged_size=0))
    legacy.frames()
    assert _count(broker) == 4


# -- stream -------------------------------------------------------------------------------


def test_a_streamed_message_is_read_over_0_9_1(legacy: LegacyClient, amqp: CodecClient) -> None:
    mm = legacy.methods
    props = legacy.properties.StreamProperties(content_type="video/mp4", priority=5)
    legacy.send_content(1, mm.StreamPublish(routing_key=Q), b"frame-1", props, class_id=80)
    got = _get(amqp)
    assert got.body == b"frame-1"
    assert got.properties == BasicProperties(content_type="video/mp4", priority=5, delivery_mode=1)


def test_a_stream_consumer_without_a_rate_gets_everything_at_once(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    legacy.send(1, mm.StreamConsume(queue=Q, consumer_tag="sc"))
    legacy.expect(1, mm.StreamConsumeOk)
    for i in range(3):
        amqp.publish(1, "", Q, b"p%d" % i, BasicProperties(content_type="a/b"))
    got = [legacy.expect_content(1, mm.StreamDeliver) for _ in range(3)]
    assert [g.body for g in got] == [b"p0", b"p1", b"p2"]
    assert {(g.method.consumer_tag, g.method.queue, g.properties.content_type) for g in got} == {
        ("sc", Q, "a/b")
    }
    assert _count(broker) == 0
    assert broker.vhosts["/"].queues[Q].unacked_count == 0  # nothing to acknowledge


def test_a_stream_consumer_is_paced_and_drops_by_priority(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    # 1000 octets/s (a bucket of 100), at most 3 messages waiting.
    legacy.send(1, mm.StreamQos(consume_rate=1000, prefetch_count=3))
    legacy.expect(1, mm.StreamQosOk)
    legacy.send(1, mm.StreamConsume(queue=Q, consumer_tag="sc"))
    legacy.expect(1, mm.StreamConsumeOk)
    body = b"x" * 100
    for name, priority in [("a", 0), ("b", 0), ("c", 0), ("d", 0), ("e", 9), ("f", 0)]:
        amqp.publish(1, "", Q, body, BasicProperties(priority=priority, message_id=name))
    # "a" went at once (the bucket was full); b, c, d waited; e (9) displaced b; f displaced c.
    first = legacy.frames()
    assert [i.properties.priority for i in first if isinstance(i, LegacyContent)] == [0]
    pacer = _channel(legacy).deliverers["sc"]
    assert isinstance(pacer, Pacer)
    assert (pacer.count, pacer.dropped) == (3, 2)
    timers = broker.timers
    sent = []
    for step in range(1, 6):
        timers.expire(step * 0.1)
        sent += [i for i in legacy.frames() if isinstance(i, LegacyContent)]
    assert [(i.method.consumer_tag, i.body) for i in sent] == [("sc", body)] * 3
    # The high priority first, then the rest in order; one per 0.1 s.
    assert [i.properties.priority for i in sent] == [9, 0, 0]
    assert _count(broker) == 0


def test_cancelling_a_stream_consumer_drops_its_backlog(
    legacy: LegacyClient, amqp: CodecClient
) -> None:
    mm = legacy.methods
    legacy.send(1, mm.StreamQos(consume_rate=10))
    legacy.expect(1, mm.StreamQosOk)
    legacy.send(1, mm.StreamConsume(queue=Q, consumer_tag="sc"))
    legacy.expect(1, mm.StreamConsumeOk)
    for _ in range(3):
        amqp.publish(1, "", Q, b"y" * 50)
    legacy.frames()
    legacy.send(1, mm.StreamCancel(consumer_tag="sc"))
    assert legacy.expect(1, mm.StreamCancelOk).consumer_tag == "sc"
    legacy.conn.broker.timers.expire(100.0)
    legacy.expect_nothing()


# -- message (0-9) ------------------------------------------------------------------------


def _answers(client: LegacyClient) -> list[str]:
    return [type(i.method).__name__ for i in client.frames()]


def test_an_inline_transfer_is_published_and_answered_ok(broker: Broker, amqp: CodecClient) -> None:
    client = _legacy(broker)
    client.send(
        1,
        m09.MessageTransfer(
            destination="",
            routing_key=Q,
            message_id="t-1",
            content_type="text/plain",
            delivery_mode=2,
            ttl=60000,
            application_headers={"k": "v", "x-amqp-0-9-1-type": "order"},
            body=Content(b"inline body"),
        ),
    )
    assert _answers(client) == ["MessageOk"]
    got = _get(amqp)
    assert got.body == b"inline body"
    assert got.properties == BasicProperties(
        content_type="text/plain",
        headers={"k": "v"},
        delivery_mode=2,
        expiration="60000",
        message_id="t-1",
        type="order",
    )


def test_a_reference_transfer_is_published_on_close_and_answers_keep_their_order(
    broker: Broker, amqp: CodecClient
) -> None:
    client = _legacy(broker)
    ref = b"r1"
    client.send(1, m09.MessageOpen(reference=ref))
    assert _answers(client) == ["MessageOk"]
    client.send(1, m09.MessageTransfer(routing_key=Q, body=Content(ref, reference=True)))
    client.send(1, m09.MessageAppend(reference=ref, bytes_=b"part one, "))
    client.send(1, m09.MessageAppend(reference=ref, bytes_=b"part two"))
    # The transfer's answer waits for the close, and the appends' answers wait behind it.
    assert _answers(client) == []
    assert _count(broker) == 0
    client.send(1, m09.MessageClose(reference=ref))
    assert _answers(client) == ["MessageOk"] * 4
    assert _get(amqp).body == b"part one, part two"


def test_reference_errors(broker: Broker) -> None:
    client = _legacy(broker)
    client.send(1, m09.MessageAppend(reference=b"none", bytes_=b"x"))
    assert _closed(client)[:2] == (404, 120)
    client.open_channel(2)
    client.send(2, m09.MessageOpen(reference=b"r"))
    client.send(2, m09.MessageOpen(reference=b"r"))
    items = client.frames()
    assert isinstance(items[0].method, m09.MessageOk)
    assert (items[1].method.reply_code, items[1].method.class_id) == (406, 120)
    client.open_channel(3)
    client.send(3, m09.MessageTransfer(routing_key=Q, body=Content(b"nope", reference=True)))
    assert _closed(client)[:2] == (404, 120)


def test_a_checkpointed_reference_resumes_after_a_dropped_connection(
    broker: Broker, amqp: CodecClient
) -> None:
    first = _legacy(broker)
    first.send(1, m09.MessageOpen(reference=b"up"))
    first.send(1, m09.MessageAppend(reference=b"up", bytes_=b"abc"))
    first.send(1, m09.MessageCheckpoint(reference=b"up", identifier="upload-7"))
    first.send(1, m09.MessageAppend(reference=b"up", bytes_=b"lost"))
    assert _answers(first) == ["MessageOk"] * 4
    first.conn.connection_lost()

    second = _legacy(broker)
    second.send(1, m09.MessageResume(reference=b"up", identifier="upload-7"))
    (offset,) = [i.method for i in second.frames()]
    assert isinstance(offset, m09.MessageOffset)
    assert offset.value == 3
    second.send(1, m09.MessageAppend(reference=b"up", bytes_=b"XYZ"))
    second.send(1, m09.MessageTransfer(routing_key=Q, body=Content(b"up", reference=True)))
    second.send(1, m09.MessageClose(reference=b"up"))
    assert _answers(second) == ["MessageOk"] * 3
    assert _get(amqp).body == b"abcXYZ"
    second.send(1, m09.MessageResume(reference=b"fresh", identifier="never"))
    (fresh,) = [i.method for i in second.frames()]
    assert isinstance(fresh, m09.MessageOffset)
    assert fresh.value == 0


def test_message_consumers_get_transfers_and_ok_acknowledges(
    broker: Broker, amqp: CodecClient
) -> None:
    client = _legacy(broker)
    client.send(1, m09.MessageQos(prefetch_count=1))
    client.send(1, m09.MessageConsume(queue=Q, destination="inbox"))
    assert _answers(client) == ["MessageOk", "MessageOk"]
    props = BasicProperties(content_type="a/b", correlation_id="c", type="t", priority=3)
    amqp.publish(1, "amq.direct", "", b"unrouted")
    amqp.publish(1, "", Q, b"first", props)
    amqp.publish(1, "", Q, b"second")
    (item,) = client.frames()  # prefetch 1
    transfer = item.method
    assert isinstance(transfer, m09.MessageTransfer)
    assert (transfer.destination, transfer.routing_key, transfer.body) == (
        "inbox",
        Q,
        Content(b"first"),
    )
    assert (transfer.content_type, transfer.correlation_id, transfer.priority) == ("a/b", "c", 3)
    assert transfer.application_headers == {"x-amqp-0-9-1-type": "t"}
    client.send(1, m09.MessageOk())
    (item,) = client.frames()
    assert item.method.body == Content(b"second")
    client.send(1, m09.MessageReject(code=500, text="cannot"))
    client.expect_nothing()
    queue = broker.vhosts["/"].queues[Q]
    assert (queue.message_count, queue.unacked_count) == (0, 0)  # rejected: dropped
    client.send(1, m09.MessageOk())  # answers nothing
    assert _closed(client)[0] == 406


def test_a_large_delivery_comes_in_a_reference(broker: Broker, amqp: CodecClient) -> None:
    client = _legacy(broker, limits=Limits(frame_max=4096))
    body = bytes(range(256)) * 40  # 10240 octets: does not fit a 4096-octet frame
    amqp.publish(1, "", Q, body)
    client.send(1, m09.MessageConsume(queue=Q, destination="d"))
    items = [i.method for i in client.frames()]
    assert isinstance(items[0], m09.MessageOk)
    sent = items[1:]
    assert isinstance(sent[0], m09.MessageOpen)
    appends = [s for s in sent if isinstance(s, m09.MessageAppend)]
    assert len(appends) == 3
    assert b"".join(a.bytes_ for a in appends) == body
    transfer = next(s for s in sent if isinstance(s, m09.MessageTransfer))
    assert transfer.body == Content(sent[0].reference, reference=True)
    assert isinstance(sent[-1], m09.MessageClose)
    queue = broker.vhosts["/"].queues[Q]
    for _ in range(len(appends) + 1):  # open and the appends: no settlement
        client.send(1, m09.MessageOk())
    assert queue.unacked_count == 1
    client.send(1, m09.MessageOk())  # the transfer
    client.send(1, m09.MessageOk())  # the close
    assert queue.unacked_count == 0
    client.expect_nothing()


def test_message_get_cancel_recover_and_immediate(broker: Broker, amqp: CodecClient) -> None:
    client = _legacy(broker)
    client.send(1, m09.MessageGet(queue=Q, destination="g"))
    assert _answers(client) == ["MessageEmpty"]
    amqp.publish(1, "", Q, b"got")
    client.send(1, m09.MessageGet(queue=Q, destination="g"))
    items = [i.method for i in client.frames()]
    assert [type(i).__name__ for i in items] == ["MessageTransfer", "MessageOk"]
    assert (items[0].destination, items[0].body) == ("g", Content(b"got"))
    client.send(1, m09.MessageRecover(requeue=True))
    assert _answers(client) == ["MessageOk"]
    assert _count(broker) == 1
    client.send(1, m09.MessageCancel(destination="unknown"))
    assert _answers(client) == ["MessageOk"]
    # immediate, to a queue without consumers: the core's return is the answer.
    client.send(1, m09.MessageTransfer(routing_key=Q, immediate=True, body=Content(b"i")))
    (answer,) = [i.method for i in client.frames()]
    assert isinstance(answer, m09.MessageReject)
    assert (answer.code, answer.text) == (313, "NO_CONSUMERS")
    assert _count(broker) == 1


# -- dtx ----------------------------------------------------------------------------------


def _dtx(client: LegacyClient, identifier: str) -> None:
    mm = client.methods
    client.send(1, mm.DtxStart(dtx_identifier=identifier))
    client.expect(1, mm.DtxStartOk)


def test_dtx_work_is_held_until_the_coordinator_commits_it(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    amqp.publish(1, "", Q, b"to consume")
    legacy.send(1, mm.DtxSelect())
    legacy.expect(1, mm.DtxSelectOk)
    _dtx(legacy, "xa-1")
    legacy.send_content(1, mm.BasicPublish(routing_key=Q), b"published in xa-1")
    legacy.send(1, mm.BasicGet(queue=Q))
    got = legacy.expect_content(1, mm.BasicGetOk)
    legacy.send(1, mm.BasicAck(delivery_tag=got.method.delivery_tag))
    queue = broker.vhosts["/"].queues[Q]
    assert (queue.message_count, queue.unacked_count) == (0, 1)
    _dtx(legacy, "xa-2")  # ends xa-1: idle, ready for the coordinator
    coordinator = broker.dtx
    statuses: list[int | None] = []
    coordinator.prepare(xid_of("xa-1"), statuses.append)
    coordinator.commit(xid_of("xa-1"), one_phase=False, done=statuses.append)
    assert statuses == [XA_OK, XA_OK]
    assert (queue.message_count, queue.unacked_count) == (1, 0)
    assert _get(amqp).body == b"published in xa-1"


def test_tx_commit_on_a_dtx_channel_commits_the_branch_in_one_phase(
    legacy: LegacyClient, amqp: CodecClient, broker: Broker
) -> None:
    mm = legacy.methods
    legacy.send(1, mm.DtxSelect())
    legacy.expect(1, mm.DtxSelectOk)
    _dtx(legacy, "one")
    legacy.send_content(1, mm.BasicPublish(routing_key=Q), b"held")
    assert _count(broker) == 0
    legacy.send(1, mm.TxCommit())
    legacy.expect(1, mm.TxCommitOk)
    assert _count(broker) == 1
    assert xid_of("one") not in broker.dtx.branches
    _dtx(legacy, "two")
    legacy.send_content(1, mm.BasicPublish(routing_key=Q), b"dropped")
    legacy.send(1, mm.TxRollback())
    legacy.expect(1, mm.TxRollbackOk)
    assert _count(broker) == 1
    legacy.send(1, mm.TxCommit())  # no branch any more
    assert _closed(legacy)[0] == 406


def test_a_closed_dtx_channel_rolls_its_branch_back(broker: Broker, amqp: CodecClient) -> None:
    amqp.publish(1, "", Q, b"m")
    client = _legacy(broker, AMQP08)
    client.send(1, m08.DtxSelect())
    client.expect(1, m08.DtxSelectOk)
    _dtx(client, "gone")
    client.send(1, m08.BasicConsume(queue=Q, consumer_tag="c"))
    client.expect(1, m08.BasicConsumeOk)
    deliver = client.expect_content(1, m08.BasicDeliver)
    client.send(1, m08.BasicAck(delivery_tag=deliver.method.delivery_tag))
    client.send_content(1, m08.BasicPublish(routing_key=Q), b"never")
    client.conn.connection_lost()
    assert xid_of("gone") not in broker.dtx.branches
    queue = broker.vhosts["/"].queues[Q]
    assert (queue.message_count, queue.unacked_count) == (1, 0)
    assert _get(amqp).body == b"m"


def test_dtx_and_tx_exclude_each_other(legacy: LegacyClient) -> None:
    mm = legacy.methods
    legacy.send(1, mm.TxSelect())
    legacy.expect(1, mm.TxSelectOk)
    legacy.send(1, mm.DtxSelect())
    assert _closed(legacy)[:2] == (406, 100)
    legacy.open_channel(2)
    legacy.send(2, mm.DtxSelect())
    legacy.expect(2, mm.DtxSelectOk)
    legacy.send(2, mm.TxSelect())
    close = legacy.expect(2, mm.ChannelClose)
    assert (close.reply_code, close.class_id) == (406, 90)
    legacy.open_channel(3)
    legacy.send(3, mm.DtxStart(dtx_identifier="x"))
    close = legacy.expect(3, mm.ChannelClose)
    assert (close.reply_code, close.class_id) == (406, 100)


# -- tunnel -------------------------------------------------------------------------------


def test_a_tunnel_carries_an_amqp_fast_connection(legacy: LegacyClient, amqp: CodecClient) -> None:
    mm = legacy.methods
    props = legacy.properties.TunnelProperties(
        proxy_name="fast-1", data_name="AMQP/Fast 0.8a2", headers={"Hop": 1}, durable=0
    )
    fast = FastClient(client_name="tunnelled")

    def exchange() -> list[Any]:
        """Carry what the Fast client wrote through the tunnel, and back."""
        events: list[Any] = []
        while True:
            data = fast.data_to_send()
            if data:
                legacy.send_content(
                    1, mm.TunnelRequest(meta_data={"seq": 1}), data, props, class_id=110
                )
            back = [i for i in legacy.frames() if isinstance(i, LegacyContent)]
            for item in back:
                assert isinstance(item.method, mm.TunnelRequest)
                assert item.method.meta_data == {"seq": 1}
                assert (item.properties.proxy_name, item.properties.headers) == (
                    "fast-1",
                    {"Hop": 1},
                )
                events += fast.receive_data(item.body)
            if not data and not back:
                return events

    fast.initiate()
    assert any(isinstance(e, Connected) for e in exchange())
    fast.open_channel(1, confirm_tag=1)
    fast.open_handle(1, 1, service=ServiceType.QUEUE, dest_name=Q, producer=True, consumer=True)
    fast.send(1, b"through the tunnel", confirm_tag=2)
    replies = [(e.level, e.confirm_tag) for e in exchange() if isinstance(e, Replied)]
    assert ("handle", 2) in replies
    assert _get(amqp).body == b"through the tunnel"
    # Deliveries to the tunnelled connection come back through the tunnel too.
    fast.consume(1, prefetch=5)
    exchange()
    amqp.publish(1, "", Q, b"to the tunnel")
    assert [e.body for e in exchange() if isinstance(e, Delivered)] == [b"to the tunnel"]
    tunnels = _channel(legacy).extras["tunnel"].tunnels
    assert tunnels["fast-1"].shell.client is not None
    legacy.send(1, mm.ChannelClose(reply_code=200, reply_text="bye"))
    legacy.expect(1, mm.ChannelCloseOk)
    assert tunnels == {}


# -- permissions --------------------------------------------------------------------------


def _restricted(broker: Broker, dialect: Dialect = AMQP09) -> LegacyClient:
    """guest, with read and write on nothing but the queue "open" and amq.default write."""
    users = UserStore.with_default_user()
    users.set_permissions("guest", "/", "^open$", r"^(open|amq\.default)$", "^open$")
    broker.vhosts["/"].declare_queue("open", owner=None)
    return _legacy(broker, dialect, users=users)


@pytest.mark.parametrize(
    "method",
    [
        m09.FileConsume(queue=Q),
        m09.StreamConsume(queue=Q),
        m09.MessageConsume(queue=Q, destination="d"),
        m09.MessageGet(queue=Q, destination="d"),
        m09.FilePublish(exchange="amq.direct", routing_key=Q, identifier="f"),
        m09.MessageTransfer(destination="amq.direct", routing_key=Q, body=Content(b"x")),
        m09.MessageTransfer(routing_key="open", user_id="someone", body=Content(b"x")),
    ],
    ids=lambda method: method.NAME + ("/user-id" if getattr(method, "user_id", "") else ""),
)
def test_the_legacy_classes_ask_the_guard(broker: Broker, method: Any) -> None:
    client = _restricted(broker)
    client.send(1, method)
    code, class_id, method_id = _closed(client)
    assert (class_id, method_id) == (method.CLASS_ID, method.METHOD_ID)
    assert code == (406 if getattr(method, "user_id", "") else 403)


def test_a_stream_publish_without_write_is_refused(broker: Broker) -> None:
    client = _restricted(broker, AMQP08)
    client.send_content(1, m08.StreamPublish(exchange="amq.fanout"), b"x", class_id=80)
    assert _closed(client)[:2] == (403, 80)
    client.open_channel(2)
    client.send_content(2, m08.StreamPublish(routing_key="open"), b"ok", class_id=80)
    client.expect_nothing()
    assert _count(broker, "open") == 1


def test_exchange_bound_and_access_request_need_no_permission(broker: Broker) -> None:
    """The legacy-only queries read nothing a passive declare would not (RabbitMQ checks
    no permission for a passive declare either)."""
    client = _restricted(broker)
    client.send(1, m09.AccessRequest(realm="/data", read=True))
    client.expect(1, m09.AccessRequestOk)
    client.send(1, m09.ExchangeBound(exchange="amq.direct", queue=Q))
    assert isinstance(client.next().method, m09.ExchangeBoundOk)


def test_a_tunnelled_connection_logs_in_for_itself(broker: Broker) -> None:
    client = _legacy(broker)
    props = p09.TunnelProperties(proxy_name="t")
    fast = FastClient(password="wrong")
    fast.initiate()
    client.send_content(1, m09.TunnelRequest(), fast.data_to_send(), props, class_id=110)
    for item in client.frames():
        fast.receive_data(item.body) if isinstance(item, LegacyContent) else None
    client.send_content(1, m09.TunnelRequest(), fast.data_to_send(), props, class_id=110)
    assert not [i for i in client.frames() if isinstance(i, LegacyMethod)]
    tunnel = _channel(client).extras["tunnel"].tunnels["t"]
    assert tunnel.shell.client is None  # refused (after the login delay), never open
