"""``python -m bench.amqp10_path``: the broker's CPU per message on the AMQP 1.0 path, in
memory (no sockets, no scheduler): a client-role 1.0 machine publishes ``--count``
messages to a queue over the 1.0 front end (``AMQP10Connection``, driven through its
connection's shell as the asyncio adapter drives it) while a second link of
the same connection consumes them, in turns of ``--batch`` transfers, as ``bench.run``'s
scenario j (pre-settled, 16 B) or k (``--scenario c``: 1 KiB durable-marked bodies,
unsettled and accepted, no store). The same in 0-9-1 (``--protocol 091``: the 0-9-1 front
end and ``leveret.testing.CodecClient``'s encoder; one multiple ack per batch in c) for the
comparison, where ``--scenario b`` is 16 B bodies, manual ack, prefetch 100 (each multiple
ack lets the next deliveries out; ``--acks single``: one ack per delivery, as the load
generator's consumer sends them; ``--backlog N``: N ready messages kept ahead of the
consumer, paged past the queue's resident head, as the load generator's publisher, which
outruns its consumer, leaves the queue). ``--queue-type`` runs it on a quorum or priority queue;
``bench.instructions`` counts the instructions of any of these under callgrind. Prints µs
per message of the broker's side; ``--profile`` prints cProfile's top functions instead
(pure Python only: compiled modules show as one call).

It measures what the broker does per message (process CPU time) whatever the machine's load,
which the socket benchmark cannot on a shared machine.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import TYPE_CHECKING

from leveret.auth.users import UserStore
from leveret.model.broker import Broker
from leveret.protocol.amqp10 import (
    Connection,
    ConnectionConfig,
    Data,
    Header,
    MessageReceived,
    Role,
    SenderSettleMode,
    Side,
    Source,
    Target,
)
from leveret.protocol.amqp10.message import encode_message
from leveret.server.amqp10.connection import AMQP10Connection
from leveret.testing.client import new_shell

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldValue

__all__ = ["build_parser", "main", "run"]


class _Pair:
    """A client machine and the broker's 1.0 front end, bytes moved by hand."""

    def __init__(self, broker: Broker) -> None:
        self.server = new_shell(
            AMQP10Connection, broker, UserStore.with_default_user(), peer="bench:1"
        )
        self.client = Connection(
            ConnectionConfig(
                side=Side.CLIENT,
                container_id="bench",
                hostname="vhost:/",
                sasl_mechanism="PLAIN",
                sasl_username="guest",
                sasl_password="guest",  # noqa: S106 - the in-memory broker's default user
            )
        )
        self.server_time = 0.0
        self.received: list[MessageReceived] = []
        self.delivered = 0

    def pump(self) -> None:
        for _ in range(50):
            out = self.client.data_to_send(0.0)
            if out:
                t = time.process_time()
                self.server.data_received(out, 0.0)
                while self.server.wants_turn:
                    self.server.run_turn(0.0)
                self.server_time += time.process_time() - t
            t = time.process_time()
            back = b"".join(self.server.take_output(0.0))
            self.server_time += time.process_time() - t
            if back:
                for event in self.client.receive_data(back, 0.0):
                    if isinstance(event, MessageReceived):
                        self.received.append(event)
                        self.delivered += 1
            if not out and not back:
                return


def _amqp10(args: argparse.Namespace) -> tuple[float, int]:
    broker = Broker()
    broker.vhosts["/"].declare_queue("q", owner=None)
    pair = _Pair(broker)
    client = pair.client
    client.initiate()
    pair.pump()
    channel = client.begin()
    pair.pump()
    a = args.scenario == "a"
    mode = SenderSettleMode.SETTLED if a else SenderSettleMode.UNSETTLED
    receiver = client.attach(
        channel,
        "c",
        Role.RECEIVER,
        source=Source(address="/queues/q"),
        target=Target(),
        snd_settle_mode=mode,
    )
    sender = client.attach(
        channel,
        "p",
        Role.SENDER,
        source=Source(),
        target=Target(address="/queues/q"),
        snd_settle_mode=mode,
    )
    pair.pump()
    client.grant_credit(channel, receiver, args.count)
    pair.pump()
    payload = encode_message(
        Data(b"x" * (16 if a else 1024)), header=None if a else Header(durable=True)
    )
    pair.server_time = 0.0
    sent = 0
    while sent < args.count:
        n = min(args.batch, args.count - sent, client.credit(channel, sender))
        for _ in range(n):
            client.send_transfer(channel, sender, payload, settled=a)
        sent += n
        pair.pump()
        if not a and pair.received:
            # Accepted as one range per batch (1.0's batched settlement; 0-9-1's side acks
            # with multiple).
            first, last = pair.received[0].delivery_id, pair.received[-1].delivery_id
            client.settle(channel, first, last, role=Role.RECEIVER)
            pair.received.clear()
            pair.pump()
        else:
            pair.received.clear()
    return pair.server_time, pair.delivered


