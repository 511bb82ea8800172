"""The stream workload's clients of RabbitMQ's stream protocol (rstream), beside the 0-9-1
ones of ``workload.py`` (both on ``client.py``'s ``Client``); their publishes and
deliveries go into the same history.

- A **stream reader** (:class:`StreamReader`) is an application with server-side offset
  tracking: an ``rstream.Consumer`` made on one node (its locator), which subscribes
  where the stream's ``metadata`` sends it (a replica when one is listed), with a
  subscriber name (the reader's), and stores its offset on the server
  (``store_offset``, through its locator) every ``store_every`` messages. When a
  connection is lost or the stream moves (``metadata_update``: rstream's
  ``on_close_handler`` hears both), it drops the consumer, makes a new one on the next
  node of its list and resumes after the offset stored (``query_offset`` + 1), or from
  the first offset when none is stored. rstream's own recovery (a resubscription at the
  offset the client remembers, through the same locator) is left off: what is measured
  is the server's offset tracking.
- A **stream publisher** (:class:`StreamPublisher`) is an ``rstream.Producer`` (to the
  stream's leader) with publish confirms, ``window`` messages unconfirmed at most: a
  ``publish_confirm`` is *confirmed*, a ``publish_error`` *nacked*, no answer within the
  confirm timeout or a lost connection *indeterminate*, after which it dials the next
  node.

Messages carry what the 0-9-1 ones carry (``message_id`` and the publisher, connection
and sequence application properties), so the checker reads both kinds alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import rstream
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Properties,
    amqp_decoder,
)
from rstream.exceptions import OffsetNotFound
from rstream.recovery import IReliableEntity, RecoveryStrategy

from tools.faults.client import Client
from tools.faults.history import Delivery, Outcome, Publish

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rstream.utils import OnClosedErrorInfo

# rstream logs every lost connection and failed task: expected here, counted instead.
logging.getLogger("rstream").setLevel(logging.CRITICAL)


class _ApplicationRecovers(RecoveryStrategy):
    """rstream's recovery left to the application (the reader): nothing here."""

    def __init__(self) -> None:
        super().__init__(enable=False)

    async def recover(
        self,
        entity: IReliableEntity,
        stream: str,
        error: Exception,
        attempt: int,
        recovery_fun: Any,
    ) -> None:
        return None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(eq=False)
class StreamClient(Client):
    """A stream-protocol client: ``addresses[i]`` is the stream listener of the node
    whose AMQP URL is ``urls[i]``."""

    addresses: Sequence[tuple[str, int]] = ()
    # Set by the rstream handlers when a connection is lost or the stream moved.
    _lost: asyncio.Event = field(default_factory=asyncio.Event)
    # Why each of its connections was given up, and when (run seconds): the report's.
    endings: list[tuple[float, str]] = field(default_factory=list)

    def _give_up(self, why: str) -> None:
        if not self._lost.is_set():
            self.endings.append((round(self.clock.now(), 2), why))
        self._lost.set()

    def _where(self) -> dict[str, Any]:
        """The node it uses now, and the credentials of its AMQP URL."""
        host, port = self.addresses[self.at]
        url = urllib.parse.urlsplit(self.urls[self.at])
        return {
            "host": host,
            "port": port,
            "username": urllib.parse.unquote(url.username or "guest"),
            "password": urllib.parse.unquote(url.password or "guest"),
            "heartbeat": self.settings.heartbeat,
            "on_close_handler": self._on_close,
            "connection_name": f"faults-{self.name}",
            "recovery_strategy": _ApplicationRecovers(),
        }

    def _on_close(self, info: OnClosedErrorInfo) -> None:
        self._give_up(info.reason)

    async def _wait_out(self) -> None:
        """Until the run stops it, sends it home, or its connection or stream is lost."""
        waits = [asyncio.create_task(e.wait()) for e in (self.stop, self.leave, self._lost)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if self._lost.is_set() and not self.leaving():
            raise ConnectionError("connection lost or stream moved")

    async def release(self, connection: Any) -> None:
        started = self.clock.now()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(3):
                await connection.close()
        took = self.clock.now() - started
        if took > 1:
            self.endings.append((round(started, 2), f"close took {took:.1f} s"))


@dataclass(eq=False)
class StreamReader(StreamClient):
    store_every: int = 50
    delivered: int = 0
    # How each connection started, and what the server's offset tracking answered.
    stores: int = 0
    from_stored: int = 0
    from_first: int = 0
    # A query answered "none stored" after a store was sent (the offset was forgotten),
    # and answers below the last offset this reader stored (a store dropped or lost):
    # both only cost duplicates, and are reported.
    forgotten: int = 0
    went_back: int = 0
    last_stored: int | None = None
    seen: set[str] = field(default_factory=set)
    # Deliveries recorded after it gave its connection up (while rstream closed it).
    late: int = 0

    async def open(self) -> rstream.Consumer:
        self._lost = asyncio.Event()
        consumer = rstream.Consumer(**self._where())
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await consumer.default_client  # its locator connection
        except BaseException:
            await self.release(consumer)
            raise
        return consumer

    async def serve(self, consumer: rstream.Consumer) -> None:
        stream, name = self.queue.name, f"{self.name}.{self.session}"
        limit = self.settings.confirm_timeout
        try:
            async with asyncio.timeout(limit):
                stored = await consumer.query_offset(stream, self.name)
        except OffsetNotFound:
            self.forgotten += self.last_stored is not None
            self.from_first += 1
            spec = ConsumerOffsetSpecification(OffsetType.FIRST)
        else:
            if self.last_stored is not None and stored < self.last_stored:
                self.went_back += 1
            self.from_stored += 1
            spec = ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1)
        count = 0

        async def on_message(message: AMQPMessage, context: MessageContext) -> None:
            nonlocal count
            properties = message.application_properties or {}
            message_id = _text(message.properties.message_id) if message.properties else None
            self.history.delivered(
                Delivery(
                    id=message_id,
                    queue=self.queue.name,
                    consumer=name,
                    redelivered=False,
                    at=self.clock.now(),
                    publisher=_text(properties.get(b"p")),
                    session=_int(properties.get(b"ps")),
                    seq=_int(properties.get(b"s")),
                )
            )
            if message_id is not None:
                self.seen.add(message_id)
            self.delivered += 1
            self.late += self._lost.is_set()
            count += 1
            if count % self.store_every == 0:
                try:
                    async with asyncio.timeout(limit):
                        await consumer.store_offset(stream, self.name, context.offset)
                except Exception as exc:
                    # Its locator is gone: on to the next node.
                    self._give_up(f"store_offset: {type(exc).__name__}")
                else:
                    self.stores += 1
                    self.last_stored = context.offset

        async with asyncio.timeout(limit):
            await consumer.subscribe(
                stream,
                on_message,
                decoder=amqp_decoder,
                offset_specification=spec,
                subscriber_name=self.name,
            )
        await self._wait_out()


