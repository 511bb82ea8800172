"""The four defects of issue 23, each through a real client (or the real wire where no client
exists), against an embedded broker whose clock the test moves:

1. an AMQP/Fast connection that sends only its initiation (``0x80 0x01``) is closed at the
   handshake deadline like every other protocol's;
2. the management API (and ``leveret ctl``) report each connection's real protocol, as
   RabbitMQ names it, and the SASL mechanism it logged in with, with RabbitMQ's fields;
3. a stream-protocol publish stamps its chunk with the broker's time of that input, not
   the time of whatever ran last;
4. AMQP 1.0 traffic that detaches or ends what it attached in the same read as a pipelined
   SASL exchange gets protocol answers, never an internal error; and mutated Proton
   traffic over sockets makes none either.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import urllib.request
from typing import TYPE_CHECKING, Any

import amqp
import pika
import pytest
from proton.utils import BlockingConnection
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
)
from tools.frontend_traffic import load_corpora, replay_over_sockets

from leveret.protocol.amqp10._generated.composites import (
    Attach,
    Begin,
    Close,
    Detach,
    End,
    Open,
    SaslInit,
    Source,
    Target,
)
from leveret.protocol.amqp10.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, encode_frame
from leveret.server.shell.shell import HANDSHAKE_TIMEOUT
from leveret.testing.embedded import EmbeddedBroker
from tests.integration.mgmt_support import SHAPES_FILE

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only]

IO_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(management=True) as running:
        running.call(lambda: running.server.broker.vhosts["/"].declare_queue("q", owner=None))
        yield running


def _internal_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]


# -- 1. AMQP/Fast: the initiation alone ---------------------------------------------------


def test_an_amqp_fast_initiation_alone_is_cut_at_the_handshake_deadline(
    broker: EmbeddedBroker,
) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(b"\x80\x01")
        assert sock.recv(1024)  # CONNECTION CHALLENGE: the Fast front end took it
        broker.advance(HANDSHAKE_TIMEOUT - 1)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1024)  # still open, still silent
        broker.advance(2)
        sock.settimeout(IO_TIMEOUT)
        assert sock.recv(1024) == b""  # closed by the broker
    assert not [c for c in broker.admin("list_connections") if c["protocol"].startswith("AMQP/")]


# -- 2. the protocol and mechanism each connection really has ----------------------------------


def _api(broker: EmbeddedBroker, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.management_port}/api/{path}")
    token = base64.b64encode(b"guest:guest").decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=IO_TIMEOUT) as reply:  # noqa: S310 - localhost
        return json.loads(reply.read())


def test_management_shows_each_connection_s_protocol_and_mechanism(
    broker: EmbeddedBroker,
) -> None:
    pika_conn = pika.BlockingConnection(pika.URLParameters(broker.url()))
    amqplain = amqp.Connection(
        f"{broker.host}:{broker.port}", userid="guest", password="guest", login_method="AMQPLAIN"
    )
    amqplain.connect()
    proton_conn = BlockingConnection(
        f"amqp://{broker.host}:{broker.port}",
        user="guest",
        password="guest",
        timeout=IO_TIMEOUT,
    )
    proton_conn.create_sender("/queues/q")  # a session: one channel on the 1.0 connection
    try:
        rows = _api(broker, "connections")
        seen = {(row["protocol"], row["auth_mechanism"]) for row in rows}
        assert ("AMQP 0-9-1", "PLAIN") in seen
        assert ("AMQP 0-9-1", "AMQPLAIN") in seen
        assert ("AMQP 1-0", "PLAIN") in seen
        (proton_row,) = [row for row in rows if row["protocol"] == "AMQP 1-0"]
        assert proton_row["container_id"] == proton_conn.container.container_id
        assert proton_row["channels"] == 1
        assert proton_row["user"] == "guest"
        assert proton_row["vhost"] == "/"
        # RabbitMQ's field names: every field is one of 3.10.8's connection fields, or
        # container_id (RabbitMQ 4's AMQP 1.0 connections have it), or the name the
        # client gave itself.
        recorded = json.loads(SHAPES_FILE.read_text(encoding="utf-8"))
        theirs = set(recorded["connections"]["shape"][0])
        for row in rows:
            assert set(row) - theirs <= {"container_id", "user_provided_name"}, row
        ctl = {
            (row["protocol"], row.get("auth_mechanism")) for row in broker.admin("list_connections")
        }
        assert {"AMQP 0-9-1", "AMQP 1-0"} <= {protocol for protocol, _ in ctl}
    finally:
        proton_conn.close()
        amqplain.close()
        pika_conn.close()


def test_a_stream_connection_is_shown_as_stream(broker: EmbeddedBroker) -> None:
    async def scenario() -> list[dict[str, Any]]:
        async with Producer(
            "127.0.0.1",
            port=broker.stream_port,
            username="guest",
            password="guest",
        ) as producer:
            await producer.create_stream("shown", exists_ok=True)
            # (rstream closes the connection create_stream used; a publish keeps one open)
            await producer.send_wait("shown", AMQPMessage(body=b"here"))
            return await asyncio.to_thread(_api, broker, "connections")

    rows = asyncio.run(asyncio.wait_for(scenario(), 20))
    streams = [row for row in rows if row["protocol"] == "stream"]
    assert streams
    assert {row["auth_mechanism"] for row in streams} == {"PLAIN"}
    assert {row["channels"] for row in streams} == {0}  # RabbitMQ counts none


# -- 3. stream publishes stamped with a fresh clock ----------------------------------------


def test_a_stream_chunk_is_stamped_with_the_time_of_its_publish(broker: EmbeddedBroker) -> None:
    broker.advance(3600)  # an hour in which nothing else ran
    published_at = broker.wall_time()

    async def scenario() -> int:
        port = broker.stream_port
        login = {"username": "guest", "password": "guest"}
        async with Producer("127.0.0.1", port=port, **login) as producer:  # type: ignore[arg-type]
            await producer.create_stream("stamped", exists_ok=True)
            await producer.send_wait("stamped", AMQPMessage(body=b"now"))
        consumer = Consumer("127.0.0.1", port=port, **login)  # type: ignore[arg-type]
        await consumer.start()
        stamps: asyncio.Queue[int] = asyncio.Queue()

        async def on_message(message: AMQPMessage, context: MessageContext) -> None:
            stamps.put_nowait(context.timestamp)

        try:
            await consumer.subscribe(
                "stamped",
                on_message,
                offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            )
            return await asyncio.wait_for(stamps.get(), 10)
        finally:
            await consumer.close()

    stamp_ms = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert abs(stamp_ms / 1000 - published_at) < 30


# -- 4. AMQP 1.0: what a pipelined read withdraws gets protocol answers ---------------------


def _pipelined(extra: bytes) -> bytes:
    """A client's SASL exchange, open, begin and attach in one write, then ``extra``."""
    return (
        SASL_HEADER
        + encode_frame(
            0,
            SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest").encode(),
            FRAME_SASL,
        )
        + AMQP_HEADER
        + encode_frame(0, Open(container_id="raw", hostname="vhost:/").encode())
        + encode_frame(
            0, Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100).encode()
        )
        + encode_frame(
            0,
            Attach(
                name="l", handle=0, role=True, source=Source(address="/queues/q"), target=Target()
            ).encode(),
        )
        + extra
    )


