"""``python -m tools.frontend_traffic record|fuzz``: record real clients' traffic, or fuzz
every front end with it (see the package's docstring, and docs/front-ends.md, "Fuzzing").

    python -m tools.frontend_traffic record            # rewrites tests/data/frontend-traffic/
    python -m tools.frontend_traffic fuzz --connections 20000 --seed 7
    python -m tools.frontend_traffic fuzz --sockets --connections 500

Recording needs the pure-Python build (it wraps the adapter's ``data_received``) and the
clients: pika, python-qpid-proton, rstream (pip), qpid.messaging under Python 2
(``python -m tools.qpid`` fetches it; without it the 0-10 corpus is left as it is).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from tools.frontend_traffic import (
    Corpus,
    declare_queues,
    load_corpora,
    replay_in_memory,
    replay_over_sockets,
)

if TYPE_CHECKING:
    from leveret.testing.embedded import EmbeddedBroker


class _Recorder:
    """Wraps ``ConnectionProtocol.data_received`` to keep what each connection read."""

    def __init__(self) -> None:
        from leveret.server.connection import ConnectionProtocol

        self.chunks: dict[int, list[bytes]] = defaultdict(list)
        self.protocols: dict[int, str] = {}
        self.order: list[int] = []
        original = ConnectionProtocol.data_received
        recorder = self

        def data_received(conn: ConnectionProtocol, data: bytes) -> None:
            key = id(conn)
            if key not in recorder.chunks:
                recorder.order.append(key)
            recorder.chunks[key].append(bytes(data))
            original(conn, data)
            if conn.shell is not None and conn.shell.front is not None:
                recorder.protocols[key] = conn.shell.info.protocol

        ConnectionProtocol.data_received = data_received  # type: ignore[method-assign,assignment]

    def take(self) -> list[tuple[str, list[bytes]]]:
        out = [(self.protocols.get(key, "?"), self.chunks[key]) for key in self.order]
        self.chunks.clear()
        self.protocols.clear()
        self.order.clear()
        return out


def _pika(broker: EmbeddedBroker) -> str:
    import pika

    params = pika.URLParameters(broker.url())
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("fuzz-pika", auto_delete=True)
        ch.exchange_declare("fuzz-x", "topic", auto_delete=True)
        ch.queue_bind("fuzz-pika", "fuzz-x", "a.#")
        for i in range(3):
            ch.basic_publish(
                "fuzz-x",
                "a.b",
                f"m{i}".encode(),
                pika.BasicProperties(content_type="text/plain", headers={"i": i}),
                mandatory=True,
            )
        ch.basic_get("fuzz-pika", auto_ack=False)
        ch.basic_qos(prefetch_count=5)
        for method, _props, _body in ch.consume("fuzz-pika", inactivity_timeout=0.5):
            if method is None:
                break
            ch.basic_ack(method.delivery_tag)
        ch.cancel()
        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish("", "fuzz-pika", b"in a transaction")
        tx.tx_commit()
    return f"pika {pika.__version__}"


def _proton(broker: EmbeddedBroker) -> str:
    from proton import VERSION as PROTON_VERSION
    from proton import Message
    from proton.utils import BlockingConnection

    conn = BlockingConnection(
        f"amqp://127.0.0.1:{broker.port}",
        user="guest",
        password="guest",  # noqa: S106 - the test broker's loopback-only default user
        timeout=10,
    )
    try:
        sender = conn.create_sender("/queues/q")
        for i in range(3):
            sender.send(Message(body=f"proton {i}", properties={"i": i}, durable=i % 2 == 0))
        receiver = conn.create_receiver("/queues/q", credit=10)
        for _ in range(3):
            receiver.receive(timeout=5)
            receiver.accept()
        receiver.close()  # type: ignore[no-untyped-call]
        sender.close()  # type: ignore[no-untyped-call]
    finally:
        conn.close()
    return "python-qpid-proton " + ".".join(map(str, PROTON_VERSION))


_QPID_MESSAGING = """
import sys
from qpid.messaging import Connection, Message
conn = Connection("guest/guest@127.0.0.1:%s" % sys.argv[1], reconnect=False)
conn.open()
ssn = conn.session()
snd = ssn.sender("fuzz-010; {create: always, delete: always}")
for i in range(3):
    snd.send(Message(content="qpid %d" % i, properties={"i": i}))
rcv = ssn.receiver("fuzz-010")
for i in range(3):
    rcv.fetch(timeout=5)
