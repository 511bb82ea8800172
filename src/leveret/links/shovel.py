"""One dynamic shovel running inside the broker: RabbitMQ's ``rabbit_shovel_worker`` and
the supervisor around it, as one asyncio task.

A run: connect the source (a URI picked at random from ``src-uri``; on failure the others
are tried, RabbitMQ's ``make_conn_and_chan``), then the destination; declare what each end
declares; consume; then move messages until either connection fails, the destination or
source cancels, or ``delete-after`` is reached. Then, as RabbitMQ's supervisor does: after
a failure, wait ``reconnect-delay`` seconds and run again (``0``: stay terminated); when
``delete-after`` is reached, close cleanly and delete the shovel's own parameter.

Acknowledgement modes (RabbitMQ's):

- ``on-confirm``: consume with acks, publish in confirm mode; a destination ack acks the
  source (``multiple`` kept), a nack nacks it (requeued). Nothing is acked at the source
  that the destination has not confirmed, so a crash of either side or of this broker
  loses nothing; what was published but not confirmed when the link broke is delivered
  again (a duplicate at the destination only where the source's ack was lost).
- ``on-publish``: the source is acked as soon as the message is written to the
  destination's socket.
- ``no-ack``: the source delivers without acks.

``delete-after``: ``queue-length`` counts the source queue when the shovel starts (0: done
at once), a number counts messages; the count goes down as the source is acked (on-confirm,
on-publish) or as messages are published (no-ack); once the shovel has published that many
it stops publishing and waits for their confirms.

Flow: when the destination cannot take more (its socket's buffer is full, it sent
``connection.blocked``, a 1.0 link is out of credit), the source's socket stops being read
(0-9-1) or its credit is not renewed (1.0), so memory stays bounded whatever the ack mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leveret.links.amqp091 import Connection091, LinkError, open_connection
from leveret.links.amqp10 import Connection10, open_connection10
from leveret.links.shovel_ends import Dest091, Dest10, Source091, Source10

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.links.local import LocalConnector
    from leveret.links.shovel_config import ShovelSpec
    from leveret.links.uri import Endpoint
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = ["Shovel", "ShovelCounters", "ShovelStatus"]

log = logging.getLogger("leveret.links")


@dataclass
class ShovelCounters:
    """What a shovel has done since the broker started (Prometheus)."""

    forwarded: int = 0  # published to the destination
    acknowledged: int = 0  # acknowledged at the source
    rejected: int = 0  # nacked back to the source (the destination refused them)
    dropped: int = 0  # delivered after delete-after was reached; left for the queue
    restarts: int = 0


@dataclass
class ShovelStatus:
    """RabbitMQ's ``rabbit_shovel_status`` entry: ``starting``, ``running`` (with the ends'
    URIs and details) or ``terminated`` (with the reason)."""

    state: str = "starting"
    reason: str = ""
    info: dict[str, str] = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)

    def set(self, state: str, reason: str = "", info: dict[str, str] | None = None) -> None:
        self.state, self.reason, self.info = state, reason, info or {}
        self.timestamp = time.time()


class _Done(Exception):
    """delete-after reached: the shovel's work is done."""