@pytest.mark.parametrize(
    "withdrawn",
    [
        encode_frame(0, Detach(handle=0, closed=True).encode()),
        encode_frame(0, End().encode()),
        encode_frame(0, Detach(handle=0, closed=True).encode())
        + encode_frame(
            0,
            Attach(
                name="m", handle=0, role=True, source=Source(address="/queues/q"), target=Target()
            ).encode(),
        ),
    ],
    ids=["detach", "end", "detach-and-attach-again"],
)
def test_a_link_withdrawn_in_the_same_read_gets_protocol_answers(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture, withdrawn: bytes
) -> None:
    caplog.set_level(logging.INFO, logger="leveret")
    with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(_pipelined(withdrawn))
        sock.sendall(encode_frame(0, Close().encode()))
        answered = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            answered += data
    assert b"amqp:internal-error" not in answered
    assert _internal_errors(caplog) == []
    # The server answered every frame: its own close came after its attach and detach.
    assert encode_frame(0, Close().encode()) in answered


def test_mutated_proton_traffic_makes_no_internal_error_over_sockets() -> None:
    proton = [corpus for corpus in load_corpora() if corpus.protocol == "AMQP 1-0"]
    made, errors = replay_over_sockets(proton, per_corpus=300, seed=11)
    assert made == 300
    assert errors == []
