"""The asyncio adapter (``server/connection.py``) on an in-memory transport: reading stops
while the transport's buffer is full and starts again when it drains, by itself: a
connection without heartbeats (a peer node's inter-node link) has no tick to restart it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.connection import Limits
from leveret.server.connection import ConnectionProtocol
from leveret.server.memory_alarm import MemoryAlarm
from leveret.server.waiting_writes import READS, WaitingWrites

if TYPE_CHECKING:
    from collections.abc import Callable


class _Transport:
    """What the adapter asks of an asyncio transport, and whether it is read."""

    def __init__(self) -> None:
        self.reading = True
        self.switches: list[str] = []  # "pause", "resume": the adapter's calls in order
        self.written: list[bytes] = []
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5672), "sockname": ("127.0.0.1", 5672)}.get(name, default)

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False
        self.switches.append("pause")

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True
        self.switches.append("resume")

    def writelines(self, data: list[bytes]) -> None:
        self.written.extend(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def test_reading_starts_again_when_the_transport_buffer_drains() -> None:
    async def main() -> None:
        broker = Broker()
        protocol = ConnectionProtocol(
            broker, UserStore(), Limits(heartbeat=0), set(), MemoryAlarm(broker.gauge, 1 << 40)
        )
        transport = _Transport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(b"AMQP\x00\x00\x09\x01")  # 0-9-1: connection.start goes out
        assert transport.written
        assert transport.switches == []
        protocol.pause_writing()  # the peer does not read what we write: neither do we
        assert transport.switches == ["pause"]
        protocol.data_received(b"")  # input read meanwhile: a turn, and still not reading
        assert transport.switches == ["pause"]
        protocol.resume_writing()
        assert transport.switches == ["pause", "resume"]  # at once: nothing else would
        protocol.connection_lost(None)

    asyncio.run(main())


class _CountingTransport(_Transport):
    """Counts the adapter's calls into the transport."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def writelines(self, data: list[bytes]) -> None:
        self.calls += 1
        super().writelines(data)

    def is_closing(self) -> bool:
        self.calls += 1
        return super().is_closing()


def _method(channel: int, method: m.Method) -> bytes:
    return framing.encode_method_frame(channel, method.encode())


@pytest.mark.parametrize("heartbeat", [10, 0])
def test_a_read_that_writes_nothing_does_not_call_into_the_transport(heartbeat: int) -> None:
    """A lone publish on a publisher's own socket (scenario h of issue 26: a thousand of
    them at once) costs no transport call and leaves the heartbeat's timer as armed; a read
    that writes (a confirm's ack) still writes, and the deadline follows it."""

    async def main() -> None:
        broker = Broker()
        protocol = ConnectionProtocol(
            broker,
            UserStore.with_default_user(),
            Limits(),
            set(),
            MemoryAlarm(broker.gauge, 1 << 40),
        )
        transport = _CountingTransport()
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(framing.PROTOCOL_HEADER)
        protocol.data_received(
            _method(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0guest\0guest"))
        )
        protocol.data_received(
            _method(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=heartbeat))
            + _method(0, m.ConnectionOpen(virtual_host="/"))
            + _method(1, m.ChannelOpen())
            + _method(1, m.QueueDeclare(queue="q"))
        )
        assert transport.written  # start, tune, open-ok, channel.open-ok, declare-ok
        # the heartbeat, 5 s after the last write (without heartbeats, the handshake's
        # deadline armed at the accept, which ticks once to find nothing due)
        armed = protocol._due
        publish = framing.encode_message_frames(
            1, m.BasicPublish(routing_key="q").encode(), 60, b"x" * 16, b"\x00\x00", 131072
        )
        before = transport.calls
        for _ in range(3):
            protocol.data_received(publish)
        assert transport.calls == before
        assert protocol._due == armed
        assert broker.vhosts["/"].queues["q"].message_count == 3
        written = len(transport.written)
        protocol.data_received(_method(1, m.ConfirmSelect()))  # writes select-ok
        assert len(transport.written) == written + 1
        assert transport.calls > before
        protocol.connection_lost(None)

    asyncio.run(main())


_DELIVER = b"\x00\x3c\x00\x3c"  # a method frame's class and method ids: basic.deliver


def _open(protocol: ConnectionProtocol, transport: _Transport, *more: bytes) -> None:
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(framing.PROTOCOL_HEADER)
    protocol.data_received(
        _method(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0guest\0guest"))
    )
    protocol.data_received(
        _method(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=10))
        + _method(0, m.ConnectionOpen(virtual_host="/"))
        + _method(1, m.ChannelOpen())
        + b"".join(more)
    )


