"""The harness's epmd (``tools/faults/epmd.py``): the port mapper protocol spoken by hand,
and two real Erlang nodes that find each other through it and connect through the proxy
it names, until that proxy refuses (a partition of RabbitMQ's distribution)."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess

import pytest
from tools.faults.epmd import (
    ALIVE2_REQ,
    ALIVE2_X_RESP,
    NAMES_REQ,
    PORT2_RESP,
    PORT_PLEASE2_REQ,
    EpmdHub,
)
from tools.faults.proxy import FaultProxy, Mode

from tests.faults.support import on_loop

# Left out of the compiled pass (scripts/test): the harness is not compiled.
pytestmark = pytest.mark.pure_only


async def request(port: int, body: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">H", len(body)) + body)
    await writer.drain()
    return reader, writer


def alive2(name: str, port: int) -> bytes:
    encoded = name.encode()
    return (
        struct.pack(">BHBBHHH", ALIVE2_REQ, port, 77, 0, 6, 5, len(encoded))
        + encoded
        + struct.pack(">H", 0)
    )


async def port_please(port: int, name: str) -> int | None:
    reader, writer = await request(port, bytes((PORT_PLEASE2_REQ,)) + name.encode())
    answer = await reader.read()
    writer.close()
    assert answer[0] == PORT2_RESP
    if answer[1] != 0:
        return None
    (found,) = struct.unpack_from(">H", answer, 2)
    return int(found)


@on_loop
async def test_registrations_lookups_and_routes() -> None:
    hub = EpmdHub()
    try:
        mine, theirs = await hub.listen("a"), await hub.listen("b")
        reader, writer = await request(theirs, alive2("b", 4321))
        answer = await reader.readexactly(6)
        assert answer[:2] == bytes((ALIVE2_X_RESP, 0))
        # A taken name is refused, as the real epmd does.
        dup_reader, dup_writer = await request(mine, alive2("b", 1))
        assert (await dup_reader.read())[1] == 1
        dup_writer.close()
        hub.routes[("a", "b")] = 5555
        assert await port_please(mine, "b") == 5555  # a is told its proxy to b
        assert await port_please(theirs, "b") == 4321  # anyone else the real port
        assert await port_please(mine, "nobody") is None
        names_reader, names_writer = await request(mine, bytes((NAMES_REQ,)))
        names = await names_reader.read()
        assert struct.unpack_from(">I", names)[0] == mine
        assert b"name b at port 4321\n" in names
        names_writer.close()
        # A registration lives as long as its connection.
        writer.close()
        for _ in range(50):
            if "b" not in hub.registry:
                break
            await asyncio.sleep(0.02)
        assert await port_please(mine, "b") is None
    finally:
        await hub.close()


def _erl(name: str, epmd_port: int, expression: str) -> list[str]:
    erl = shutil.which("erl")
    assert erl is not None
    return [
        erl, "-sname", f"{name}@localhost", "-setcookie", "faults-test", "-noshell",
        "-start_epmd", "false", "-kernel", "net_setuptime", "2", "-eval", expression,
    ]  # fmt: skip


@pytest.mark.skipif(shutil.which("erl") is None, reason="Erlang (erl) is not installed")
@on_loop
async def test_erlang_nodes_connect_through_the_proxy_it_names() -> None:
    hub = EpmdHub()
    suffix = os.getpid()
    a, b = f"fa{suffix}", f"fb{suffix}"
    env = dict(os.environ)
    server: asyncio.subprocess.Process | None = None
    proxy: FaultProxy | None = None
    try:
        port_a, port_b = await hub.listen(a), await hub.listen(b)
        server = await asyncio.create_subprocess_exec(
            *_erl(b, port_b, "timer:sleep(60000), halt()."),
            env={**env, "ERL_EPMD_PORT": str(port_b)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if b in hub.registry:
                break
            await asyncio.sleep(0.05)
        proxy = await FaultProxy("a->b", ("127.0.0.1", hub.registry[b].port)).start()
        hub.routes[(a, b)] = proxy.port
        ping = f"io:format(\"~p~n\", [net_adm:ping('{b}@localhost')]), halt()."

        async def ping_b() -> str:
            done = await asyncio.create_subprocess_exec(
                *_erl(a, port_a, ping),
                env={**env, "ERL_EPMD_PORT": str(port_a)},
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            out, _ = await asyncio.wait_for(done.communicate(), 30)
            return out.decode().strip()

        assert await ping_b() == "pong"
        assert proxy.accepted == 1  # the distribution connection crossed the proxy
        proxy.set(Mode.REFUSE)
        assert await ping_b() == "pang"
    finally:
        if server is not None and server.returncode is None:
            server.kill()
            await server.wait()
        if proxy is not None:
            await proxy.close()
        await hub.close()