class Shovel:
    """One shovel (see the module docstring)."""

    def __init__(
        self,
        spec: ShovelSpec,
        *,
        local: LocalConnector | None,
        cluster_name: Callable[[], str],
        on_done: Callable[[Shovel], Awaitable[None]],
    ) -> None:
        self.spec = spec
        self.local = local
        self.cluster_name = cluster_name
        self.on_done = on_done
        self.status = ShovelStatus()
        self.counters = ShovelCounters()
        self.task: asyncio.Task[None] | None = None
        self._stopping = False
        # One run's state.
        self._src: Source091 | Source10 | None = None
        self._dest: Dest091 | Dest10 | None = None
        self._conns: list[Connection091 | Connection10] = []
        self._pending: deque[tuple[int, int]] = deque()  # (destination seq, source tag)
        self._remaining: int | None = None
        self._remaining_unacked: int | None = None
        self._finished: asyncio.Future[None] | None = None
        self._connected = False
        # Why the last run ended (logged; a shovel that never connected stays "starting").
        self.last_error = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.spec.key

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"shovel {self.spec.vhost}/{self.spec.name}"
        )

    async def stop(self) -> None:
        """Close both ends cleanly (unacknowledged messages go back to the source queue)."""
        self._stopping = True
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_all()

    # -- the supervisor ---------------------------------------------------------------------

    async def _supervise(self) -> None:
        spec = self.spec
        name = f"'{spec.name}' in virtual host '{spec.vhost}'"
        while not self._stopping:
            self.status.set("starting")
            self._connected = False
            try:
                await self._run()
            except _Done:
                log.info("Shovel %s is stopping (delete-after reached: transfer completed)", name)
                await self._close_all()
                await self.on_done(self)
                return
            except (LinkError, OSError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, LinkError) else str(exc) or repr(exc)
                self.last_error = reason
                log.error("Shovel %s is stopping: %s", name, reason)
                if self._connected:
                    self.status.set("terminated", reason)
                # else: it never got both ends: RabbitMQ 3.10 leaves such a shovel
                # "starting" (its worker stops with 'shutdown', which reports nothing).
            await self._close_all()
            delay = spec.reconnect_delay
            if delay <= 0 or self._stopping:
                return
            await asyncio.sleep(delay)
            self.counters.restarts += 1

    async def _close_all(self) -> None:
        conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
        self._src = None
        self._dest = None

    async def _connect(
        self, protocol: str, uris: tuple[str, ...], endpoint: Callable[[str], Endpoint], what: str
    ) -> tuple[Connection091 | Connection10, str]:
        """RabbitMQ's ``make_conn_and_chan``: a random URI; on failure, the others."""
        left = list(uris)
        name = f"Shovel {self.spec.name}"
        last: LinkError | None = None
        while left:
            uri = random.choice(left)
            left.remove(uri)
            ep = endpoint(uri)
            try:
                if protocol == "amqp10":
                    conn: Connection091 | Connection10 = await open_connection10(
                        ep, name, self.local
                    )
                else:
                    conn = await open_connection(ep, name, self.local)
            except LinkError as exc:
                log.error(
                    "Shovel '%s' in vhost '%s' failed to connect (URI: %s): %s",
                    self.spec.name,
                    self.spec.vhost,
                    ep.safe_uri,
                    exc.reason,
                )
                last = exc
                continue
            self._conns.append(conn)
            return conn, ep.safe_uri
        raise LinkError(f"could not connect to the {what}: {last.reason if last else 'no URI'}")

    async def _run(self) -> None:
        spec = self.spec
        src_spec, dest_spec = spec.source, spec.dest
        no_ack = spec.ack_mode == "no-ack"
        confirm = spec.ack_mode == "on-confirm"
        src_conn, src_uri = await self._connect(
            src_spec.protocol, src_spec.uris, src_spec.endpoint, "source"
        )
        dest_conn, dest_uri = await self._connect(
            dest_spec.protocol, dest_spec.uris, dest_spec.endpoint, "destination"
        )
        self._connected = True
        self._pending.clear()
        src_headers = src_spec.headers()
        if dest_spec.protocol == "amqp10":
            assert isinstance(dest_conn, Connection10)
            forward = (
                {
                    "shovelled-by": self.cluster_name(),
                    "shovel-type": "dynamic",
                    "shovel-name": spec.name,
                }
                if dest_spec.add_forward_headers
                else None
            )
            dest: Dest091 | Dest10 = Dest10(dest_spec, dest_conn, self, forward, src_headers)
        else:
            assert isinstance(dest_conn, Connection091)
            table: FieldTable | None = None
            if dest_spec.add_forward_headers:
                table = {
                    "shovelled-by": self.cluster_name(),
                    "shovel-type": "dynamic",
                    "shovel-name": spec.name,
                    "shovel-vhost": spec.vhost,
                    "src-uri": src_uri,
                    "dest-uri": dest_uri,
                    **dict(src_headers),
                    **dict(dest_spec.headers()),
                }
            dest = Dest091(dest_spec, dest_conn, self, table, src_headers)
        if src_spec.protocol == "amqp10":
            assert isinstance(src_conn, Connection10)
            source: Source091 | Source10 = Source10(src_spec, src_conn, self)
        else:
            assert isinstance(src_conn, Connection091)
            source = Source091(src_spec, src_conn, self)
        self._dest, self._src = dest, source
        await dest.start(confirm=confirm)
        length = await source.start(no_ack=no_ack)
        delete_after = src_spec.delete_after
        if delete_after == "never":
            remaining: int | None = None
        elif delete_after == "queue-length":
            remaining = length or 0
        else:
            remaining = int(delete_after)
        self._remaining = self._remaining_unacked = remaining
        if remaining == 0:
            raise _Done
        self.last_error = ""
        loop = asyncio.get_running_loop()
        self._finished = finished = loop.create_future()
        await source.consume(no_ack=no_ack)
        info = {
            "src_uri": src_uri,
            "src_protocol": src_spec.protocol,
            "dest_protocol": dest_spec.protocol,
            "dest_uri": dest_uri,
            **src_spec.details(),
            **dest_spec.details(),
        }
        self.status.set("running", info=info)
        log.info(
            "Shovel '%s' in vhost '%s' is running (%s -> %s)",
            spec.name,
            spec.vhost,
            src_uri,
            dest_uri,
        )
        closed = [asyncio.ensure_future(asyncio.shield(c.closed)) for c in (src_conn, dest_conn)]
        try:
            await asyncio.wait([finished, *closed], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in closed:
                waiter.cancel()
        if finished.done() and not finished.cancelled() and finished.exception() is None:
            raise _Done
        if finished.done() and not finished.cancelled():
            exc = finished.exception()
            assert exc is not None
            raise exc
        which = "source" if src_conn.closed.done() else "destination"
        conn = src_conn if which == "source" else dest_conn
        raise LinkError(f"{which} connection failed: {conn.closed.result()}")

    # -- the per-message path (Forwarder) ---------------------------------------------------

    def _published(self, tag: int, seq: int) -> None:
        mode = self.spec.ack_mode
        self.counters.forwarded += 1
        if mode == "on-confirm":
            self._pending.append((seq, tag))
        elif mode == "on-publish":
            src = self._src
            assert src is not None
            src.ack(tag, False)
            self.counters.acknowledged += 1
            self._decrement(1)
        else:
            self._decrement(1)
        if self._remaining_unacked is not None and self._remaining_unacked > 0:
            self._remaining_unacked -= 1

    def forward091(
        self, tag: int, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> None:
        dest = self._dest
        if dest is None:
            return
        if self._remaining_unacked == 0:
            self.counters.dropped += 1
            return  # delete-after reached: left unacknowledged, back to the queue later
        self._published(tag, dest.publish091(exchange, routing_key, properties, body))

    def forward10(self, tag: int, payload: bytes) -> None:
        dest = self._dest
        if dest is None:
            return
        if self._remaining_unacked == 0:
            self.counters.dropped += 1
            return
        self._published(tag, dest.publish10(payload))

    def confirmed(self, seq: int, multiple: bool, ack: bool) -> None:
        src = self._src
        pending = self._pending
        if src is None or not pending:
            return
        last = -1
        count = 0
        if multiple:
            while pending and pending[0][0] <= seq:
                last = pending.popleft()[1]
                count += 1
        elif pending[0][0] == seq:
            last = pending.popleft()[1]
            count = 1
        else:
            for i, (s, t) in enumerate(pending):
                if s == seq:
                    del pending[i]
                    last, count = t, 1
                    break
        if not count:
            return
        if ack:
            src.ack(last, multiple and count > 1)
            self.counters.acknowledged += count
        else:
            src.nack(last, multiple and count > 1)
            self.counters.rejected += count
        self._decrement(count)

    def _decrement(self, n: int) -> None:
        remaining = self._remaining
        if remaining is None:
            return
        if remaining > n:
            self._remaining = remaining - n
            return
        self._remaining = 0
        finished = self._finished
        if finished is not None and not finished.done():
            finished.set_result(None)

    def flow_changed(self) -> None:
        src, dest = self._src, self._dest
        if src is None or dest is None:
            return
        if dest.writable:
            src.resume()
        else:
            src.pause()

    def after_source_read(self) -> None:
        dest, src = self._dest, self._src
        if dest is not None:
            dest.flush()
            if src is not None:
                if not dest.writable:
                    src.pause()
                src.refill(dest.writable)

    def after_dest_read(self) -> None:
        src, dest = self._src, self._dest
        if src is not None:
            if dest is not None:
                src.refill(dest.writable)
            src.flush()