def test_a_burst_of_reads_writes_the_consumers_deliveries_before_it_ends() -> None:
    """A thousand publishers' lone publishes read in one loop iteration (scenario h of
    issue 26) no longer hold the consumer's deliveries until the iteration's end: they are
    written every ``waiting_writes.READS`` reads, and the rest at the iteration's end."""

    async def main() -> None:
        broker = Broker()
        users, alarm = UserStore.with_default_user(), MemoryAlarm(broker.gauge, 1 << 40)
        registry: set[ConnectionProtocol] = set()
        consumer = ConnectionProtocol(broker, users, Limits(), registry, alarm)
        received = _Transport()
        _open(
            consumer,
            received,
            _method(1, m.QueueDeclare(queue="q")),
            _method(1, m.BasicQos(prefetch_count=1000)),
            _method(1, m.BasicConsume(queue="q")),
        )
        publishers = []
        for _ in range(3 * READS):
            publisher = ConnectionProtocol(broker, users, Limits(), registry, alarm)
            _open(publisher, _Transport())
            publishers.append(publisher)
        await asyncio.sleep(0)  # the handshakes' waiting flushes
        publish = framing.encode_message_frames(
            1, m.BasicPublish(routing_key="q").encode(), 60, b"x" * 16, b"\x00\x00", 131072
        )
        received.written.clear()
        delivered = []  # deliveries written to the consumer after each read of the burst
        for publisher in publishers:  # one loop iteration: no await between the reads
            publisher.data_received(publish)
            delivered.append(b"".join(received.written).count(_DELIVER))
        assert delivered[READS - 2] == 0
        assert delivered[READS - 1] == READS
        assert delivered[2 * READS - 1] == 2 * READS
        assert delivered[-1] == 3 * READS
        publishers[0].data_received(publish)  # waits for the iteration's end
        assert b"".join(received.written).count(_DELIVER) == 3 * READS
        await asyncio.sleep(0)
        assert b"".join(received.written).count(_DELIVER) == 3 * READS + 1
        for protocol in (consumer, *publishers):
            protocol.connection_lost(None)

    asyncio.run(main())


def test_a_failing_flush_does_not_stop_the_others() -> None:
    flushed: list[str] = []
    scheduled: list[Callable[[], None]] = []

    def fails() -> None:
        raise RuntimeError("boom")

    waiting = WaitingWrites(scheduled.append, every=2)
    waiting.add(fails)
    waiting.add(lambda: flushed.append("second"))
    waiting.read()
    assert flushed == []
    waiting.read()  # the second read flushes both: the first raises, the second still runs
    assert flushed == ["second"]
    assert len(scheduled) == 1  # one call_soon for the iteration, run at its end
    scheduled[0]()
    assert flushed == ["second"]


class _SwitchingTransport(_Transport):
    """Keeps the protocol the adapter hands it (``set_protocol``), as uvloop's does."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: asyncio.BaseProtocol | None = None
        self.protocols: list[str] = []

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol
        self.protocols.append(type(protocol).__name__)

    def read(self, data: bytes) -> None:
        """One read of ``data`` the way the loop makes it for the current protocol: into
        the buffer a buffered protocol gives, which is then overwritten, or as ``bytes``."""
        protocol = self.protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            buffer = memoryview(protocol.get_buffer(-1))
            buffer[: len(data)] = data
            protocol.buffer_updated(len(data))
            buffer[: len(data)] = b"\xa5" * len(data)
        else:
            assert isinstance(protocol, asyncio.Protocol)
            protocol.data_received(data)


def test_large_frames_are_read_into_the_loops_buffer_and_small_ones_as_bytes() -> None:
    """After a read that brought a 64 KiB body the transport reads into the loop's buffer
    (a ``BufferedProtocol`` of the adapter's), where the decoder copies out each frame
    before the buffer is overwritten; a read of small frames as large as a body hands the
    transport back to the adapter. Every message is enqueued byte-exact."""

    async def main() -> None:
        broker = Broker()
        protocol = ConnectionProtocol(
            broker,
            UserStore.with_default_user(),
            Limits(),
            set(),
            MemoryAlarm(broker.gauge, 1 << 40),
        )
        transport = _SwitchingTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)  # type: ignore[arg-type]
        for data in (
            framing.PROTOCOL_HEADER,
            _method(0, m.ConnectionStartOk(mechanism="PLAIN", response=b"\0guest\0guest")),
            _method(0, m.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0))
            + _method(0, m.ConnectionOpen(virtual_host="/"))
            + _method(1, m.ChannelOpen())
            + _method(1, m.QueueDeclare(queue="q")),
        ):
            transport.read(data)
        assert transport.protocols == []

        def publish(body: bytes) -> bytes:
            return framing.encode_message_frames(
                1, m.BasicPublish(routing_key="q").encode(), 60, body, b"\x00\x00", 131072
            )

        bodies = [bytes([i]) * 65536 + b"end %d" % i for i in range(4)]
        stream = b"".join(publish(body) for body in bodies)
        # The first read ends inside the second body: its frame is held across the switch.
        cut = len(publish(bodies[0])) + 30_000
        transport.read(stream[:cut])
        assert transport.protocols == ["_ViewReader"]
        transport.read(stream[cut:])
        assert transport.protocols == ["_ViewReader"]  # large frames still come
        small = [b"small %d" % i for i in range(2000)]
        transport.read(b"".join(publish(body) for body in small))
        assert transport.protocols == ["_ViewReader", "ConnectionProtocol"]
        queue = broker.vhosts["/"].queues["q"]
        for _ in range(100):  # the turns after the first (300 frames each)
            if queue.message_count == len(bodies) + len(small):
                break
            await asyncio.sleep(0)
        assert queue.message_count == len(bodies) + len(small)
        got = []
        for _ in range(len(bodies) + len(small)):
            entry = queue.get(auto_settle=True)
            assert entry is not None
            got.append(entry.message.body)
        # The small ones were decoded from the buffer and handled in later turns, after
        # the buffer was overwritten.
        assert got == [*bodies, *small]
        protocol.connection_lost(None)

    asyncio.run(main())
