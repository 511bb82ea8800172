"""The asyncio adapter (``server/connection.py``) on an in-memory transport: reading stops
while the transport's buffer is full and starts again when it drains, by itself: a
connection without heartbeats (a peer node's inter-node link) has no tick to restart it."""

from __future__ import annotations

import asyncio
from typing import Any

from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp091.connection import Limits
from leveret.server.connection import ConnectionProtocol
from leveret.server.memory_alarm import MemoryAlarm


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
