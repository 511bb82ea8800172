"""The load generator's in-place reader of large deliveries (``bench/stamp_reader.py``) and the
connection that uses it, against the broker's own encoder and front end (no socket)."""

from __future__ import annotations

import asyncio
import random

import pytest

from bench.amqp import CHANNEL, PublishTemplate, StampConnection
from bench.loadgen import Consumer, parse_args
from bench.stamp_reader import StampReader
from bench.stats import STAMP, ReceiptLog, verify_queue
from leveret.errors import FrameError, UnexpectedFrame
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.server.amqp091 import Limits
from leveret.testing import CodecClient
from leveret.testing.client import feed
from tests.unit.bench.test_amqp import Wire, pump

FRAME_MAX = 4096
LIMIT = FRAME_MAX - framing.FRAME_OVERHEAD
PROPS = BasicProperties(delivery_mode=1).encode()


def delivery(tag: int, body: bytes, *, redelivered: bool = False, channel: int = CHANNEL) -> bytes:
    method = m.BasicDeliver(
        consumer_tag="c1",
        delivery_tag=tag,
        redelivered=redelivered,
        exchange="",
        routing_key="q",
    ).encode()
    return framing.encode_message_frames(channel, method, 60, body, PROPS, FRAME_MAX)


def body(seq: int, size: int) -> bytes:
    return STAMP.pack(1000 + seq, seq, 7) + bytes(range(256)) * (size // 256) + b"x" * (size % 256)


class Sink:
    def __init__(self, limit: int = LIMIT) -> None:
        self.got: list[tuple[int, int, bytes]] = []
        self.frames: list[bytes] = []
        self.reader = StampReader(CHANNEL, limit, lambda *d: self.got.append(d), self.frames.append)


def test_bodies_over_several_frames_and_reads_give_their_stamps_in_order() -> None:
    sizes = [16, 17, LIMIT - 1, LIMIT, LIMIT + 1, 65536, 3 * LIMIT, 100_000]
    stream = b"".join(delivery(i + 1, body(i, s), redelivered=i == 2) for i, s in enumerate(sizes))
    want = [(i + 1, int(i == 2), body(i, s)[:16]) for i, s in enumerate(sizes)]
    rng = random.Random(26)
    # One read; every cut of a 1..7-byte piece (frame headers, stamps and frame-end octets
    # split); and random cuts.
    for cuts in (
        [len(stream)],
        [rng.randint(1, 7) for _ in range(len(stream))],
        [rng.randint(1, 70_000) for _ in range(200)],
    ):
        sink = Sink()
        at = 0
        for n in cuts:
            sink.reader.feed(stream[at : at + n])
            at += n
            if at >= len(stream):
                break
        assert sink.got == want
        assert sink.frames == []
        assert sink.reader.pending == 0


def test_frames_straddling_the_buffers_end_are_moved_to_its_start() -> None:
    # Reads that fill the buffer to its end, as uvloop's do: a frame header and a small
    # frame (another channel's, for the machine) are cut by the buffer's end again and again.
    other = framing.encode_method_frame(3, m.BasicCancelOk(consumer_tag="x").encode())
    one = delivery(1, body(0, 70_001)) + other + framing.encode_frame(8, 0, b"")
    sink = Sink()
    stream = b"".join(one.replace(STAMP.pack(1000, 0, 7), STAMP.pack(i, i, 7)) for i in range(40))
    at = 0
    capacity = len(sink.reader.get_buffer())
    while at < len(stream):
        room = sink.reader.get_buffer()
        n = min(len(room), len(stream) - at, capacity // 3 + 5)
        room[:n] = stream[at : at + n]
        sink.reader.updated(n)
        at += n
    assert len(stream) > 10 * capacity
    assert [(tag, red, STAMP.unpack(s)[1]) for tag, red, s in sink.got] == [
        (1, 0, i) for i in range(40)
    ]
    assert sink.frames == [other, framing.encode_frame(8, 0, b"")] * 40


def test_other_frames_go_to_the_machine_whole_and_in_order() -> None:
    cancel = framing.encode_method_frame(CHANNEL, m.BasicCancel(consumer_tag="c1").encode())
    heartbeat = framing.encode_frame(8, 0, b"")
    other_channel = delivery(5, body(5, 20), channel=2)
    sink = Sink()
    sink.reader.feed(delivery(1, body(1, 9000)) + cancel + heartbeat + other_channel)
    assert [t for t, _, _ in sink.got] == [1]
    parts = [heartbeat]
    at = 0
    while at < len(other_channel):
        size = int.from_bytes(other_channel[at + 3 : at + 7], "big")
        parts.append(other_channel[at : at + size + 8])
        at += size + 8
    assert sink.frames == [cancel, *parts]


def test_a_body_shorter_than_the_stamp_is_delivered_with_what_there_is() -> None:
    sink = Sink()
    sink.reader.feed(delivery(1, b"") + delivery(2, b"abc"))
    assert sink.got == [(1, 0, b""), (2, 0, b"abc")]


def deliver_frame(tag: int) -> bytes:
    method = m.BasicDeliver(consumer_tag="c1", delivery_tag=tag, exchange="", routing_key="q")
    return framing.encode_method_frame(CHANNEL, method.encode())


def header_frame(size: int, class_id: int = 60) -> bytes:
    payload = class_id.to_bytes(2, "big") + bytes(2) + size.to_bytes(8, "big") + PROPS
    return framing.encode_frame(framing.FRAME_HEADER, CHANNEL, payload)


def body_frame(data: bytes) -> bytes:
    return framing.encode_frame(framing.FRAME_BODY, CHANNEL, data)


def test_the_delivery_path_makes_the_machines_checks() -> None:
    good = deliver_frame(1) + header_frame(40) + body_frame(bytes(16)) + body_frame(bytes(24))
    sink = Sink()
    sink.reader.feed(good)
    assert sink.got == [(1, 0, bytes(16))]
    bad_end = bytearray(good)
    bad_end[len(deliver_frame(1) + header_frame(40)) + 7 + 16] = 0
    method = framing.encode_method_frame(CHANNEL, m.BasicCancel(consumer_tag="c1").encode())
    cases: list[tuple[bytes, type[Exception], str]] = [
        (bytes(bad_end), FrameError, "frame_end"),
        (deliver_frame(1) + header_frame(20) + body_frame(bytes(30)), FrameError, "announced 20"),
        (
            deliver_frame(1) + header_frame(100) + body_frame(bytes(50)) + method,
            UnexpectedFrame,
            "method",
        ),
        (deliver_frame(1) + header_frame(16, class_id=50), UnexpectedFrame, "class 50"),
        (deliver_frame(1) + body_frame(bytes(16)), UnexpectedFrame, "before the content header"),
        (deliver_frame(1) + header_frame(16) + header_frame(16), UnexpectedFrame, "second"),
        (body_frame(bytes(LIMIT + 1)), FrameError, "too large"),
    ]
    for stream, error, words in cases:
        with pytest.raises(error, match=words):
            Sink().reader.feed(stream)


def test_what_the_fast_path_delivers_still_feeds_the_verification() -> None:
    # A consumer of the load generator fed through the reader: a lost and a duplicated
    # message, and one out of order, are reported as they are through the machine.
    async def run() -> None:
        conn = StampConnection(frame_max=FRAME_MAX)
        logs: dict[int, ReceiptLog] = {}
        consumer = Consumer(parse_args(["--autoack"]), conn, logs, [0], 0)
        conn.read_stamps()
        seqs = [0, 1, 3, 2, 3, 4]  # 2 after 3: out of order; 3 twice; 5 never
        conn.data_received(b"".join(delivery(t + 1, body(s, 9000)) for t, s in enumerate(seqs)))
        assert consumer.count == 6
        assert consumer.out_of_order == 1
        verdict = verify_queue(6, logs[7], None)
        assert (verdict.missing, verdict.duplicates) == (1, 1)

    asyncio.run(run())


async def _through_the_broker() -> None:
    server = CodecClient.connect(limits=Limits(heartbeat=0, frame_max=FRAME_MAX)).shell

    class Pieces(Wire):
        def writelines(self, parts: list[bytes]) -> None:
            feed(self.server, b"".join(parts), 0)

    conn = StampConnection()
    conn.connection_made(Pieces(server))  # type: ignore[arg-type]
    pump(conn, server)
    await conn.open(within=1)
    for method, reply in (
        (m.ChannelOpen(), m.ChannelOpenOk),
        (m.QueueDeclare(queue="q"), m.QueueDeclareOk),
        (m.ConfirmSelect(), m.ConfirmSelectOk),
    ):
        conn.send(1, method)
        pump(conn, server)
        await conn.expect(reply, within=1)
    conn.read_stamps()
    conn.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    pump(conn, server)
    await conn.expect(m.BasicConsumeOk, within=1)
    stamps: list[tuple[int, int, int]] = []
    confirms: list[int] = []
    conn.on_confirm = lambda tag, multiple, ack: confirms.append(tag)

    def deliver(tag: int, redelivered: int, stamp: bytes) -> None:
        stamps.append(STAMP.unpack(stamp))
        conn.ack(tag, multiple=False)

    conn.on_deliver = deliver
    template = PublishTemplate(1, "", "q", 20_000, persistent=False, frame_max=conn.frame_max)
    conn.publish_parts(
        [x for seq in range(5) for x in (template.prefix + STAMP.pack(7, seq, 3), template.suffix)],
        5,
    )
    pump(conn, server)
    assert stamps == [(7, seq, 3) for seq in range(5)]
    assert confirms[-1] == 5
    assert conn.machine.unconfirmed(1) == 0
    conn.send(1, m.QueueDeclare(queue="q", passive=True))
    pump(conn, server)
    ok = await conn.expect(m.QueueDeclareOk, within=1)
    assert ok.message_count == 0  # every delivery was acked
    # A frame the broker breaks fails the connection.
    conn.data_received(deliver_frame(99) + header_frame(16, class_id=50))
    assert conn.error is not None
    assert "505" in conn.error


def test_a_stamp_connection_publishes_pieces_consumes_in_place_and_acks() -> None:
    asyncio.run(_through_the_broker())