@dataclass(eq=False)
class StreamPublisher(StreamClient):
    seq: int = 0
    # publish_error codes received (the stream protocol's response codes), and how often.
    errors: dict[int, int] = field(default_factory=dict)
    metadata_updates: int = 0

    def _on_close(self, info: OnClosedErrorInfo) -> None:
        self.metadata_updates += info.reason == "Metadata Update"
        super()._on_close(info)

    async def open(self) -> rstream.Producer:
        self._lost = asyncio.Event()
        producer = rstream.Producer(**self._where())
        try:
            async with asyncio.timeout(self.settings.connect_timeout):
                await producer.start()
        except BaseException:
            await self.release(producer)
            raise
        return producer

    async def serve(self, producer: rstream.Producer) -> None:
        stream, session = self.queue.name, self.session
        window = asyncio.Semaphore(self.settings.window)
        # rstream's publishing id -> the message's id, until its confirm or error.
        waiting: dict[int, str] = {}
        timers: dict[int, asyncio.TimerHandle] = {}
        loop = asyncio.get_running_loop()
        interval = 1.0 / self.settings.rate
        next_at = loop.time()
        body = b"x" * self.settings.body_size

        answered = asyncio.Event()  # set when nothing is left waiting

        def settle(message_id: str, outcome: Outcome) -> None:
            if self.history.publishes[message_id].outcome is Outcome.PENDING:
                self.history.settle(message_id, outcome, self.clock.now())
                window.release()
            if not waiting:
                answered.set()

        def on_confirm(status: ConfirmationStatus) -> None:
            message_id = waiting.pop(status.message_id, None)
            timer = timers.pop(status.message_id, None)
            if timer is not None:
                timer.cancel()
            if not status.is_confirmed:
                code = status.response_code
                self.errors[code] = self.errors.get(code, 0) + 1
            if message_id is not None:
                settle(message_id, Outcome.CONFIRMED if status.is_confirmed else Outcome.NACKED)
                if not status.is_confirmed and status.response_code < 0:
                    self._lost.set()  # rstream failed it locally: the connection went

        def timed_out(publishing_id: int) -> None:
            timers.pop(publishing_id, None)
            message_id = waiting.pop(publishing_id, None)
            if message_id is not None:
                settle(message_id, Outcome.INDETERMINATE)
                self._lost.set()  # no answer: drop the connection, as the 0-9-1 one does

        try:
            while not (self.leaving() or self._lost.is_set()):
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                next_at = max(next_at + interval, loop.time() - 1.0)
                await window.acquire()
                if self.leaving() or self._lost.is_set():
                    window.release()
                    break
                self.seq += 1
                message_id = f"{self.name}.{self.seq}"
                self.history.sent(
                    Publish(message_id, self.name, session, self.seq, stream, self.clock.now())
                )
                # The publishing id is the sequence: unique per publisher and rising.
                waiting[self.seq] = message_id
                message = AMQPMessage(
                    body=body,
                    properties=Properties(message_id=message_id),
                    application_properties={"p": self.name, "ps": session, "s": self.seq},
                )
                # Ours, not rstream's counter: known before any confirm can come back.
                message.publishing_id = self.seq
                timers[self.seq] = loop.call_later(
                    self.settings.confirm_timeout, timed_out, self.seq
                )
                try:
                    # send_batch writes at once (send would wait for rstream's 0.5 s timer).
                    async with asyncio.timeout(self.settings.confirm_timeout):
                        await producer.send_batch(stream, [message], on_publish_confirm=on_confirm)
                except Exception:
                    self._lost.set()
        finally:
            # What is still waiting ends within the confirm timeout (its timer), or as
            # indeterminate when the history closes.
            if waiting and not self._lost.is_set():
                answered.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(answered.wait(), self.settings.confirm_timeout + 1)
            for timer in timers.values():
                timer.cancel()
            for message_id in waiting.values():
                settle(message_id, Outcome.INDETERMINATE)
        if self._lost.is_set() and not self.leaving():
            raise ConnectionError("a publish failed, or the connection went")


__all__ = ["StreamPublisher", "StreamReader"]
