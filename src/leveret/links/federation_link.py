"""What federation's exchange and queue links share (``federation_exchange.py``,
``federation_queue.py``; the whole picture in ``federation.py``): the two connections, the
supervisor loop with the upstream's reconnect delay, the status a row shows, and
acknowledging upstream what the downstream confirmed, as the ack mode says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import zlib
from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar, Protocol
from urllib.parse import quote

from leveret.links.amqp091 import Connection091, LinkError, open_connection
from leveret.links.status import format_timestamp
from leveret.links.uri import Endpoint, parse_amqp091
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from leveret.links.federation_config import Upstream
    from leveret.links.status import LinkHost

__all__ = ["FederationLink", "LinkKey", "LinkOwner", "link_id", "local_endpoint"]

log = logging.getLogger("leveret.links")

LinkKey = tuple[str, str, str, str, str]  # kind, vhost, resource, upstream, upstream resource


class LinkOwner(Protocol):
    """What a link needs of the federation that made it (``federation.Federation``)."""

    host: LinkHost
    forwarded: int  # every link's messages forwarded (Prometheus)
    # The internal exchange's suffix (A or B) per exchange link, across its runs.
    suffixes: dict[LinkKey, str]
    tasks: set[asyncio.Task[None]]  # background work to wait for at shutdown


def link_id(key: LinkKey) -> str:
    """A short stable id for ``restart_federation_link`` and the HTTP API (RabbitMQ
    hashes the same key with ``erlang:phash2``)."""
    return f"{zlib.crc32(repr(key).encode()):08x}"


def local_endpoint(vhost: str) -> Endpoint:
    return parse_amqp091(f"amqp:///{quote(vhost, safe='')}")


class FederationLink:
    """What exchange and queue links share: the two connections, the supervisor loop, the
    status, and acknowledging upstream what the downstream confirmed."""

    kind: ClassVar[str] = ""
    DOWNSTREAM_CHANNEL_OPTIONS: ClassVar[tuple[()]] = ()

    def __init__(self, federation: LinkOwner, key: LinkKey, upstream: Upstream) -> None:
        self.federation = federation
        self.key = key
        self.vhost, self.resource = key[1], key[2]
        self.upstream = upstream
        self.id = link_id(key)
        self.status = "starting"
        self.error = ""
        self.uri = ""
        self.local_connection = ""
        self.timestamp = time.time()
        self.forwarded = 0
        self.task: asyncio.Task[None] | None = None
        self.down: Connection091 | None = None
        self.up: Connection091 | None = None
        self.dch = 0
        self.ch = 0
        self.pending: deque[tuple[int, int]] = deque()
        self._stopping = False
        self.policy = ""

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def links(self) -> LinkHost:
        return self.federation.host

    def report(self, status: str, error: str = "") -> None:
        self.status, self.error, self.timestamp = status, error, time.time()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"federation {self.key}"
        )

    async def stop(self, *, cleanup: bool = False) -> None:
        self._stopping = True
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if cleanup and self.upstream.resource_cleanup_mode != "never":
            with contextlib.suppress(Exception):
                await self.cleanup()
        await self._close()

    async def cleanup(self) -> None:
        """Delete what the link made upstream (the link is going away for good)."""

    async def _close(self) -> None:
        for conn in (self.up, self.down):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        self.up = self.down = None

    def _name(self) -> str:
        name = f"Federation link (upstream: {self.upstream.name}"
        return f"{name}, policy: {self.policy})" if self.policy else "Federation link"

    async def _supervise(self) -> None:
        what = f"{self.kind} '{self.resource}' in vhost '{self.vhost}'"
        while not self._stopping:
            self.report("starting")
            try:
                await self._connect_and_run()
            except LinkError as exc:
                log.warning(
                    "Federation %s did not connect to upstream '%s' or lost it: %s",
                    what,
                    self.upstream.name,
                    exc.reason,
                )
                self.report("error", exc.reason)
            except (OSError, ValueError) as exc:
                self.report("error", str(exc))
            await self._close()
            if self.stopping:
                return
            await asyncio.sleep(max(self.upstream.reconnect_delay, 0.01))

    async def _connect_and_run(self) -> None:
        links, upstream = self.links, self.upstream
        name = self._name()
        down = await open_connection(local_endpoint(self.vhost), name, links.local)
        self.down = down
        self.local_connection = down.local_name
        self.dch = await down.open_channel()
        down.on_channel_close = self._channel_closed
        down.on_read = self._after_down_read
        if upstream.ack_mode == "on-confirm":
            down.on_confirm = self._confirmed
            await down.call(self.dch, m.ConfirmSelect(), m.ConfirmSelectOk)
        left = list(upstream.uris)
        last: LinkError | None = None
        while left:
            uri = random.choice(left)
            left.remove(uri)
            endpoint = parse_amqp091(uri, default_vhost=self.vhost)
            self.uri = endpoint.safe_uri
            try:
                self.up = await open_connection(endpoint, name, links.local)
                break
            except LinkError as exc:
                last = exc
        if self.up is None:
            raise last or LinkError("no upstream URI")
        up = self.up
        up.on_channel_close = self._channel_closed
        up.on_read = self._after_up_read
        up.on_deliveries = self._deliveries
        up.on_cancel = self._cancelled
        down.on_flow = self._flow
        self.pending.clear()
        self.ch = await up.open_channel()
        await self._run(up, down, endpoint)

    async def _run(self, up: Connection091, down: Connection091, endpoint: Endpoint) -> None:
        raise NotImplementedError

    async def _wait(self, up: Connection091, down: Connection091) -> None:
        self.report("running")
        closed = [asyncio.ensure_future(asyncio.shield(c.closed)) for c in (up, down)]
        try:
            await asyncio.wait(closed, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in closed:
                waiter.cancel()
        which, conn = ("upstream", up) if up.closed.done() else ("local", down)
        raise LinkError(f"{which} connection failed: {conn.closed.result()}")

    # -- callbacks -------------------------------------------------------------------------

    def _channel_closed(self, channel: int, error: LinkError) -> None:
        if channel in (self.ch, self.dch):
            raise error

    def _cancelled(self, channel: int, tag: str) -> None:
        raise LinkError("received a 'basic.cancel'")

    def _flow(self) -> None:
        up, down = self.up, self.down
        if up is None or down is None:
            return
        if down.writable:
            up.resume_reading()
        else:
            up.pause_reading()

    def _after_up_read(self) -> None:
        if self.down is not None:
            self.down.flush()
            if not self.down.writable and self.up is not None:
                self.up.pause_reading()

    def _after_down_read(self) -> None:
        if self.up is not None:
            self.up.flush()

    def _deliveries(self, deliveries: Any) -> None:
        raise NotImplementedError

    def forward(self, tag: int, exchange: str, routing_key: str, props: bytes, body: bytes) -> None:
        """Publish downstream and acknowledge upstream as the ack mode says."""
        down, up = self.down, self.up
        assert down is not None
        assert up is not None
        seq = down.publish(self.dch, exchange, routing_key, body, props)
        self.forwarded += 1
        self.federation.forwarded += 1
        mode = self.upstream.ack_mode
        if mode == "on-confirm":
            self.pending.append((seq, tag))
        elif mode == "on-publish":
            up.ack(self.ch, tag)

    def drop(self, tag: int) -> None:
        """Not forwarded (a loop, or too many hops): acknowledged at once."""
        if self.up is not None and self.upstream.ack_mode != "no-ack":
            self.up.ack(self.ch, tag)

    def _confirmed(self, channel: int, seq: int, multiple: bool, ack: bool) -> None:
        up, pending = self.up, self.pending
        if up is None or not pending or channel != self.dch:
            return
        last, count = -1, 0
        if multiple:
            while pending and pending[0][0] <= seq:
                last = pending.popleft()[1]
                count += 1
        else:
            for i, (s, t) in enumerate(pending):
                if s == seq:
                    del pending[i]
                    last, count = t, 1
                    break
        if not count:
            return
        if ack:
            up.ack(self.ch, last, multiple and count > 1)
        else:
            up.nack(self.ch, last, multiple and count > 1, True)

    # -- what is shown -------------------------------------------------------------------------

    def row(self, node: str) -> dict[str, Any]:
        raise NotImplementedError

    def _status_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.status == "running":
            out["local_connection"] = self.local_connection
        elif self.status == "error":
            out["error"] = self.error
        out["uri"] = self.uri
        out["timestamp"] = format_timestamp(self.timestamp)
        return out
