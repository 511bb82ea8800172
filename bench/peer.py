"""An asyncio protocol around one of the project's sans-IO client machines, for the load
tools that speak a protocol through it (``amqp010_load``, ``amqp10_load``): octets in go to
the machine, its events to :meth:`MachinePeer.event`, and what it has to send goes out
after each read. A subclass makes ``machine``, says how its output is taken (``flush``)
and reacts to events; :func:`open_peer` connects one and waits until it is ``ready``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Machine", "MachinePeer", "open_peer"]


class Machine(Protocol):
    def initiate(self) -> None: ...

    def receive_data(self, data: bytes, now: float) -> Iterable[object]: ...


M = TypeVar("M", bound=Machine)


class MachinePeer(asyncio.Protocol, Generic[M]):
    machine: M

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.ready = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.machine.initiate()
        self.flush()

    def data_received(self, data: bytes) -> None:
        for event in self.machine.receive_data(data, time.monotonic()):
            self.event(event)
        self.flush()

    def flush(self) -> None:
        raise NotImplementedError

    def event(self, event: object) -> None:
        raise NotImplementedError


async def open_peer(peer: MachinePeer[Any], host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: peer, host, port)
    await asyncio.wait_for(peer.ready.wait(), 10)
