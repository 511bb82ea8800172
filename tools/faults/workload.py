"""The workload: publishers with confirms and consumers with manual acks (aio-pika), each
client given the nodes it may use in order; every publish and delivery goes into the
run's :class:`~tools.faults.history.History`.

- A **publisher** sends to its queue through the default exchange, ``mandatory`` set,
  at ``rate`` messages a second with up to ``window`` unconfirmed. Each message has a
  unique id (``publisher.seq``), the publisher's sequence number and its connection's
  number in its headers. A basic.ack is *confirmed*, basic.nack *nacked*, basic.return
  *returned*; no answer within ``confirm_timeout``, or the connection lost first, is
  *indeterminate*, and then the publisher drops the connection and dials the next node
  in its list (as a client with a list of hosts does).
- A **consumer** records each delivery (id, redelivered flag) before it acks it, and on a
  lost connection (heartbeats: ``heartbeat`` seconds) dials the next node. A stream
  queue's consumer resumes after the last offset it saw.

A stream's readers and publishers may also speak the stream protocol (rstream:
``rstream_clients.py``; ``WorkloadSettings.stream_readers`` and ``stream_publishers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage, DeliveryMode

from tools.faults.client import (
    Client,
    Clock,
    QueueSpec,
    WorkloadSettings,
    close_quietly,
    wait_or_set,
)
from tools.faults.history import Delivery, History, Outcome, Publish

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from aio_pika.abc import AbstractRobustConnection

    Connection = aio_pika.abc.AbstractConnection | AbstractRobustConnection

# aiormq warns of every confirm that came after the publisher gave up on it, and logs
# every refused connection: expected here, and counted by the clients instead.
logging.getLogger("aiormq").setLevel(logging.CRITICAL)
logging.getLogger("aio_pika").setLevel(logging.CRITICAL)


@dataclass(eq=False)
class Publisher(Client):
    seq: int = 0

    async def serve(self, connection: Connection) -> None:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        broken = asyncio.Event()
        window = asyncio.Semaphore(self.settings.window)
        pending: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        interval = 1.0 / self.settings.rate
        next_at = loop.time()
        body = b"x" * self.settings.body_size
        try:
            while not (self.leaving() or broken.is_set() or connection.is_closed):
                delay = next_at - loop.time()
                if delay > 0:
                    await wait_or_set(self.stop, delay)
                next_at = max(next_at + interval, loop.time() - 1.0)
                await window.acquire()
                if self.leaving() or broken.is_set():
                    window.release()
                    break
                self.seq += 1
                task = asyncio.create_task(
                    self._publish(channel, self.session, self.seq, body, broken, window)
                )
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            # Each publish ends within the confirm timeout; what is left then is settled
            # as indeterminate by the history's close.
            if pending:
                await asyncio.wait(pending, timeout=self.settings.confirm_timeout + 1)
        if broken.is_set():
            raise ConnectionError("a publish failed")

    async def _publish(
        self,
        channel: aio_pika.abc.AbstractChannel,
        session: int,
        seq: int,
        body: bytes,
        broken: asyncio.Event,
        window: asyncio.Semaphore,
    ) -> None:
        message_id = f"{self.name}.{seq}"
        message = aio_pika.Message(
            body,
            message_id=message_id,
            headers={"p": self.name, "ps": session, "s": seq},
            delivery_mode=(
                DeliveryMode.PERSISTENT if self.queue.persistent else DeliveryMode.NOT_PERSISTENT
            ),
        )
        self.history.sent(
            Publish(message_id, self.name, session, seq, self.queue.name, self.clock.now())
        )
        outcome = Outcome.INDETERMINATE
        try:
            await channel.default_exchange.publish(
                message,
                routing_key=self.queue.name,
                mandatory=True,
                timeout=self.settings.confirm_timeout,
            )
            outcome = Outcome.CONFIRMED
        except aiormq.exceptions.PublishError:
            outcome = Outcome.RETURNED
        except aiormq.exceptions.DeliveryError:
            outcome = Outcome.NACKED
        except Exception:
            broken.set()
        finally:
            self.history.settle(message_id, outcome, self.clock.now())
            window.release()


@dataclass(eq=False)
class Consumer(Client):
    next_offset: Any = "first"  # a stream consumer's resume point
    delivered: int = 0

    async def serve(self, connection: Connection) -> None:
        name = f"{self.name}.{self.session}"
        closed = asyncio.Event()
        connection.close_callbacks.add(lambda *_: closed.set())
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.settings.prefetch)
        queue = await channel.get_queue(self.queue.name, ensure=False)

        async def on_message(message: AbstractIncomingMessage) -> None:
            headers = message.headers or {}
            self.history.delivered(
                Delivery(
                    id=message.message_id,
                    queue=self.queue.name,
                    consumer=name,
                    redelivered=bool(message.redelivered),
                    at=self.clock.now(),
                    publisher=_str(headers.get("p")),
                    session=_int(headers.get("ps")),
                    seq=_int(headers.get("s")),
                )
            )
            self.delivered += 1
            offset = _int(headers.get("x-stream-offset"))
            if offset is not None:
                self.next_offset = offset + 1
            with contextlib.suppress(Exception):
                await message.ack()

        arguments = {"x-stream-offset": self.next_offset} if self.settings.stream else None
        await queue.consume(on_message, no_ack=False, arguments=arguments)
        waits = [asyncio.create_task(e.wait()) for e in (self.stop, self.leave, closed)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if closed.is_set() and not self.leaving():
            raise ConnectionError("connection lost")


def _str(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def declare(url: str, queue: str, arguments: dict[str, Any], *, durable: bool) -> None:
    connection = await aio_pika.connect(url, timeout=10)
    try:
        channel = await connection.channel()
        await channel.declare_queue(queue, durable=durable, arguments=arguments)
    finally:
        await close_quietly(connection)


async def depth(urls: Sequence[str], queue: str) -> int | None:
    """Messages ready in ``queue`` (a passive declare through the first node that answers);
    None when no node answers for it."""
    for url in urls:
        try:
            connection = await aio_pika.connect(url, timeout=5)
        except Exception:  # noqa: S112 - the next node may answer
            continue
        try:
            channel = await connection.channel()
            declared = await channel.declare_queue(queue, passive=True)
            count = declared.declaration_result.message_count
            return int(count) if count is not None else None
        except Exception:  # noqa: S112 - the next node may answer
            continue
        finally:
            await close_quietly(connection)
    return None


@dataclass
class Workload:
    """Every client of a run. ``routes(queue, k)`` gives client ``k`` of ``queue`` its
    nodes' URLs, in the order it dials them."""

    history: History
    clock: Clock
    settings: WorkloadSettings
    routes: Callable[[QueueSpec, int], Awaitable[list[str]]]
    # The stream-protocol listener (host, port) of the node with this AMQP URL (for the
    # stream-protocol clients; None: the target has none).
    stream_address: Callable[[str], tuple[str, int] | None] | None = None
    publishers: list[Client] = field(default_factory=list)
    consumers: list[Client] = field(default_factory=list)
    _tasks: dict[Client, asyncio.Task[None]] = field(default_factory=dict)

    def _addresses(self, urls: Sequence[str]) -> list[tuple[str, int]]:
        found = [self.stream_address(u) for u in urls] if self.stream_address else [None]
        addresses = [a for a in found if a is not None]
        if len(addresses) != len(found):
            raise ValueError("the target has no stream-protocol listener for rstream clients")
        return addresses

    async def start(self, queues: Sequence[QueueSpec]) -> None:
        from tools.faults.rstream_clients import StreamPublisher, StreamReader

        s = self.settings
        readers = (s.stream_readers or ("amqp",)) if s.stream else ("amqp",)
        writers = s.stream_publishers if s.stream else ("amqp",)
        for q in queues:
            # Numbered after the publishers: they start on other nodes than those.
            k = len(writers) * s.publishers_per_queue
            for kind in readers:
                for _ in range(s.consumers_per_queue):
                    urls = await self.routes(q, k)
                    k += 1
                    c: Client
                    if kind == "rstream":
                        c = StreamReader(
                            f"s{len(self.consumers) + 1}", q, urls, self.history, self.clock, s,
                            addresses=self._addresses(urls), store_every=s.store_every,
                        )  # fmt: skip
                    else:
                        n = len(self.consumers) + 1
                        c = Consumer(f"c{n}", q, urls, self.history, self.clock, s)
                    self.consumers.append(c)
                    self.history.consumers[c.name] = q.name
            k = 0
            for kind in writers:
                for _ in range(s.publishers_per_queue):
                    urls = await self.routes(q, k)
                    k += 1
                    p: Client
                    if kind == "rstream":
                        p = StreamPublisher(
                            f"t{len(self.publishers) + 1}", q, urls, self.history, self.clock, s,
                            addresses=self._addresses(urls),
                        )  # fmt: skip
                    else:
                        n = len(self.publishers) + 1
                        p = Publisher(f"p{n}", q, urls, self.history, self.clock, s)
                    self.publishers.append(p)
        early = self.consumers if s.consumers_from == "start" else []
        for client in [*early, *self.publishers]:
            self._start(client)

    def _start(self, client: Client) -> None:
        self._tasks[client] = asyncio.create_task(client.run(), name=client.name)

    def start_consumers(self) -> None:
        """Start the consumers not started yet (``consumers_from="drain"``)."""
        for consumer in self.consumers:
            if consumer not in self._tasks:
                self._start(consumer)

    async def _stop(self, clients: Sequence[Client]) -> None:
        for client in clients:
            client.stop.set()
        tasks = [self._tasks[c] for c in clients if c in self._tasks]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.settings.confirm_timeout + 5)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def stop_publishers(self) -> None:
        await self._stop(self.publishers)

    async def stop_consumers(self) -> None:
        await self._stop(self.consumers)

    def go_home(self) -> None:
        for client in [*self.publishers, *self.consumers]:
            client.go_home()

    def last_delivery(self) -> float:
        return max((d.at for d in self.history.deliveries), default=0.0)

    def caught_up(self) -> bool:
        """Whether every stream-protocol reader got every confirmed message of its queue
        (so the drain does not end while one is still resuming on another node)."""
        from tools.faults.rstream_clients import StreamReader

        readers = [c for c in self.consumers if isinstance(c, StreamReader)]
        if not readers:
            return True
        confirmed: dict[str, set[str]] = {}
        for p in self.history.publishes.values():
            if p.outcome is Outcome.CONFIRMED:
                confirmed.setdefault(p.queue, set()).add(p.id)
        return all(confirmed.get(r.queue.name, set()) <= r.seen for r in readers)


__all__ = [
    "Clock",
    "Consumer",
    "Publisher",
    "QueueSpec",
    "Workload",
    "WorkloadSettings",
    "declare",
    "depth",
]
