"""``python -m bench.convert_path``: the broker's work per message on each delivery path that
crosses protocols, or does not, in memory (no sockets, no scheduler): a fixed workload for
``valgrind --tool=callgrind`` on the compiled build, so that a change to ``leveret.convert``
is measured in instructions, which a busy machine does not blur.

Scenarios (``--scenario``), ``--count`` messages of 1 KiB with a content type, a message id
(the same for every message, or each its own with ``--vary``) and two headers:

==============  ===============================================================================
091-091         0-9-1 publish, classic queue, 0-9-1 consumer (the same protocol: no conversion)
10-10           1.0 transfer, classic queue, 1.0 consumer (the same protocol)
091-10          0-9-1 publish, 1.0 consumer (the table's 0-9-1 -> 1.0 direction)
10-091          1.0 transfer, 0-9-1 consumer (1.0 -> 0-9-1)
091-stream-091  0-9-1 publish into a stream, 0-9-1 reader (the stored record and back)
stream-091      stream-protocol records appended to a stream, 0-9-1 reader (1.0 -> 0-9-1)
stream-10       stream-protocol records, 1.0 reader (the same form: no conversion)
==============  ===============================================================================

Publishers' bytes are made before the run; the broker's entry points (``data_received``,
``run_turn``, ``take_output``, a stream's ``append_entries``) are what callgrind should
collect (``--toggle-collect=CPyPy_*___<name>``; ``docs/benchmarks.md`` has the command).
Consumers are pre-settled (0-9-1 stream readers ack in one multiple ack per batch) and
their deliveries are counted in the output bytes, not decoded. Prints the broker's CPU µs
per message (process time; noisy on a busy machine).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any, cast

from bench.amqp10_path import _Pair
from leveret.auth.users import UserStore
from leveret.convert.stream_records import RECORDS
from leveret.convert.stream_stamp import stamp_stream
from leveret.model.broker import Broker
from leveret.model.queues.stream_log import MemoryStreamBackend, StreamEntry
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.protocol.amqp10 import (
    Data,
    Properties,
    Role,
    SenderSettleMode,
    Source,
    Symbol,
    Target,
)
from leveret.protocol.amqp10.message import encode_message
from leveret.protocol.rabbitstream.chunk import simple_entry
from leveret.testing import CodecClient

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.model.message import Message
    from leveret.model.queues.stream import StreamQueue
    from leveret.model.queues.stream_log import StreamLog
    from leveret.protocol.amqp091.fieldtable import FieldValue
    from leveret.protocol.amqp10.types import Value

__all__ = ["SCENARIOS", "build_parser", "main", "run"]

SCENARIOS = ("091-091", "10-10", "091-10", "10-091", "091-stream-091", "stream-091", "stream-10")
BODY = b"x" * 1024
# A basic.deliver method frame's class and method ids; a transfer performative's descriptor.
_DELIVER = b"\x00\x3c\x00\x3c"
_TRANSFER = b"\x00\x53\x14"


class _Log:
    """A stream log in memory that keeps messages as published and stamps them when they
    are read, as the server's ``FileStreamLog`` does (``MemoryStreamLog`` is compiled, so
    this wraps one instead of subclassing it)."""

    def __init__(self, log: StreamLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def read(self, offset: int, count: int) -> list[StreamEntry]:
        return [
            StreamEntry(e.offset, e.timestamp, stamp_stream(e.message, e.offset, e.timestamp))
            for e in self._log.read(offset, count)
        ]


class _Backend:
    """Streams in memory stored and stamped as the server's ``StreamStore`` stores and
    stamps them (the stamp when read, not when appended)."""

    def __init__(self) -> None:
        self._memory = MemoryStreamBackend(RECORDS)

    def open(self, vhost: str, name: str, store_id: int, segment_bytes: int | None) -> StreamLog:
        return cast("StreamLog", _Log(self._memory.open(vhost, name, store_id, segment_bytes)))

    def stamp(self, message: Message, offset: int, timestamp: int) -> Message:
        return message


def _broker(stream: bool) -> Broker:
    broker = Broker()
    if stream:
        broker.attach_streams(_Backend())
        broker.vhosts["/"].declare_queue(
            "q", owner=None, durable=True, arguments={"x-queue-type": "stream"}
        )
    else:
        broker.vhosts["/"].declare_queue("q", owner=None)
    return broker


def _message_id(args: argparse.Namespace, i: int) -> str:
    return f"m-{i}" if args.vary else "m"


def _props_091(args: argparse.Namespace, i: int) -> BasicProperties:
    return BasicProperties(
        content_type="application/json",
        headers={"k": "v", "n": 7},
        delivery_mode=2,
        message_id=_message_id(args, i),
    )


def _payload_10(args: argparse.Namespace, i: int) -> bytes:
    return encode_message(
        Data(BODY),
        properties=Properties(
            message_id=_message_id(args, i), content_type=Symbol("application/json")
        ),
        application_properties={"k": "v", "n": 7},
    )


class _Counter:
    """The broker's CPU time around its entry points, and the deliveries it wrote (counted
    frame by frame: a basic.deliver method frame, a transfer performative)."""

    def __init__(self, amqp10: bool) -> None:
        self.amqp10 = amqp10
        self.elapsed = 0.0
        self.delivered = 0
        self._rest = b""

    def timed(self, t: float) -> None:
        self.elapsed += time.process_time() - t

    def output(self, out: bytes, *, amqp10: bool) -> None:
        """Count the deliveries in a front end's ``out`` (``amqp10``: the 1.0 one's)."""
        if amqp10 != self.amqp10:
            return  # the other front end's output: a publisher's answers
        data = self._rest + out
        at = 0
        n = len(data)
        while True:
            if self.amqp10:
                if at + 8 > n:
                    break
                size = int.from_bytes(data[at : at + 4], "big")
                if at + size > n:
                    break
                body = at + 4 * data[at + 4]
                self.delivered += data.startswith(_TRANSFER, body)
            else:
                if at + 7 > n:
                    break
                size = 8 + int.from_bytes(data[at + 3 : at + 7], "big")
                if at + size > n:
                    break
                self.delivered += data[at] == 1 and data.startswith(_DELIVER, at + 7)
            at += size
        self._rest = data[at:]


def _091_client(broker: Broker) -> CodecClient:
    client = CodecClient.connect(broker, UserStore.with_default_user())
    client.handshake()
    client.open_channel(1)
    return client


def _091_feed(client: CodecClient, data: bytes, counter: _Counter) -> None:
    server = client.shell
    t = time.process_time()
    server.data_received(data, 0.0)
    while server.wants_turn:
        server.run_turn(0.0)
    out = b"".join(server.take_output(0.0))
    counter.timed(t)
    counter.output(out, amqp10=False)


def _091_consumer(client: CodecClient, *, stream: bool) -> None:
    if stream:
        # Under the output high-water mark between two drains (1 KiB bodies).
        client.send(1, m.BasicQos(prefetch_count=200))
        client.expect(1, m.BasicQosOk)
    arguments: dict[str, FieldValue] = {"x-stream-offset": "first"} if stream else {}
    client.send(
        1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=not stream, arguments=arguments)
    )
    client.expect(1, m.BasicConsumeOk)
    client.frames()


def _10_pair(
    broker: Broker, *, receiver: bool, sender: bool, stream: bool, count: int
) -> tuple[_Pair, int, int]:
    pair = _Pair(broker)
    client = pair.client
    client.initiate()
    pair.pump()
    channel = client.begin()
    pair.pump()
    handle = -1
    if receiver:
        filters: dict[Value, Value] | None = None
        if stream:
            filters = {Symbol("rabbitmq:stream-offset-spec"): "first"}
        handle = client.attach(
            channel,
            "c",
            Role.RECEIVER,
            source=Source(address="/queues/q", filter=filters),
            target=Target(),
            snd_settle_mode=SenderSettleMode.SETTLED,
        )
        pair.pump()
        client.grant_credit(channel, handle, count)
        pair.pump()
    sender_handle = -1
    if sender:
        sender_handle = client.attach(
            channel,
            "p",
            Role.SENDER,
            source=Source(),
            target=Target(address="/queues/q"),
            snd_settle_mode=SenderSettleMode.SETTLED,
        )
        pair.pump()
    return pair, channel, sender_handle


def _10_feed(pair: _Pair, data: bytes, counter: _Counter, *, to_client: bool = False) -> None:
    """``data`` into the broker's 1.0 front end; its output counted, and handed to the client
    machine when that sends (to learn its link credit; not timed)."""
    server = pair.server
    t = time.process_time()
    if data:
        server.data_received(data, 0.0)
    while server.wants_turn:
        server.run_turn(0.0)
    out = b"".join(server.take_output(0.0))
    counter.timed(t)
    counter.output(out, amqp10=True)
    if to_client and out:
        pair.client.receive_data(out, 0.0)


def _10_send(
    pair: _Pair, channel: int, handle: int, payloads: list[bytes], counter: _Counter
) -> Iterator[None]:
    """Send ``payloads`` in batches of at most 100, within the link's credit; yields after
    each batch (the transfers are made by the client machine, not timed)."""
    client = pair.client
    sent = 0
    while sent < len(payloads):
        k = min(100, len(payloads) - sent, client.credit(channel, handle))
        if k <= 0:
            raise RuntimeError("the broker gave the sender no credit")
        for payload in payloads[sent : sent + k]:
            client.send_transfer(channel, handle, payload, settled=True)
        sent += k
        _10_feed(pair, client.data_to_send(0.0), counter, to_client=True)
        yield


def run(args: argparse.Namespace) -> tuple[float, int]:
    """(the broker's CPU seconds, messages delivered) for ``args.scenario``."""
    scenario, n = args.scenario, args.count
    stream = "stream" in scenario
    broker = _broker(stream)
    source, sink = scenario.split("-")[0], scenario.split("-")[-1]
    counter = _Counter(amqp10=sink == "10")
    consumer_091 = _091_client(broker) if sink == "091" else None
    pair = None
    if sink == "10" or source == "10":
        pair, channel, handle = _10_pair(
            broker, receiver=sink == "10", sender=source == "10", stream=stream, count=n
        )
    if consumer_091 is not None:
        _091_consumer(consumer_091, stream=stream)
    if source == "stream":
        queue: StreamQueue = broker.vhosts["/"].queues["q"]  # type: ignore[assignment]
        entries = [simple_entry(_payload_10(args, i)) for i in range(n)]
        for at in range(0, n, 100):
            t = time.process_time()
            queue.append_entries(entries[at : at + 100], None, "", [])
            counter.timed(t)
            if consumer_091 is not None:
                _drain_091(consumer_091, counter, stream)
            if pair is not None:
                _10_feed(pair, b"", counter)
    if source == "091":
        publisher = _091_client(broker)
        frames = [publisher.encode_publish(1, "", "q", BODY, _props_091(args, i)) for i in range(n)]
        for at in range(0, n, 100):
            _091_feed(publisher, b"".join(frames[at : at + 100]), counter)
            if consumer_091 is not None:
                _drain_091(consumer_091, counter, stream)
            if pair is not None and sink == "10":
                _10_feed(pair, b"", counter)
    elif source == "10":
        assert pair is not None
        payloads = [_payload_10(args, i) for i in range(n)]
        for _ in _10_send(pair, channel, handle, payloads, counter):
            if consumer_091 is not None:
                _drain_091(consumer_091, counter, stream)
    while counter.delivered < n:
        before = counter.delivered
        if consumer_091 is not None:
            _drain_091(consumer_091, counter, stream)
        if pair is not None:
            _10_feed(pair, b"", counter)
        if counter.delivered == before:
            break
    return counter.elapsed, counter.delivered


def _drain_091(client: CodecClient, counter: _Counter, stream: bool) -> None:
    server = client.shell
    t = time.process_time()
    while server.wants_turn:
        server.run_turn(0.0)
    out = b"".join(server.take_output(0.0))
    counter.timed(t)
    counter.output(out, amqp10=False)
    if stream and counter.delivered:
        # One multiple ack for what came; the deliveries it lets out are counted too.
        ack = client.encode(1, m.BasicAck(delivery_tag=counter.delivered, multiple=True))
        _091_feed(client, ack, counter)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--scenario", choices=SCENARIOS, default="091-10")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--vary", action="store_true", help="a message id of each message's own")
    return p


def main() -> None:
    args = build_parser().parse_args()
    elapsed, delivered = run(args)
    if delivered < args.count:
        raise SystemExit(f"{args.scenario}: {delivered} of {args.count} messages delivered")
    print(f"{args.scenario}: {elapsed / delivered * 1e6:.2f} us/msg ({delivered} messages)")


if __name__ == "__main__":
    main()
