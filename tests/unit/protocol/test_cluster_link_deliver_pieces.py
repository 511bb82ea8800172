"""A leader writes a ``Deliver`` as pieces of its turn's one write
(``protocol/cluster/codec.py``, ``add_deliver``; ``LinkFrontEnd.take_output`` joins them):
joined, they are the frame ``struct`` packs, at every field's limits (the head is made of
two ``int.to_bytes``, where one overflowing field would spill into its neighbour), and the
reader gives back the delivery they carry."""

from __future__ import annotations

import struct

import pytest

from leveret.protocol.cluster import codec as c

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def _packed(
    cid: int, did: int, flags: int, exchange: str, key: str, fmt: int, raw: bytes, body: bytes
) -> bytes:
    """The frame as the codec wrote it before (one ``Struct.pack`` for its head)."""
    e, k = exchange.encode(), key.encode()
    size = 1 + 4 + 8 + 1 + 2 + len(e) + 2 + len(k) + 1 + 4 + len(raw) + 4 + len(body)
    return b"".join(
        (
            struct.pack(">IBIQB", size, 10, cid, did, flags),
            struct.pack(">H", len(e)),
            e,
            struct.pack(">H", len(k)),
            k,
            struct.pack(">BI", fmt, len(raw)),
            raw,
            struct.pack(">I", len(body)),
            body,
        )
    )


@pytest.mark.parametrize("cid", [0, 1, 255, 256, 2**24, U32_MAX])
@pytest.mark.parametrize("did", [0, 1, 255, 256, 2**32, 2**54, c.BROWSED | 7, U64_MAX])
@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_the_heads_fields_at_their_limits(cid: int, did: int, flags: int) -> None:
    pieces: list[bytes] = [b"before"]
    route = c.deliver_route("amq.direct", "orders")
    size = c.add_deliver(pieces, cid, did, flags, route, 0, b"\x00\x00", b"body")
    frame = _packed(cid, did, flags, "amq.direct", "orders", 0, b"\x00\x00", b"body")
    assert pieces[0] == b"before"
    assert b"".join(pieces[1:]) == frame
    assert size == len(frame)
    assert c.Reader().feed(frame) == [
        c.Deliver(
            cid, did, flags & 1 == 1, "amq.direct", "orders", 0, b"\x00\x00", b"body", flags > 1
        )
    ]


# Frame lengths around 256 (the length comes from a table below it) and far above; the
# properties' and body's lengths likewise; empty properties and body (no piece for them).
@pytest.mark.parametrize("raw_size", [0, 1, 255, 256, 70_000])
@pytest.mark.parametrize("body_size", [0, 1, 200, 255, 256, 2**16 + 1])
@pytest.mark.parametrize("fmt", [0, 1, 255])
def test_the_lengths_at_their_limits(raw_size: int, body_size: int, fmt: int) -> None:
    raw, body = b"p" * raw_size, b"b" * body_size
    for exchange, key in (("", ""), ("", "q"), ("x" * 255, "k" * 256), ("e", "é" * 30_000)):
        pieces: list[bytes] = []
        route = c.deliver_route(exchange, key)
        size = c.add_deliver(pieces, 3, 9, 1, route, fmt, raw, body)
        frame = _packed(3, 9, 1, exchange, key, fmt, raw, body)
        assert b"".join(pieces) == frame
        assert size == len(frame)
        assert c.routed_deliver_frame(3, 9, 1, route, fmt, raw, body) == frame
        assert c.Reader().feed(frame) == [
            c.Deliver(3, 9, True, exchange, key, fmt, raw, body, False)
        ]


def test_a_field_past_its_width_raises_rather_than_spilling() -> None:
    # A delivery id past 64 bits cannot be written (``Struct.pack`` refused it too).
    route = c.deliver_route("", "q")
    with pytest.raises(OverflowError):
        c.add_deliver([], 1, 2**64, 0, route, 0, b"", b"")
