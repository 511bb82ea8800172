"""A fault-injecting TCP proxy: one listening port on loopback in front of one upstream
address. The harness puts one on every path it may cut (a node to each peer, a node to
etcd) and hands each node the proxies' addresses instead of the real ones.

Modes, switched at any time:

- ``FORWARD``: bytes are forwarded both ways (after ``delay`` seconds, when set).
- ``BLACKHOLE``: a network partition as iptables' DROP makes one. New connections are
  accepted and never dialled through; existing ones stop moving bytes both ways (the proxy
  stops reading, so the senders' socket buffers fill and their writes block). Nothing is
  discarded: on heal the held bytes flow on, as TCP's retransmissions would deliver them,
  and held new connections are dialled. Peers notice only through their own timeouts
  (heartbeats, Erlang's net_ticktime, etcd's lease keepalives).
- ``REFUSE``: new connections are reset at once (a node that is down, a port closed).
  Existing ones go on unless :meth:`FaultProxy.cut` resets them.

:meth:`FaultProxy.cut` resets every open connection (RST to both ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
from dataclasses import dataclass, field

# SO_LINGER on, 0 s: close() sends RST instead of FIN, as a cut cable's next packet gets.
_LINGER_RESET = struct.pack("ii", 1, 0)
_CHUNK = 65536


class Mode(enum.StrEnum):
    FORWARD = "forward"
    BLACKHOLE = "blackhole"
    REFUSE = "refuse"


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _reset(writer)
        for task in self.tasks:
            task.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    writer.transport.abort()


@dataclass(eq=False)
class FaultProxy:
    """``name`` says which path it is (e.g. ``a->etcd``); ``upstream`` is where it
    forwards to. :meth:`start` binds a free loopback port (``port`` once started)."""

    name: str
    upstream: tuple[str, int]
    host: str = "127.0.0.1"
    port: int = 0
    delay: float = 0.0
    mode: Mode = Mode.FORWARD
    accepted: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)
    _links: set[_Link] = field(default_factory=set, repr=False)
    _open: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> FaultProxy:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def set(self, mode: Mode, delay: float | None = None) -> None:
        self.mode = mode
        if delay is not None:
            self.delay = delay
        if mode is Mode.BLACKHOLE:
            self._open.clear()
        else:
            self._open.set()

    def heal(self) -> None:
        self.set(Mode.FORWARD, 0.0)

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        links = list(self._links)
        self._links.clear()
        for link in links:
            link.reset()
        return len(links)

    @property
    def connections(self) -> int:
        return len(self._links)

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.mode is Mode.REFUSE:
            _reset(writer)
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._open.wait()  # a connection made during a partition waits for it to heal
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                _reset(writer)  # upstream down: the client sees what it would see without us
                return
            link.upstream = up_writer
            if link not in self._links:  # cut while it was dialling
                link.reset()
                return
            link.tasks = [
                asyncio.create_task(self._pump(reader, up_writer, link)),
                asyncio.create_task(self._pump(up_reader, writer, link)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            link.reset()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        try:
            while True:
                await self._open.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                if self.delay > 0:
                    await asyncio.sleep(self.delay)
                await self._open.wait()  # read just before a partition: held, not sent
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            link.reset()


__all__ = ["FaultProxy", "Mode"]