def _amqp091(args: argparse.Namespace) -> tuple[float, int]:
    from leveret.protocol.amqp091._generated import methods as m
    from leveret.protocol.amqp091._generated.properties import BasicProperties
    from leveret.protocol.amqp091.client_events import ContentReceived
    from leveret.testing import CodecClient
    from leveret.testing.pager import MemoryPager

    broker = Broker()
    # Deep queues page to memory here (the server's pager writes a scratch file).
    broker.attach_pager(MemoryPager())
    client = CodecClient.connect(broker)
    client.handshake()
    client.open_channel(1)
    arguments: dict[str, FieldValue] = {}
    if args.queue_type == "quorum":
        arguments["x-queue-type"] = "quorum"
    elif args.queue_type == "priority":
        arguments["x-max-priority"] = 9
    client.send(
        1, m.QueueDeclare(queue="q", durable=args.queue_type == "quorum", arguments=arguments)
    )
    client.expect(1, m.QueueDeclareOk)
    a = args.scenario == "a"
    if not a:
        client.send(1, m.BasicQos(prefetch_count=100 if args.scenario == "b" else 0))
        client.expect(1, m.BasicQosOk)
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c", no_ack=a))
    client.expect(1, m.BasicConsumeOk)
    client.frames()
    c = args.scenario == "c"
    body = b"x" * (1024 if c else 16)
    one = client.encode_publish(
        1, "", "q", body, BasicProperties(delivery_mode=2) if c else BasicProperties()
    )
    server = client.shell
    elapsed = 0.0
    sent = 0
    delivered_all = 0

    def feed(data: bytes) -> bytes:
        t = time.process_time()
        server.data_received(data, 0.0)
        while server.wants_turn:
            server.run_turn(0.0)
        out = b"".join(server.take_output(0.0))
        nonlocal elapsed
        elapsed += time.process_time() - t
        return out

    single = args.acks == "single"
    held: list[int] = []  # tags delivered and not acked yet (the last round's, --backlog)

    def consume(out: bytes, quota: int) -> int:
        """Ack what arrives until ``quota`` messages were delivered in all (or nothing
        more comes); the deliveries counted."""
        count = 0
        while True:
            tags = [
                e.method.delivery_tag  # type: ignore[attr-defined]
                for e in client.machine.receive_data(out, 0.0)
                if isinstance(e, ContentReceived)
            ]
            count += len(tags)
            held.extend(tags)
            if a or not held or delivered_all + count >= quota:
                return count
            if single:
                # One ack per delivery, as the load generator's consumer sends them: those
                # of one write of the broker come back in one read.
                acks = b"".join(client.encode(1, m.BasicAck(delivery_tag=t)) for t in held)
            else:
                # One multiple ack for what arrived; with a prefetch it lets the next out.
                acks = client.encode(1, m.BasicAck(delivery_tag=held[-1], multiple=True))
            held.clear()
            out = feed(acks)

    backlog = args.backlog if not a else 0
    while sent < backlog:
        # The ready messages kept ahead of the consumer (not timed): a queue the publisher
        # outruns, as the load generator's scenario b finds it; past the queue's resident
        # head (2048) the rest is paged.
        n = min(args.batch, backlog - sent)
        delivered_all += consume(feed(one * n), 0)
        sent += n
    elapsed = 0.0
    delivered_all = 0
    sent = 0
    while sent < args.count:
        n = min(args.batch, args.count - sent)
        out = feed(one * n)
        sent += n
        delivered_all += consume(out, sent if backlog else args.count + 1)
    return elapsed, delivered_all


def run(args: argparse.Namespace) -> tuple[float, int]:
    """(the broker's CPU seconds, messages delivered) for ``args``' protocol and scenario."""
    if args.protocol == "10":
        if args.scenario == "b" or args.queue_type != "classic":
            raise SystemExit("scenario b and --queue-type are for --protocol 091")
        return _amqp10(args)
    return _amqp091(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--protocol", choices=("10", "091"), default="10")
    p.add_argument("--scenario", choices=("a", "b", "c"), default="a")
    p.add_argument(
        "--queue-type",
        choices=("classic", "quorum", "priority"),
        default="classic",
        help="the queue's type (0-9-1 only; priority: x-max-priority 9)",
    )
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=300)
    p.add_argument(
        "--acks",
        choices=("multiple", "single"),
        default="multiple",
        help="0-9-1 b and c: one multiple ack per write of deliveries, or one ack each",
    )
    p.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="0-9-1 b and c: ready messages kept ahead of the consumer (paged past 2048)",
    )
    p.add_argument("--profile", action="store_true")
    return p


def main() -> None:
    args = build_parser().parse_args()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run(args)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    elapsed, delivered = run(args)
    print(f"AMQP {args.protocol} scenario {args.scenario}: {elapsed / delivered * 1e6:.2f} us/msg")


if __name__ == "__main__":
    main()
