"""What every client of the fault workload shares (``workload.py``'s 0-9-1 publishers and
consumers, ``rstream_clients.py``'s stream-protocol ones): the run's clock, the settings, a
queue's spec, and ``Client``'s loop over the nodes (connect, serve, fail over, go home).
Its own module, so the two kinds of client import it rather than each other."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aio_pika

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aio_pika.abc import AbstractRobustConnection

    from tools.faults.history import History

    Connection = aio_pika.abc.AbstractConnection | AbstractRobustConnection

__all__ = [
    "Client",
    "Clock",
    "QueueSpec",
    "WorkloadSettings",
    "close_quietly",
    "connect",
    "wait_or_set",
    "with_heartbeat",
]


class Clock:
    """Seconds since the run started (monotonic)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def at(self, monotonic: float) -> float:
        return monotonic - self.t0


@dataclass
class WorkloadSettings:
    publishers_per_queue: int = 2
    consumers_per_queue: int = 2
    rate: float = 50.0  # messages a second, per publisher
    window: int = 4  # unconfirmed messages a publisher may have
    confirm_timeout: float = 5.0
    connect_timeout: float = 3.0
    heartbeat: int = 4
    body_size: int = 64
    prefetch: int = 20
    stream: bool = False
    # A stream's readers and publishers, by protocol: "amqp" (0-9-1, aio-pika) and
    # "rstream" (the stream protocol, ``rstream_clients.py``); each kind listed gets
    # ``consumers_per_queue`` readers (``publishers_per_queue`` publishers) of each queue.
    # Readers None: both where the target has stream listeners (the run decides), else
    # 0-9-1 only.
    stream_readers: tuple[str, ...] | None = None
    stream_publishers: tuple[str, ...] = ("amqp",)
    # A stream-protocol reader stores its offset on the server every this many messages.
    store_every: int = 50
    # When consumers start: "start" (with the publishers) or "drain" (once publishing
    # stopped, so every queue holds a backlog through the faults).
    consumers_from: str = "start"


@dataclass(frozen=True)
class QueueSpec:
    name: str
    persistent: bool = True  # delivery mode 2 (a transient message dies with its node)


def with_heartbeat(url: str, seconds: int) -> str:
    return f"{url}{'&' if '?' in url else '?'}heartbeat={seconds}"


async def wait_or_set(event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def close_quietly(connection: Connection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(connection.close(), 2)


async def connect(url: str, settings: WorkloadSettings) -> Connection:
    return await asyncio.wait_for(
        aio_pika.connect(with_heartbeat(url, settings.heartbeat), timeout=settings.connect_timeout),
        settings.connect_timeout + 1,
    )


@dataclass(eq=False)
class Client:
    name: str
    queue: QueueSpec
    urls: Sequence[str]
    history: History
    clock: Clock
    settings: WorkloadSettings
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    # Set to send a client that failed over back to its first node (:meth:`go_home`).
    leave: asyncio.Event = field(default_factory=asyncio.Event)
    session: int = 0
    connects: int = 0
    failures: int = 0
    at: int = 0  # the index in ``urls`` of the node it uses (or dials) now

    async def run(self) -> None:
        while not self.stop.is_set():
            try:
                connection = await self.open()
            except Exception:
                self.at = (self.at + 1) % len(self.urls)
                await wait_or_set(self.stop, 0.3)
                continue
            self.session += 1
            self.connects += 1
            failed = False
            try:
                await self.serve(connection)
            except Exception:
                self.failures += 1
                failed = True
            finally:
                await self.release(connection)
            if self.leave.is_set() and not failed:
                self.leave.clear()
                self.at = 0
            elif not self.stop.is_set():
                self.at = (self.at + 1) % len(self.urls)  # that node failed it: the next
                await wait_or_set(self.stop, 0.1)

    def go_home(self) -> None:
        """Leave the node it failed over to for its first one (after a fault healed: the
        clients stay spread over the nodes from one cycle to the next)."""
        if self.at != 0:
            self.leave.set()

    def leaving(self) -> bool:
        return self.stop.is_set() or self.leave.is_set()

    async def open(self) -> Any:
        """A connection to the node it uses now (``urls[at]``)."""
        return await connect(self.urls[self.at], self.settings)

    async def release(self, connection: Any) -> None:
        await close_quietly(connection)

    async def serve(self, connection: Any) -> None:
        raise NotImplementedError
