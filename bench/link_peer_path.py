"""``python -m bench.link_peer_path``: scenario d's deliveries and acks on the clients' node,
in memory (no sockets): the inter-node link's dialling side (``Peer``) reads what the
leader writes for a fanout's messages, hands each delivery to a 0-9-1 consumer of the
proxy of its queue, each consumer's session acks it, and the turn's ``Settle`` and
``Credit`` frames are written, as node ``a`` does in ``bench.cluster_scenarios``' forwarded
setup of scenario d.

Each round, ``--messages`` messages of 256 B fanned out to four queues led by the peer,
one consumer each (prefetch 100, manual acks): the leader's frames as it writes them, in a
burst of 25 a queue (a ``Credit``'s quarter window), the first queue's a ``Deliver`` each
that the peer keeps, the three others' a ``DeliverKept`` each. The sessions write into
``leveret.testing.RecordingSink`` (dearer than a socket would be).

Prints the best of ``--rounds`` timings per delivery, the whole path and the acks with the
turn's flush alone, with the cyclic collector off while timing (``--gc`` leaves it on):
what a change of the peer's path saves, less blurred than the cluster runs on a busy
machine. Run it on a build (``PYTHONPATH=BUILD``) against another, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from typing import TYPE_CHECKING

from leveret.build_info import describe
from leveret.cluster.apply import View
from leveret.cluster.link import Links, Peer, _Connection
from leveret.config import Settings
from leveret.model.queues.args import PLAIN
from leveret.model.queues.remote import RemoteQueue
from leveret.protocol.cluster import codec as c
from leveret.server.amqp091.session import Session
from leveret.server.server import Server
from leveret.testing import RecordingSink

if TYPE_CHECKING:
    from leveret.model.message import Message

QUEUES = 4
BURST = 25  # a consumer's Credit: a quarter of its prefetch
PREFETCH = 100
PROPS = b"\x00\x00"  # 0-9-1 basic properties: no flags
BODY = b"x" * 256


class _Transport(asyncio.Transport):
    """What the link writes, kept until the next round."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def get_write_buffer_size(self) -> int:
        return 0


class Path:
    """Node ``a``'s link to ``b``, up, and a consumer on ``a`` of each of ``b``'s queues."""

    def __init__(self) -> None:
        server = Server(Settings())
        links = Links(server, "a", View())
        links.set_secret("bench")
        self.peer = peer = Peer(links, "b")
        links.peers["b"] = peer
        self.conn = _Connection(peer)
        self.transport = _Transport()
        self.conn.transport = self.transport
        peer.conn = self.conn
        peer.up = True
        vhost = server.broker.vhosts["/"]
        self.sessions: list[tuple[Session, RecordingSink]] = []
        for i in range(QUEUES):
            queue = RemoteQueue(
                peer,
                vhost,
                f"q{i}",
                durable=True,
                auto_delete=False,
                exclusive=False,
                arguments={},
                config=PLAIN,
            )
            vhost.add_remote_queue(queue)
            sink = RecordingSink()
            session = Session(vhost, object(), sink)
            session.set_qos(0, PREFETCH, False)
            session.consume(f"q{i}", f"c{i}", no_ack=False, exclusive=False, arguments={})
            self.sessions.append((session, sink))
        self.cids: list[int] = []  # the consumers' ids on the link, once consumed
        self.did = 1
        self.slot = 0

    async def started(self) -> None:
        await asyncio.sleep(0)  # the turn's flush: the consumes
        self.cids = sorted(self.peer.consumers)

    def frames(self, messages: int) -> list[bytes]:
        """What the leader writes for ``messages`` messages, a read a burst of each queue."""
        reads = []
        for start in range(0, messages, BURST):
            count = min(BURST, messages - start)
            first = self.slot
            frames = []
            for _ in range(count):
                frame = c.deliver_frame(
                    self.cids[0], self.did, False, "fan", "", 0, PROPS, BODY, True
                )
                frames.append(frame)
                self.did += 1
            for cid in self.cids[1:]:
                for k in range(count):
                    frames.append(c.deliver_kept_frame(cid, self.did, False, (first + k) % c.KEPT))
                    self.did += 1
            self.slot = (first + count) % c.KEPT
            reads.append(b"".join(frames))
        return reads

    async def round(self, messages: int) -> tuple[float, float, list[c.Op]]:
        """One round's process time (the whole path, the acks and flush alone) and what
        the link wrote in it."""
        reads = self.frames(messages)
        self.transport.written.clear()
        started = time.process_time()
        for data in reads:
            self.peer.received(self.conn, data)
        delivered = time.process_time()
        for session, sink in self.sessions:
            for event in sink.take("deliver"):
                session.ack(event.delivery_tag)
        await asyncio.sleep(0)  # the turn's flush: the Settle and the Credits
        done = time.process_time()
        written = c.Reader().feed(bytes(self.transport.written))
        return done - started, done - delivered, written


async def _run(messages: int, rounds: int, collect: bool) -> tuple[float, float]:
    path = Path()
    await path.started()
    best_whole = best_acks = float("inf")
    if not collect:
        gc.disable()
    try:
        for _ in range(rounds):
            whole, acks, _written = await path.round(messages)
            best_whole = min(best_whole, whole)
            best_acks = min(best_acks, acks)
    finally:
        gc.enable()
    deliveries = messages * QUEUES
    return best_whole / deliveries * 1e9, best_acks / deliveries * 1e9


def run(messages: int, rounds: int, collect: bool = False) -> tuple[float, float]:
    """The best round's ns a delivery: the whole path, and the acks with the flush."""
    return asyncio.run(_run(messages, rounds, collect))


def written(messages: int) -> tuple[list[c.Op], list[list[Message]]]:
    """One round's frames written to the leader, and the messages each consumer was
    delivered (for the test)."""

    async def one() -> tuple[list[c.Op], list[list[Message]]]:
        path = Path()
        await path.started()
        path.transport.written.clear()
        for data in path.frames(messages):
            path.peer.received(path.conn, data)
        delivered: list[list[Message]] = []
        for session, sink in path.sessions:
            events = sink.take("deliver")
            delivered.append([event.message for event in events if event.message is not None])
            for event in events:
                session.ack(event.delivery_tag)
        await asyncio.sleep(0)
        return c.Reader().feed(bytes(path.transport.written)), delivered

    return asyncio.run(one())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.link_peer_path", description=__doc__)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--gc", action="store_true", help="the collector on while timing")
    args = parser.parse_args()
    whole, acks = run(args.messages, args.rounds, args.gc)
    print(describe())
    print(f"d's path on the clients' node: {whole:,.0f} ns a delivery (the whole path)")
    print(f"the acks and the turn's flush alone: {acks:,.0f} ns an ack")


if __name__ == "__main__":
    main()