ssn.acknowledge()
conn.close()
"""


def _qpid_messaging(broker: EmbeddedBroker) -> str | None:
    from tools.qpid import ensure

    py2 = ensure()
    if py2 is None:
        return None
    done = subprocess.run(
        [py2.python, "-c", _QPID_MESSAGING, str(broker.port)],
        env=py2.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return None
    return "qpid.messaging (qpid-python 1.36.0, Python 2.7)"


def _rstream(broker: EmbeddedBroker) -> str:
    import rstream
    from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer

    user = password = "guest"  # noqa: S105 - the test broker's loopback-only default user

    async def scenario() -> None:
        port = broker.stream_port
        async with Producer("127.0.0.1", port=port, username=user, password=password) as p:
            await p.create_stream("fuzz-stream", exists_ok=True)
            for i in range(3):
                await p.send_wait("fuzz-stream", AMQPMessage(body=f"s{i}".encode()))
        consumer = Consumer("127.0.0.1", port=port, username=user, password=password)
        await consumer.start()
        got = asyncio.Event()

        async def on_message(message: Any, context: Any) -> None:
            got.set()

        await consumer.subscribe(
            "fuzz-stream",
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        )
        await asyncio.wait_for(got.wait(), 5)
        await consumer.close()

    asyncio.run(scenario())
    return f"rstream {getattr(rstream, '__version__', '')}".strip()


def _fast(broker: EmbeddedBroker) -> str:
    from leveret.testing.amqpfast_client import Delivered
    from leveret.testing.amqpfast_socket import FastSocket

    with FastSocket.connect("127.0.0.1", broker.port, client_name="fuzz") as fast:
        client = fast.client
        client.open_channel(1)
        client.open_handle(1, 1, dest_name="q", producer=True, consumer=True)
        client.send(1, b"fast 1")
        client.consume(1, prefetch=5)
        fast.flush()
        fast.wait(Delivered)
    return "leveret.testing FastClient"


def _legacy(broker: EmbeddedBroker, version: str) -> str:
    from leveret.protocol.amqp08._generated import methods as m08
    from leveret.protocol.amqp09._generated import methods as m09
    from leveret.server.legacy.dialects import AMQP08, AMQP09
    from leveret.testing.legacy_socket import LegacySocket

    dialect, mm = (AMQP08, m08) if version == "0-8" else (AMQP09, m09)
    with LegacySocket.open("127.0.0.1", broker.port, dialect) as client:
        client.handshake()
        client.open_channel(1)
        client.send(1, mm.QueueDeclare(queue="fuzz-legacy", auto_delete=True))
        client.expect(1, mm.QueueDeclareOk)
        client.send_content(1, mm.BasicPublish(exchange="", routing_key="fuzz-legacy"), b"old")
        client.send(1, mm.BasicGet(queue="fuzz-legacy", no_ack=True))
        client.next()
    return f"leveret.testing LegacyClient ({version})"


def record() -> int:
    from leveret.testing.embedded import EmbeddedBroker

    recorder = _Recorder()
    scenarios: list[tuple[str, bool, Any]] = [
        ("pika-0-9-1", False, _pika),
        ("proton-1-0", False, _proton),
        ("qpid-messaging-0-10", False, _qpid_messaging),
        ("rstream-stream", True, _rstream),
        ("fast-0-8a2", False, _fast),
        ("legacy-0-9", False, lambda b: _legacy(b, "0-9")),
        ("legacy-0-8", False, lambda b: _legacy(b, "0-8")),
    ]
    with EmbeddedBroker() as broker:
        declare_queues(broker)
        for name, stream, run in scenarios:
            recorder.take()
            client = run(broker)
            time.sleep(0.2)  # the last reads of the closing connection
            recorded = recorder.take()
            if client is None:
                print(f"{name}: client not available, corpus left as it is")
                continue
            protocols = {p for p, _chunks in recorded}
            corpus = Corpus(
                name, "/".join(sorted(protocols)), client, stream, [c for _p, c in recorded]
            )
            path = corpus.save()
            size = sum(len(chunk) for conn in corpus.connections for chunk in conn)
            print(f"{name}: {len(corpus.connections)} connection(s), {size} bytes -> {path}")
    return 0


def fuzz(args: argparse.Namespace) -> int:
    corpora = [c for c in load_corpora() if not args.only or c.name in args.only]
    per = max(1, args.connections // max(1, len(corpora)))
    started = time.monotonic()
    if args.sockets:
        made, errors = replay_over_sockets(corpora, per_corpus=per, seed=args.seed)
        print(f"{made} connections over sockets in {time.monotonic() - started:.0f} s")
        for error in errors:
            print(error)
        print(f"internal errors: {len(errors)}")
        return 1 if errors else 0
    findings = list(replay_in_memory(corpora, per_corpus=per, seed=args.seed))
    elapsed = time.monotonic() - started
    print(f"{per * len(corpora)} connections in memory in {elapsed:.0f} s, seed {args.seed}")
    for finding in findings:
        print(f"{finding.corpus} seed {finding.seed}: {finding.what}")
        print("  chunks:", [chunk.hex() for chunk in finding.chunks])
    print(f"findings: {len(findings)}")
    return 1 if findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("record", help="record real clients' traffic into tests/data/")
    fz = sub.add_parser("fuzz", help="replay mutated traffic against every front end")
    fz.add_argument("--connections", type=int, default=3000)
    fz.add_argument("--seed", type=int, default=0)
    fz.add_argument("--sockets", action="store_true", help="over real sockets (slower)")
    fz.add_argument("--only", nargs="*", help="corpus names (default: all)")
    args = parser.parse_args()
    return record() if args.command == "record" else fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
