"""The connector's client-side codec paths, without sockets or Spark."""

from __future__ import annotations

import datetime
import itertools
import json
from typing import TYPE_CHECKING

import pytest

from leveret.errors import FrameError
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark._arrow import READ_SCHEMA, build_batch, stream_offsets
from leveret.spark._client import AmqpClient, ConnectionParams, Deliveries, scan_frames
from leveret.spark._options import EARLIEST, LATEST, Options, parse_offsets_spec
from leveret.spark._streams import OffsetRange, plan_ranges
from leveret.spark.sink import _fast_properties, _properties, _shortstr
from leveret.spark.source import _limit

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable


def deliver(
    tag: int,
    body: bytes,
    *,
    headers: FieldTable | None = None,
    frame_max: int = 131072,
    routing_key: str = "rk",
    redelivered: bool = False,
    **props: object,
) -> bytes:
    method = m.BasicDeliver(
        consumer_tag="leveret.spark.1",
        delivery_tag=tag,
        redelivered=redelivered,
        exchange="ex",
        routing_key=routing_key,
    ).encode()
    raw = BasicProperties(headers=headers, **props).encode()  # type: ignore[arg-type]
    return framing.encode_message_frames(1, method, 60, body, raw, frame_max)


def control() -> bytes:
    return framing.encode_method_frame(1, m.BasicAck(delivery_tag=7, multiple=True).encode())


def scan_all(data: bytes, step: int) -> tuple[Deliveries, list[framing.Frame]]:
    """Feed ``data`` in pieces of ``step`` bytes, carrying the unparsed rest like the client."""
    out = Deliveries()
    ctl: list[framing.Frame] = []
    rest = b""
    for i in range(0, len(data), step):
        buf = rest + data[i : i + step]
        used = scan_frames(buf, out, ctl)
        rest = buf[used:]
    assert rest == b""
    return out, ctl


def stream_message(tag: int, offset: int, body: bytes) -> bytes:
    return deliver(tag, body, headers={"x-stream-offset": offset + 2**33}, delivery_mode=2)


def test_scan_frames_at_every_split_point() -> None:
    data = b"".join(
        (
            stream_message(1, 0, b"a"),
            control(),
            framing.HEARTBEAT_FRAME,
            deliver(2, b"", redelivered=True),
            deliver(3, b"x" * 50, frame_max=20),  # body over several frames
            stream_message(4, 3, b"last"),
        )
    )
    whole, whole_ctl = scan_all(data, len(data))
    assert whole.bodies == [b"a", b"", b"x" * 50, b"last"]
    assert whole.tags == [1, 2, 3, 4]
    assert whole.redelivered == [0, 1, 0, 0]
    assert whole.exchanges == [b"ex"] * 4
    assert whole.routing_keys == [b"rk"] * 4
    assert [f[0] for f in whole_ctl] == [framing.FRAME_METHOD, framing.FRAME_HEARTBEAT]
    assert isinstance(m.decode_method(whole_ctl[0][2]), m.BasicAck)
    for step in range(1, 40):
        part, ctl = scan_all(data, step)
        assert part.bodies == whole.bodies
        assert part.properties == whole.properties
        assert len(ctl) == 2


def test_scan_frames_rejects_a_bad_frame_end() -> None:
    good = stream_message(1, 0, b"body")
    bad = good[:-1] + b"\x00"
    with pytest.raises(FrameError):
        scan_frames(bad + framing.HEARTBEAT_FRAME, Deliveries(), [])
    header_missing = control()[:-1] + b"\x01"
    with pytest.raises(FrameError):
        scan_frames(header_missing + control(), Deliveries(), [])


def test_deliveries_take_splits_columns() -> None:
    d, _ = scan_all(b"".join(stream_message(i + 1, i, b"%d" % i) for i in range(5)), 10_000)
    first = d.take(2)
    assert first.bodies == [b"0", b"1"]
    assert d.bodies == [b"2", b"3", b"4"]
    assert len(d.take()) == 3
    assert len(d) == 0


