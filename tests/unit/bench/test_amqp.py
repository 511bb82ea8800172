"""The load generator's asyncio client against the broker's front end in memory (no socket)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bench.amqp import Connection, PublishTemplate
from bench.stats import STAMP
from leveret.protocol.amqp091._generated import methods as m
from leveret.server.amqp091 import Limits
from leveret.testing import CodecClient
from leveret.testing.client import feed

if TYPE_CHECKING:
    from leveret.server.shell.shell import Shell


class Wire:
    """A transport stand-in: what the client writes goes into the server at once."""

    def __init__(self, server: Shell) -> None:
        self.server = server
        self.closed = False

    def write(self, data: bytes) -> None:
        feed(self.server, data, 0)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, high: int) -> None:
        pass


def pump(conn: Connection, server: Shell) -> None:
    """Hand the server's output to the client until neither says anything more."""
    while data := b"".join(server.take_output(0)):
        conn.data_received(data)


async def _scenario() -> None:
    server = CodecClient.connect(limits=Limits(heartbeat=0, frame_max=4096)).shell
    conn = Connection()
    conn.connection_made(Wire(server))  # type: ignore[arg-type]
    pump(conn, server)
    await conn.open(within=1)
    assert conn.frame_max == 4096
    for method, reply in (
        (m.ChannelOpen(), m.ChannelOpenOk),
        (m.QueueDeclare(queue="q"), m.QueueDeclareOk),
        (m.ConfirmSelect(), m.ConfirmSelectOk),
        (m.BasicConsume(queue="q", consumer_tag="c"), m.BasicConsumeOk),
    ):
        conn.send(1, method)
        pump(conn, server)
        await conn.expect(reply, within=1)

    confirms: list[tuple[int, bool, bool]] = []
    stamps: list[tuple[int, int, int]] = []
    conn.on_confirm = lambda tag, multiple, ack: confirms.append((tag, multiple, ack))

    def deliver(tag: int, redelivered: int, stamp: bytes) -> None:
        stamps.append(STAMP.unpack(stamp))
        conn.ack(tag, multiple=False)

    conn.on_deliver = deliver
    # 5000-byte bodies: each publish and delivery is split over two body frames.
    template = PublishTemplate(1, "", "q", 5000, persistent=False, frame_max=conn.frame_max)
    conn.publish(
        b"".join(template.prefix + STAMP.pack(7, seq, 3) + template.suffix for seq in range(5)),
        5,
    )
    conn.flush()
    pump(conn, server)
    assert stamps == [(7, seq, 3) for seq in range(5)]
    assert confirms[-1][0] == 5
    assert all(ack for _, _, ack in confirms)
    assert conn.machine.unconfirmed(1) == 0
    conn.send(1, m.QueueDeclare(queue="q", passive=True))
    pump(conn, server)
    ok = await conn.expect(m.QueueDeclareOk, within=1)
    assert ok.message_count == 0

    # A server-side channel close fails the connection, after the client's close-ok.
    conn.send(1, m.QueueDeclare(queue="missing", passive=True))
    pump(conn, server)
    error = conn.error
    assert error is not None
    assert "404" in error
    assert conn.machine.channel_state(1) is None


def test_the_load_generator_client_publishes_consumes_acks_and_counts_confirms() -> None:
    asyncio.run(_scenario())
