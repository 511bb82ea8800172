"""Stream queue figures: append rate with confirms (stream vs classic durable queue) and
consume rate from a stream, with the raw client of ``bench/amqp.py`` and with pika.

    python -m bench.stream --port 5672 [--duration 10] [--size 1024] [--inflight 1000] [--dedup]
        [--pid BROKER_PID]

The stream protocol's rows: ``python -m bench.stream_protocol`` (same figures over port 5552).

Each part uses its own queue (deleted at the end). ``append``: one publisher, persistent
``size``-byte messages, at most ``inflight`` unconfirmed, for ``duration`` seconds; prints
confirmed messages per second. ``consume``: one consumer attached at ``first`` to the stream
just filled, prefetch 1000, acking with ``multiple`` every 100 (raw client) or every message
(pika); prints delivered messages per second.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any

from bench.amqp import Connection, PublishTemplate, connect
from bench.stream_protocol import cpu_seconds
from leveret.model.queues.stream import PRODUCER_HEADER, SEQUENCE_HEADER
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldValue

STREAM: dict[str, FieldValue] = {"x-queue-type": "stream"}
_Q = struct.Struct(">q")


async def _declare(conn: Connection, queue: str, stream: bool) -> None:
    await conn.call(
        1,
        m.QueueDeclare(queue=queue, durable=True, arguments=dict(STREAM) if stream else {}),
        m.QueueDeclareOk,
    )


def _dedup_template(queue: str, size: int, frame_max: int, producer: str) -> tuple[bytes, bytes]:
    """The frames of one publish with de-duplication headers, split where the 8-byte
    ``x-stream-sequence`` value goes."""
    marker = 0x5A5A5A5A5A5A5A5A
    props = BasicProperties(
        headers={PRODUCER_HEADER: producer, SEQUENCE_HEADER: marker}, delivery_mode=2
    ).encode()
    method = m.BasicPublish(exchange="", routing_key=queue).encode()
    whole = framing.encode_message_frames(1, method, 60, bytes(size), props, frame_max)
    at = whole.index(_Q.pack(marker))
    return whole[:at], whole[at + 8 :]


async def append_rate(
    host: str,
    port: int,
    queue: str,
    *,
    stream: bool,
    size: int,
    inflight: int,
    duration: float,
    dedup: bool = False,
) -> tuple[float, int]:
    """Confirmed messages per second; with ``dedup`` every message carries
    ``x-stream-producer`` / ``x-stream-sequence`` headers (as the Spark sink sends)."""
    conn = await connect(host, port, "guest", "guest", "/")
    await _declare(conn, queue, stream)
    await conn.call(1, m.ConfirmSelect(), m.ConfirmSelectOk)
    template = PublishTemplate(1, "", queue, size, persistent=True, frame_max=conn.frame_max)
    head, tail = _dedup_template(queue, size, conn.frame_max, f"bench-{queue}")
    state = {"sent": 0, "confirmed": 0}
    room = asyncio.Event()
    room.set()

    def on_confirm(tag: int, multiple: bool, ack: bool) -> None:
        state["confirmed"] = tag if multiple else max(state["confirmed"], tag)
        if state["sent"] - state["confirmed"] < inflight:
            room.set()

    conn.on_confirm = on_confirm
    stamp = bytes(16)
    start = time.monotonic()
    end = start + duration
    while time.monotonic() < end:
        await room.wait()
        batch = min(100, inflight - (state["sent"] - state["confirmed"]))
        if batch <= 0:
            room.clear()
            continue
        if dedup:
            sent = state["sent"]
            conn.publish(b"".join(head + _Q.pack(sent + i) + tail for i in range(batch)), batch)
        else:
            conn.publish((template.prefix + stamp + template.suffix) * batch, batch)
        state["sent"] += batch
        conn.flush()
        await conn.writable.wait()
        await asyncio.sleep(0)
    confirmed = state["confirmed"]
    elapsed = time.monotonic() - start
    await conn.close()
    return confirmed / elapsed, confirmed


async def consume_rate(host: str, port: int, queue: str, count: int) -> float:
    conn = await connect(host, port, "guest", "guest", "/")
    await conn.call(1, m.BasicQos(prefetch_count=1000), m.BasicQosOk)
    done = asyncio.get_running_loop().create_future()
    state = {"n": 0, "last": 0, "acked": 0}

    def on_deliver(tag: int, redelivered: int, stamp: bytes) -> None:
        state["n"] += 1
        state["last"] = tag
        if state["n"] >= count and not done.done():
            done.set_result(None)

    def after_data() -> None:
        if state["n"] - state["acked"] >= 100 or (done.done() and state["n"] > state["acked"]):
            conn.ack(state["last"], multiple=True)
            state["acked"] = state["n"]

    conn.on_deliver = on_deliver
    conn.after_data = after_data
    start = time.monotonic()
    await conn.call(
        1,
        m.BasicConsume(queue=queue, arguments={"x-stream-offset": "first"}),
        m.BasicConsumeOk,
    )
    await asyncio.wait_for(done, 120)
    elapsed = time.monotonic() - start
    if conn.transport is not None:
        conn.transport.abort()  # a clean close is not needed to measure
    return count / elapsed


def pika_consume_rate(host: str, port: int, queue: str, count: int) -> float:
    import pika

    credentials = pika.PlainCredentials("guest", "guest")
    params = pika.ConnectionParameters(host, port, credentials=credentials)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got = [0]

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        got[0] += 1
        channel.basic_ack(method.delivery_tag)

    start = time.monotonic()
    ch.basic_consume(queue, on_message, arguments={"x-stream-offset": "first"})
    # Not stop_consuming(): pika's basic.cancel rejects what it holds, and a reject of a
    # stream delivery closes the connection (540), as in RabbitMQ.
    while got[0] < count:
        conn.process_data_events(time_limit=0.1)
    elapsed = time.monotonic() - start
    conn._impl._transport.abort()  # close the socket: a clean close would reject in-flight
    return count / elapsed


async def _length(host: str, port: int, queue: str, *, delete: bool = False) -> int:
    """The passive declare's message count (a stream's next offset in Leveret)."""
    conn = await connect(host, port, "guest", "guest", "/")
    ok = await conn.call(1, m.QueueDeclare(queue=queue, passive=True), m.QueueDeclareOk)
    if delete:
        await conn.call(1, m.QueueDelete(queue=queue), m.QueueDeleteOk)
    await conn.close()
    return ok.message_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=1000)
    parser.add_argument("--consume", type=int, default=200_000, help="messages to consume")
    parser.add_argument(
        "--dedup",
        action="store_true",
        help="stream appends carry x-stream-producer / x-stream-sequence (as the Spark sink)",
    )
    parser.add_argument("--pid", type=int, help="the broker's pid: its CPU per message")
    args = parser.parse_args()
    host, port = args.host, args.port
    pid = args.pid

    def per_message(cpu0: float, n: int) -> str:
        return f", broker CPU {(cpu_seconds(pid) - cpu0) / n * 1e6:.1f} us/msg" if pid else ""

    tag = uuid.uuid4().hex[:8]
    classic, stream = f"bench.classic.{tag}", f"bench.stream.{tag}"
    rate, _n = asyncio.run(
        append_rate(host, port, classic, stream=False, size=args.size,
                    inflight=args.inflight, duration=args.duration)
    )  # fmt: skip
    asyncio.run(_length(host, port, classic, delete=True))
    print(f"append, classic durable queue: {rate:,.0f} confirmed msg/s")
    cpu0 = cpu_seconds(pid)
    rate, appended = asyncio.run(
        append_rate(host, port, stream, stream=True, size=args.size,
                    inflight=args.inflight, duration=args.duration, dedup=args.dedup)
    )  # fmt: skip
    shown = " with de-duplication ids" if args.dedup else ""
    print(f"append, stream{shown}: {rate:,.0f} confirmed msg/s{per_message(cpu0, appended)}")
    count = min(args.consume, appended)
    cpu0 = cpu_seconds(pid)
    rate = asyncio.run(consume_rate(host, port, stream, count))
    print(
        f"stream consume, raw client: {rate:,.0f} msg/s ({count:,} messages)"
        f"{per_message(cpu0, count)}"
    )
    rate = pika_consume_rate(host, port, stream, min(count, 50_000))
    print(f"stream consume, pika BlockingConnection: {rate:,.0f} msg/s")
    asyncio.run(_length(host, port, stream, delete=True))


if __name__ == "__main__":
    main()
