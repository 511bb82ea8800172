"""A dialled inter-node link (``cluster/link.py``) without a socket, for its unit tests:
the real ``Links``, ``Peer`` and connection of a node ``a`` (on a ``Server`` that was never
started, so nothing listens or dials), the peer ``b`` up, its transport recording what is
written. The real classes, not look-alikes: the compiled build's ``Peer`` takes nothing
else (its attributes are typed), and the tests then run in both of the suite's passes."""

from __future__ import annotations

import asyncio

from leveret.cluster.apply import View
from leveret.cluster.link import Links, Peer, _Connection
from leveret.config import Settings
from leveret.model.queues.args import PLAIN
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.cluster import codec as c
from leveret.server.server import Server


class RecordingTransport(asyncio.Transport):
    """What the link writes, and whether it was aborted; its buffer is always empty."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.aborted = True

    def ops(self) -> list[c.Op]:
        """Every op written so far, decoded as the leader would."""
        return c.Reader().feed(bytes(self.written))


def dialled() -> tuple[Server, Peer, _Connection, RecordingTransport]:
    """Node ``a``'s link to ``b``, up (its handshake taken as done)."""
    server = Server(Settings())
    links = Links(server, "a", View())
    links.set_secret("s")
    peer = Peer(links, "b")
    links.peers["b"] = peer
    conn = _Connection(peer)
    transport = RecordingTransport()
    conn.transport = transport
    peer.conn = conn
    peer.up = True
    return server, peer, conn, transport


def remote_queue(
    server: Server, peer: Peer, name: str = "q", arguments: dict[str, object] | None = None
) -> RemoteQueue:
    """The proxy, in vhost ``/``, of a queue ``peer`` leads."""
    vhost = server.broker.vhosts["/"]
    queue = RemoteQueue(
        peer,
        vhost,
        name,
        durable=True,
        auto_delete=False,
        exclusive=False,
        arguments=arguments or {},
        config=PLAIN,
    )
    vhost.add_remote_queue(queue)
    return queue
