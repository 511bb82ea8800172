"""Erlang's port mapper (epmd) as the harness's own, so RabbitMQ's nodes reach each other
through the harness's proxies.

An Erlang node registers its distribution port with the epmd on its host and asks the
epmd on a peer's host for the peer's port before it connects (the protocol is in ERTS's
"Distribution Protocol" chapter). Each RabbitMQ node of the harness is started with
``ERL_EPMD_PORT`` naming an epmd listener of its own in this hub; asked for a peer, that
listener answers with the port of the proxy on the path from its node to the peer. So
every distribution connection (a node dials the peer's proxy) crosses a proxy the harness
can blackhole or cut, with no iptables and no namespace. The CLI tools started with the
same ``ERL_EPMD_PORT`` are told the real port (they are not part of any path).

The registry is shared by every listener of the hub; a registration lives as long as the
node's connection to its epmd (as with the real one).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from dataclasses import dataclass, field

ALIVE2_REQ = 120
ALIVE2_X_RESP = 118
ALIVE2_RESP = 121
PORT_PLEASE2_REQ = 122
PORT2_RESP = 119
NAMES_REQ = 110
KILL_REQ = 107
# ERTS's distribution protocol version 6 (OTP 23) answers a registration with ALIVE2_X_RESP.
_X_RESP_VERSION = 6


@dataclass(frozen=True, slots=True)
class Registration:
    name: str
    port: int
    node_type: int
    protocol: int
    highest: int
    lowest: int
    extra: bytes


def _port2(reg: Registration, port: int) -> bytes:
    name = reg.name.encode()
    return (
        struct.pack(
            ">BBHBBHHH", PORT2_RESP, 0, port, reg.node_type, reg.protocol, reg.highest, reg.lowest,
            len(name),
        )
        + name
        + struct.pack(">H", len(reg.extra))
        + reg.extra
    )  # fmt: skip


@dataclass(eq=False)
class EpmdHub:
    """Listeners that share one registry. ``routes[(owner, name)]`` is the port that
    ``owner``'s listener gives for ``name`` (a proxy's) instead of the registered one."""

    host: str = "127.0.0.1"
    registry: dict[str, Registration] = field(default_factory=dict)
    routes: dict[tuple[str, str], int] = field(default_factory=dict)
    _servers: list[asyncio.Server] = field(default_factory=list, repr=False)
    _held: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)

    async def listen(self, owner: str) -> int:
        """A listener for node ``owner`` (its short name, before the ``@``); its port."""

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(owner, reader, writer)

        server = await asyncio.start_server(serve, self.host, 0)
        self._servers.append(server)
        port: int = server.sockets[0].getsockname()[1]
        return port

    def lookup(self, owner: str, name: str) -> int | None:
        reg = self.registry.get(name)
        if reg is None:
            return None
        return self.routes.get((owner, name), reg.port)

    async def close(self) -> None:
        for writer in list(self._held):
            writer.transport.abort()
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    async def _serve(
        self, owner: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            (length,) = struct.unpack(">H", await reader.readexactly(2))
            request = await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()
            return
        kind = request[0] if request else 0
        try:
            if kind == ALIVE2_REQ:
                await self._register(request, reader, writer)
            elif kind == PORT_PLEASE2_REQ:
                name = request[1:].decode(errors="replace")
                reg = self.registry.get(name)
                port = self.lookup(owner, name)
                if reg is None or port is None:
                    writer.write(bytes((PORT2_RESP, 1)))
                else:
                    writer.write(_port2(reg, port))
            elif kind == NAMES_REQ:
                lines = "".join(
                    f"name {reg.name} at port {reg.port}\n" for reg in self.registry.values()
                )
                writer.write(struct.pack(">I", self._own_port(writer)) + lines.encode())
            elif kind == KILL_REQ:
                writer.write(b"OK")
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _own_port(self, writer: asyncio.StreamWriter) -> int:
        port: int = writer.get_extra_info("sockname")[1]
        return port

    async def _register(
        self, request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        port, node_type, protocol, highest, lowest, nlen = struct.unpack_from(">HBBHHH", request, 1)
        name = request[11 : 11 + nlen].decode(errors="replace")
        (elen,) = struct.unpack_from(">H", request, 11 + nlen)
        extra = request[13 + nlen : 13 + nlen + elen]
        reg = Registration(name, port, node_type, protocol, highest, lowest, extra)
        if name in self.registry:  # the real epmd refuses a name that is taken
            writer.write(bytes((ALIVE2_RESP, 1, 0, 0)))
            return
        self.registry[name] = reg
        creation = random.randrange(1, 2**32)
        if highest >= _X_RESP_VERSION:
            writer.write(struct.pack(">BBI", ALIVE2_X_RESP, 0, creation))
        else:
            writer.write(struct.pack(">BBH", ALIVE2_RESP, 0, creation & 0xFFFF or 1))
        self._held.add(writer)
        try:
            await writer.drain()
            while await reader.read(1024):  # registered while this connection lives
                pass
        except ConnectionError:
            pass
        finally:
            self._held.discard(writer)
            if self.registry.get(name) is reg:
                del self.registry[name]


__all__ = ["EpmdHub", "Registration"]
