"""Large bodies on the way in: the adapter reads every socket into its loop's one buffer
(``server/read_buffer.py``, an ``asyncio.BufferedProtocol``) and the 0-9-1 decoder parses
reads with large frames in place (``FrameDecoder.feed_view``), copying each frame, and a
frame held for the next read, out of a buffer the next read overwrites. Through pika and
raw frames, against ``leveret serve`` (uvloop) and the embedded broker (asyncio's selector
loop): bodies of one frame and of many (a small ``frame_max``), reads that end anywhere in
a frame, every body byte-exact.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from leveret.server.read_buffer import read_buffer
from leveret.testing.embedded import EmbeddedBroker
from tests.integration.pika_support import connect, connect_to, pump
from tests.integration.test_raw_frames import (
    BASIC_PUBLISH,
    FRAME_BODY,
    RawClient,
    frame,
    header_frame,
    method_frame,
    publish_args,
)

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

# One 64 KiB body (scenario f's), bodies around the decoder's thresholds (4 KiB held pieces,
# 16 KiB view frames), and bodies of several frames at any frame_max.
SIZES = [65536, 65536, 1, 4095, 16384, 65536 * 3 + 17, 20, 200_000, 65536]


def _body(size: int, seed: int) -> bytes:
    """A body no other message of the test has: its seed, then a run rotated by it."""
    run = bytes((seed * 37 + i) & 0xFF for i in range(251))
    return (seed.to_bytes(4, "big") + run * (size // 251 + 1))[:size]


def _consume(conn: Any, queue: str, count: int) -> list[bytes]:
    ch = conn.channel()
    got: list[bytes] = []
    ch.basic_consume(queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    pump(conn, lambda: len(got) >= count, timeout=30.0)
    return got


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_large_and_multi_frame_bodies_round_trip_byte_exact(
    broker: Broker, name: str, frame_max: int
) -> None:
    """Published back to back, three rounds of every size: reads of the broker's buffer
    end inside most frames; each body comes back whole, in order, byte for byte."""
    bodies = [_body(size, i) for i, size in enumerate(SIZES * 3)]
    conn = connect(broker, frame_max=frame_max)
    try:
        ch = conn.channel()
        ch.queue_declare(name)
        for body in bodies:
            ch.basic_publish("", name, body)
        got = _consume(conn, name, len(bodies))
        assert [len(b) for b in got] == [len(b) for b in bodies]
        assert got == bodies
        conn.channel().queue_delete(name)
    finally:
        conn.close()


@pytest.mark.parametrize("frame_max", [4096, 131072])
def test_reads_cut_anywhere_in_a_frame(broker: Broker, name: str, frame_max: int) -> None:
    """Raw publishes sent in pieces a pause apart (each its own read, as far as the kernel
    keeps them apart): cut inside a body frame's header, right after it, inside its payload
    before and after 4 KiB, one octet before its frame end, and inside a following small
    frame. The bodies consumed are the bodies sent."""
    bodies = [_body(size, 100 + i) for i, size in enumerate([65536, 70000, 65536 * 2, 300])]
    conn = connect(broker)
    raw = RawClient(broker)
    try:
        conn.channel().queue_declare(name)
        raw.handshake(frame_max=frame_max)
        raw.open_channel(1)
        chunk = frame_max - 8
        stream = bytearray()
        for body in bodies:
            stream += method_frame(1, BASIC_PUBLISH, publish_args("", name))
            stream += header_frame(1, len(body))
            for off in range(0, len(body), chunk):
                stream += frame(FRAME_BODY, 1, body[off : off + chunk])
        first_body = stream.index(frame(FRAME_BODY, 1, bodies[0][:chunk])[:7])
        cuts = sorted(
            {
                first_body + 3,  # inside the body frame's header
                first_body + 7,  # right after it
                first_body + 7 + 1000,  # a small held piece
                first_body + 7 + 9000,  # a large one
                first_body + 7 + min(chunk, len(bodies[0])),  # one octet before the end
                len(stream) - 150,  # inside the last message's small frames
            }
        )
        at = 0
        for cut in [*cuts, len(stream)]:
            raw.send(bytes(stream[at:cut]))
            at = cut
            time.sleep(0.02)
        got = _consume(conn, name, len(bodies))
        assert got == bodies
        conn.channel().queue_delete(name)
    finally:
        raw.close()
        conn.close()


def test_reads_after_a_large_frame_land_in_the_loops_read_buffer() -> None:
    """The embedded broker (asyncio's selector loop): after a read that brought a 64 KiB
    body, the connection reads into the loop's one buffer, where the next body's octets
    are found; both bodies come back whole, and small messages after them too (read as
    ``bytes`` again)."""
    first, body = _body(65536, 7), _body(65536, 8)
    with EmbeddedBroker() as broker:
        conn = connect_to("127.0.0.1", broker.port)
        try:
            ch = conn.channel()
            ch.queue_declare("views")
            ch.basic_publish("", "views", first)
            time.sleep(0.2)  # read alone: the transport switches after it
            ch.basic_publish("", "views", body)
            time.sleep(0.2)
            ch.queue_declare("views", passive=True)  # a round trip: both were read

            def buffered() -> bytes:
                return read_buffer(asyncio.get_running_loop()).tobytes()

            held = broker.call(buffered)
            windows = [body[k : k + 1024] for k in range(0, len(body) - 1024, 1024)]
            assert any(window in held for window in windows)
            for i in range(3):
                ch.basic_publish("", "views", b"small %d" % i)
            assert _consume(conn, "views", 5) == [first, body, b"small 0", b"small 1", b"small 2"]
        finally:
            conn.close()
