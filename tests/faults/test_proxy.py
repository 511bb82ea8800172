"""The fault harness's TCP proxy (``tools/faults/proxy.py``) on loopback: it forwards,
delays, blackholes (holding bytes and new connections until healed, losing nothing),
refuses and cuts, as the partitions of a fault run need."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import pytest
from tools.faults.proxy import FaultProxy, Mode

from tests.faults.support import on_loop

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only


class Echo:
    """An upstream that echoes every byte and counts its connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@contextlib.asynccontextmanager
async def proxied() -> AsyncIterator[tuple[FaultProxy, Echo]]:
    echo = Echo()
    proxy = await FaultProxy("t", await echo.start()).start()
    try:
        yield proxy, echo
    finally:
        await proxy.close()
        await echo.close()


async def dial(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, wait: float = 2.0
) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), wait)


@on_loop
async def test_forwards_both_ways() -> None:
    async with proxied() as (proxy, echo):
        reader, writer = await dial(proxy)
        assert await roundtrip(reader, writer, b"hello" * 1000) == b"hello" * 1000
        assert echo.accepted == 1
        assert proxy.connections == 1
        writer.close()


@on_loop
async def test_delay_slows_each_direction() -> None:
    async with proxied() as (proxy, _):
        proxy.set(Mode.FORWARD, delay=0.2)
        reader, writer = await dial(proxy)
        started = time.monotonic()
        assert await roundtrip(reader, writer, b"x") == b"x"
        assert time.monotonic() - started >= 0.4
        writer.close()


@on_loop
async def test_blackhole_holds_bytes_and_new_connections_until_healed() -> None:
    async with proxied() as (proxy, echo):
        reader, writer = await dial(proxy)
        assert await roundtrip(reader, writer, b"a") == b"a"
        proxy.set(Mode.BLACKHOLE)
        with pytest.raises(TimeoutError):
            await roundtrip(reader, writer, b"held", wait=0.3)
        # A connection made during the partition is accepted and not dialled through.
        reader2, writer2 = await dial(proxy)
        writer2.write(b"later")
        await asyncio.sleep(0.2)
        assert echo.accepted == 1
        proxy.heal()
        # Nothing was lost: what was held arrives once the partition heals.
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"held"
        assert await asyncio.wait_for(reader2.readexactly(5), 2) == b"later"
        assert echo.accepted == 2
        writer.close()
        writer2.close()


@on_loop
async def test_refuse_resets_new_connections_and_cut_resets_open_ones() -> None:
    async with proxied() as (proxy, _):
        reader, writer = await dial(proxy)
        assert await roundtrip(reader, writer, b"a") == b"a"
        proxy.set(Mode.REFUSE)
        refused_reader, refused_writer = await dial(proxy)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(refused_reader, refused_writer, b"b")
        # The open one goes on until cut.
        assert await roundtrip(reader, writer, b"c") == b"c"
        assert proxy.cut() == 1
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"d")
        proxy.heal()
        reader3, writer3 = await dial(proxy)
        assert await roundtrip(reader3, writer3, b"e") == b"e"
        writer3.close()


@on_loop
async def test_an_upstream_that_is_down_resets_the_client() -> None:
    echo = Echo()
    address = await echo.start()
    await echo.close()
    proxy = await FaultProxy("down", address).start()
    try:
        reader, writer = await dial(proxy)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await roundtrip(reader, writer, b"x")
    finally:
        await proxy.close()