def test_build_batch_decodes_properties_and_headers() -> None:
    stamp = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    data = b"".join(
        (
            deliver(
                1,
                b"one",
                headers={
                    "x-stream-offset": 2**40,
                    "x-stream-timestamp": 1_700_000_000_123,
                    "s": "text",
                    "i": 7,
                    "b": True,
                    "n": None,
                    "t": {"k": [1, "two"]},
                    "raw": b"\xff",
                },
                content_type="application/json",
                delivery_mode=2,
                priority=3,
                message_id="m-1",
                app_id="app",
            ),
            deliver(
                2,
                b"two",
                headers={"x-stream-offset": 2**40 + 1, "x-stream-timestamp": 1_700_000_000_456},
                message_id="m-2",
            ),
            deliver(3, b"three", timestamp=int(stamp.timestamp()), correlation_id="c"),
        )
    )
    d, _ = scan_all(data, len(data))
    offsets = stream_offsets(d.properties)
    assert offsets == [2**40, 2**40 + 1, -1]
    batch = build_batch(d, "q", offsets)
    assert batch.schema.equals(READ_SCHEMA)
    rows = batch.to_pylist()
    assert [r["value"] for r in rows] == [b"one", b"two", b"three"]
    assert {r["queue"] for r in rows} == {"q"}
    assert [r["offset"] for r in rows] == offsets
    ms = datetime.timedelta(milliseconds=1)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    assert rows[0]["timestamp"] == epoch + 1_700_000_000_123 * ms
    assert rows[1]["timestamp"] == epoch + 1_700_000_000_456 * ms
    assert rows[2]["timestamp"] == stamp
    # The offset and timestamp headers are columns of their own, not map entries.
    assert dict(rows[0]["headers"]) == {
        "s": "text",
        "i": "7",
        "b": "true",
        "n": None,
        "t": json.dumps({"k": [1, "two"]}, separators=(",", ":")),
        "raw": "\ufffd",
    }
    assert rows[1]["headers"] == []
    assert rows[2]["headers"] is None
    p0, p1, p2 = (r["properties"] for r in rows)
    assert p0["content_type"] == "application/json"
    assert (p0["delivery_mode"], p0["priority"], p0["message_id"]) == (2, 3, "m-1")
    assert p0["app_id"] == "app"
    assert p1["message_id"] == "m-2"
    assert p1["delivery_mode"] is None
    assert p2["correlation_id"] == "c"
    no_headers = build_batch(d, "q", None, include_headers=False).to_pylist()
    assert [r["headers"] for r in no_headers] == [None, None, None]
    assert [r["offset"] for r in no_headers] == [None, None, None]


def test_plan_ranges_cover_each_offset_once() -> None:
    ranges = plan_ranges({"a": 10, "b": 0}, {"a": 1010, "b": 3000}, 4, None)
    assert sum(r.queue == "a" for r in ranges) == 1
    assert sum(r.queue == "b" for r in ranges) == 3
    for q, lo, hi in (("a", 10, 1010), ("b", 0, 3000)):
        mine = sorted((r for r in ranges if r.queue == q), key=lambda r: r.start)
        assert mine[0].start == lo
        assert mine[-1].end == hi
        assert all(x.end == y.start for x, y in itertools.pairwise(mine))
    assert plan_ranges({"a": 5}, {"a": 5}, 3, None) == []
    small = plan_ranges({"a": 0}, {"a": 2}, 8, None)
    assert small == [OffsetRange("a", 0, 1), OffsetRange("a", 1, 2)]
    capped = plan_ranges({"a": 0}, {"a": 1000}, 1, 300)
    assert len(capped) == 4


def test_read_limit_shares_by_lag() -> None:
    assert _limit({"a": 0, "b": 0}, {"a": 100, "b": 50}, 1000) == {"a": 100, "b": 50}
    limited = _limit({"a": 0, "b": 0}, {"a": 3000, "b": 1000}, 1000)
    assert limited == {"a": 750, "b": 250}
    assert _limit({"a": 5, "b": 7}, {"a": 5, "b": 9}, 1) == {"a": 5, "b": 8}


