"""Micro-benchmark of the AMQP 1.0 per-message path, beside the 0-9-1 codec's.

    python -m bench.amqp10_codec [--size 1024] [--repeat 15]

Prints microseconds per message (timeit, best of ``repeat``) for: decoding a transfer
performative (the fast path and the generated decoder), encoding an outgoing transfer (the
per-link encoder, and ``send_transfer`` through the connection machine), and the whole
incoming path of the server machine (frame parsing, session window, link credit, event) for
100 transfers in one buffer, and both machines of a client/server pair for a publisher;
then 0-9-1's frame decoding and delivery encoding of the same body, for reference. The
machine is shared: take the best of several runs.
"""

from __future__ import annotations

import argparse
import timeit
from typing import TYPE_CHECKING

from leveret.protocol.amqp091 import framing as f091
from leveret.protocol.amqp091._generated.methods import BasicDeliver, BasicPublish
from leveret.protocol.amqp10 import (
    Attach,
    Begin,
    Data,
    Flow,
    Header,
    LinkAttachRequested,
    Open,
    Properties,
    Role,
    Source,
    Target,
    Transfer,
    encode_message,
)
from leveret.protocol.amqp10.connection import Connection
from leveret.protocol.amqp10.framing import AMQP_HEADER, encode_frame
from leveret.protocol.amqp10.transfer import TransferEncoder, decode_transfer
from leveret.testing.amqp10 import ClientServerPair, client_config, server_config

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp10.types import Composite

BATCH = 100
WIDE = 2**31 - 1


def _best(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Microseconds per call, best of ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _server(peer_role: bool) -> Connection:
    """A server machine past open and begin, with one link attached by a peer in
    ``peer_role`` (a sender: we receive; a receiver: we send, with all the credit needed)."""

    def frame(perf: Composite) -> bytes:
        return encode_frame(0, perf.encode())

    server = Connection(server_config(sasl_mechanisms=(), incoming_window=1 << 30))
    server.receive_data(AMQP_HEADER + frame(Open(container_id="bench")), 0)
    server.receive_data(
        frame(Begin(next_outgoing_id=0, incoming_window=WIDE, outgoing_window=1)), 0
    )
    attach = Attach(name="l", handle=0, role=peer_role, source=Source(), target=Target())
    events = server.receive_data(frame(attach), 0)
    request = next(e for e in events if isinstance(e, LinkAttachRequested))
    if peer_role == Role.SENDER:
        server.accept_link(request.channel, request.handle, credit=WIDE)
    else:
        server.accept_link(request.channel, request.handle)
        flow = Flow(
            incoming_window=WIDE,
            next_outgoing_id=0,
            outgoing_window=1,
            handle=0,
            delivery_count=0,
            link_credit=WIDE,
        )
        server.receive_data(frame(flow), 0)
    server.data_to_send(0)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.amqp10_codec", description=__doc__)
    parser.add_argument("--size", type=int, default=1024, help="message body bytes")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    n = 20000
    repeat = args.repeat
    body = b"x" * args.size
    message = encode_message(
        Data(body), header=Header(durable=True), properties=Properties(message_id="m-1")
    )
    tag = b"\x00\x01\x11\x70"
    # A transfer as Qpid Proton sends one: handle, delivery-id, tag, format, settled.
    transfer = Transfer(handle=0, delivery_id=70000, delivery_tag=tag, message_format=0)
    transfer.settled = False
    transfer_body = transfer.encode() + message
    rows: list[tuple[str, float]] = [
        (
            "1.0 decode transfer (fast path)",
            _best(lambda: decode_transfer(transfer_body), n, repeat),
        ),
        (
            "1.0 decode transfer (generated class)",
            _best(lambda: Transfer.decode_body(transfer_body, 3, 0), n, repeat),
        ),
    ]
    encoder = TransferEncoder(1, 0, 131072)
    rows.append(
        (
            "1.0 encode transfer (per-link encoder)",
            _best(lambda: encoder.encode(70000, tag, message, False), n, repeat),
        )
    )

    sender = _server(Role.RECEIVER)

    def send_one() -> None:
        sender.send_transfer(0, 0, message)
        sender.pieces_to_send(0)

    rows.append(("1.0 send_transfer + pieces_to_send", _best(send_one, n, repeat)))

    receiver = _server(Role.SENDER)
    batch = b"".join(
        encode_frame(
            0,
            Transfer(
                handle=0, delivery_id=i, delivery_tag=i.to_bytes(4, "big"), settled=True
            ).encode()
            + message,
        )
        for i in range(BATCH)
    )

    def receive_batch() -> None:
        receiver.receive_data(batch, 0)
        receiver.data_to_send(0)

    rows.append(
        (
            "1.0 receive_data, per transfer (100 in a buffer)",
            _best(receive_batch, n // BATCH, repeat) / BATCH,
        )
    )

    # Both machines: a client publishing to a server (auto credit), 100 messages per pump.
    pair = ClientServerPair(
        client_config(sasl_mechanism=None, incoming_window=1 << 20),
        server_config(sasl_mechanisms=(), incoming_window=1 << 20),
    )
    pair.open()
    channel = pair.client.begin()
    pair.pump()
    handle = pair.client.attach(channel, "p", Role.SENDER, target=Target(address="q"))
    _, server_events = pair.pump()
    req = next(e for e in server_events if isinstance(e, LinkAttachRequested))
    pair.server.accept_link(req.channel, req.handle, credit=1000, auto_credit=True)
    pair.pump()

    def publish_batch() -> None:
        for _ in range(BATCH):
            pair.client.send_transfer(channel, handle, message, settled=True)
        data = pair.client.data_to_send(0)
        pair.server.receive_data(data, 0)
        pair.client.receive_data(pair.server.data_to_send(0), 0)

    rows.append(
        (
            "1.0 client send + server receive, per message",
            _best(publish_batch, n // BATCH, repeat) / BATCH,
        )
    )

    # 0-9-1 for reference: publishes (method + header + body frames) parsed, a delivery encoded.
    props = b"\x10\x00\x02"  # property flags (delivery-mode) + delivery-mode 2
    publish = BasicPublish(exchange="", routing_key="q").encode()
    batch091 = f091.encode_message_frames(1, publish, 60, body, props, 131072) * BATCH
    decoder = f091.FrameDecoder(131072)
    rows.append(
        (
            "0-9-1 FrameDecoder.feed, per publish (100 in a buffer)",
            _best(lambda: decoder.feed(batch091), n // BATCH, repeat) / BATCH,
        )
    )
    deliver = BasicDeliver(consumer_tag="ctag", delivery_tag=70000, routing_key="q").encode()
    rows.append(
        (
            "0-9-1 encode_message_frames (deliver)",
            _best(
                lambda: f091.encode_message_frames(1, deliver, 60, body, props, 131072), n, repeat
            ),
        )
    )

    width = max(len(name) for name, _ in rows)
    print(f"message {len(message)} bytes (body {args.size}); us per message, best of {repeat}")
    for name, us in rows:
        print(f"{name:<{width}}  {us:7.3f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
