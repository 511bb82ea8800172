"""A rolling upgrade's mixed cluster: node b announces no link features
(``LEVERET_LINK_FEATURES`` empty, the test's knob: a node of an older version), node a all
of them. Through a (pika), a confirmed fanout into three queues b leads, their consumers
and a get all work, and the link, recorded by a forwarder in front of b's port, carried
only the older forms both ways: a Publish for each queue (no Also), the Consume without
its table, each delivery whole (no DeliverAlso) and no Taken. Each node logs what the link
agreed."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from typing import TYPE_CHECKING

import pika
import pytest

from leveret.protocol.cluster import codec as c
from tests.cluster import nodes
from tests.integration.forwarder import Forwarder

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = pytest.mark.leveret_only

COUNT = 40
NONE_AGREED = "features: none; not: also, consume-arguments, deliver-also, deliver-kept, taken"


class _Recorder(Forwarder):
    """A forwarder that keeps what crosses it, each connection's each direction apart."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, bytearray]] = []
        super().__init__()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:  # type: ignore[override]
        toward = "to b" if sink.getpeername() == self.upstream else "from b"
        data = bytearray()
        with self._lock:
            self.recorded.append((toward, data))
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                data += chunk
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def frames(self, toward: str) -> list[tuple[int, bytes]]:
        """Every whole frame recorded ``toward`` b or from it: (op code, payload)."""
        with self._lock:
            streams = [bytes(data) for way, data in self.recorded if way == toward]
        frames = []
        for data in streams:
            pos = 0
            while len(data) - pos >= 5:
                (length,) = struct.unpack_from(">I", data, pos)
                if pos + 4 + length > len(data):
                    break
                frames.append((data[pos + 4], data[pos + 5 : pos + 4 + length]))
                pos += 4 + length
        return frames


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _connect(node: Node) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", node.broker.port, heartbeat=0)
    )


def _logged(node: Node, text: str) -> bool:
    return any(text in line for line in list(node.broker.log))


def test_a_node_that_announces_no_features_is_sent_only_the_older_forms(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    b_port = _free_port()
    link = _Recorder()
    link.upstream = ("127.0.0.1", b_port)
    started: list[Node] = []
    try:
        b = nodes.start_node(
            etcd_server, etcd_prefix, "b@test", cluster_port=b_port,
            env={"LEVERET_LINK_FEATURES": ""},
        )  # fmt: skip
        started.append(b)
        a = nodes.start_node(
            etcd_server, etcd_prefix, "a@test",
            env={"LEVERET_CLUSTER_PEER_ADDRESSES": f"b@test=127.0.0.1:{link.port}"},
        )  # fmt: skip
        started.append(a)
        tag = uuid.uuid4().hex[:8]
        exchange = f"fan-{tag}"
        queues = [f"fan-{tag}-{i}" for i in range(3)]
        conn = _connect(b)
        ch = conn.channel()
        ch.exchange_declare(exchange, "fanout", durable=True)
        for queue in queues:
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, exchange)
        conn.close()
        nodes.eventually(lambda: len(a.get(f"exchanges/%2F/{exchange}/bindings/source")) == 3)

        # Consumers on a of the three queues b leads, then a confirmed fanout through a.
        consumers = _connect(a)
        cch = consumers.channel()
        cch.basic_qos(prefetch_count=COUNT)
        got: dict[str, list[bytes]] = {queue: [] for queue in queues}

        def on_message(
            channel: object, method: object, _props: object, body: bytes, queue: str
        ) -> None:
            got[queue].append(body)
            cch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        for queue in queues:
            cch.basic_consume(queue, lambda ch, m, p, body, q=queue: on_message(ch, m, p, body, q))
        consumers.process_data_events(time_limit=0.5)
        bodies = [b"f%d" % i for i in range(COUNT)]
        publisher = _connect(a)
        pch = publisher.channel()
        pch.confirm_delivery()
        for body in bodies:
            pch.basic_publish(exchange, "", body, pika.BasicProperties(delivery_mode=2))
        deadline = time.monotonic() + 10
        while any(len(got[q]) < COUNT for q in queues) and time.monotonic() < deadline:
            consumers.process_data_events(time_limit=0.1)
        assert got == dict.fromkeys(queues, bodies)
        consumers.close()
        # A get through a, of a message published through a to one of b's queues.
        pch.basic_publish("", queues[0], b"direct")
        method, _props, body = pch.basic_get(queues[0], auto_ack=True)
        assert method is not None
        assert body == b"direct"
        publisher.close()

        # Both nodes logged what their link agreed: nothing beyond the first version.
        nodes.eventually(lambda: _logged(a, f"to node 'b@test' is up ({NONE_AGREED})"))
        nodes.eventually(lambda: _logged(b, f"from node 'a@test' is up ({NONE_AGREED})"))

        to_b = link.frames("to b")
        from_b = link.frames("from b")
        [hello_a] = [op for code, p in to_b if code == 1 for op in c.Reader().feed(_frame(1, p))]
        [hello_b] = [op for code, p in from_b if code == 1 for op in c.Reader().feed(_frame(1, p))]
        assert isinstance(hello_a, c.Hello)
        assert isinstance(hello_b, c.Hello)
        assert hello_a.features == c.FEATURES
        assert hello_b.features == frozenset()
        sent = [code for code, _ in to_b]
        received = [code for code, _ in from_b]
        assert 28 not in sent, "an Also went to a node that did not announce it"
        assert sent.count(3) == 3 * COUNT + 1  # a Publish for each queue, each message
        consumes = [p for code, p in to_b if code == 5]
        assert len(consumes) == 3
        for payload in consumes:
            [op] = c.Reader().feed(_frame(5, payload))
            assert isinstance(op, c.Consume)
            names = 2 + len(op.vhost.encode()) + 2 + len(op.queue.encode())
            assert len(payload) == 4 + names + 1 + 4 + 4, "a Consume with its table"
        assert 33 not in received, "a DeliverAlso went to a node that did not announce it"
        assert 21 not in received, "a Taken went to a node that did not announce it"
        assert received.count(10) == 3 * COUNT  # each delivery whole
    finally:
        for node in started:
            node.broker.stop()
        link.close()


def _frame(code: int, payload: bytes) -> bytes:
    return struct.pack(">IB", len(payload) + 1, code) + payload