def test_options_and_offset_specs() -> None:
    o = Options.parse(
        {
            "URI": "amqps://u%40x:p%2Fw@example.org:5999/v%2Fh",
            "queues": "a, b",
            "maxOffsetsPerTrigger": "10",
            "failOnDataLoss": "false",
        }
    )
    assert o.params == ConnectionParams(
        host="example.org", port=5999, vhost="v/h", username="u@x", password="p/w", use_tls=True
    )
    assert o.queues == ("a", "b")
    assert (o.max_offsets_per_trigger, o.fail_on_data_loss) == (10, False)
    assert ConnectionParams.from_uri("amqp://h").vhost == "/"
    assert Options.parse({"path": "events"}).queues == ("events",)
    assert parse_offsets_spec("earliest", ("a",), "startingOffsets") == {"a": EARLIEST}
    assert parse_offsets_spec('{"a": 5}', ("a", "b"), "startingOffsets") == {"a": 5, "b": -2}
    assert parse_offsets_spec('{"a": 5}', ("a", "b"), "endingOffsets") == {"a": 5, "b": LATEST}
    with pytest.raises(ValueError, match="not being read"):
        parse_offsets_spec('{"c": 1}', ("a",), "startingOffsets")
    with pytest.raises(ValueError, match="JSON"):
        parse_offsets_spec("{nope", ("a",), "startingOffsets")
    with pytest.raises(ValueError, match="required"):
        Options.parse({"uri": "amqp://h"})
    with pytest.raises(ValueError, match="queueMode"):
        Options.parse({"queue": "a", "queueMode": "browse"})
    with pytest.raises(ValueError, match="at least 1"):
        Options.parse({"queue": "a", "minPartitions": "0"})


def test_sink_fast_properties_match_the_generated_encoder() -> None:
    fast = _fast_properties(b"p-3-1", 41, _shortstr("p-3-1-41"), True)
    slow = _properties("p-3-1", 41, "p-3-1-41", True, None, None)
    assert BasicProperties.decode(fast) == BasicProperties.decode(slow)
    decoded = BasicProperties.decode(fast)
    assert decoded.headers == {"x-stream-producer": "p-3-1", "x-stream-sequence": 41}
    assert (decoded.delivery_mode, decoded.message_id) == (2, "p-3-1-41")
    transient = BasicProperties.decode(_fast_properties(b"p", 0, _shortstr("p-0"), False))
    assert transient.delivery_mode is None
    custom = BasicProperties.decode(
        _properties("p", 1, "p-1", True, [("k", "v")], {"content_type": "text/plain"})
    )
    assert custom.headers == {"k": "v", "x-stream-producer": "p", "x-stream-sequence": 1}
    assert custom.content_type == "text/plain"


def test_confirm_bookkeeping() -> None:
    """in_flight and nacked follow the client machine's confirm count (scripted broker)."""

    def frame(channel: int, method: m.Method) -> bytes:
        return framing.encode_method_frame(channel, method.encode())

    c = AmqpClient(ConnectionParams())
    c.machine.receive_data(
        frame(0, m.ConnectionStart(0, 9, {}, b"PLAIN", b"en_US"))
        + frame(0, m.ConnectionTune(2047, 131072, 0))
        + frame(0, m.ConnectionOpenOk()),
        0,
    )
    c.machine.open_channel(1)
    c.machine.send_method(1, m.ConfirmSelect())
    c.machine.receive_data(frame(1, m.ChannelOpenOk()) + frame(1, m.ConfirmSelectOk()), 0)
    for _ in range(10):
        c.publish_frames(b"")
    assert c.in_flight == 10
    c.machine.receive_data(frame(1, m.BasicAck(3, multiple=True)) + frame(1, m.BasicAck(5)), 0)
    assert c.in_flight == 6
    c.machine.receive_data(frame(1, m.BasicNack(4)), 0)
    assert (c.in_flight, c.nacked) == (5, 1)
    c.machine.receive_data(frame(1, m.BasicAck(10, multiple=True)), 0)
    assert (c.in_flight, c.nacked) == (0, 1)
