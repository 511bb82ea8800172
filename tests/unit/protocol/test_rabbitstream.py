"""The stream-protocol codec: RabbitMQ 3.10.8's own bytes, both roles in memory, and every
kind of bad input ending in the protocol's error."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from leveret.protocol import rabbitstream as rs
from leveret.protocol.rabbitstream import Code, Key, OffsetType, Role, StreamCodec
from leveret.protocol.rabbitstream.chunk import (
    HEADER_SIZE,
    MAGIC_VERSION,
    encode_chunk,
    entries_of,
    parse_header,
    simple_entry,
)

DATA = Path(__file__).parent / "data" / "rabbitstream"

# What a client sends, one of each (the server's codec must read them back equal).
CLIENT_COMMANDS: list[rs.Command] = [
    rs.PeerProperties(1, {"product": "x", "version": "1"}),
    rs.SaslHandshake(2),
    rs.SaslAuthenticate(3, "PLAIN", b"\x00guest\x00guest"),
    rs.SaslAuthenticate(3, "ANONYMOUS", None),
    rs.Tune(1048576, 60),
    rs.Open(4, "/"),
    rs.Close(5, 1, "bye"),
    rs.Heartbeat(),
    rs.DeclarePublisher(6, 1, "ref", "s"),
    rs.DeclarePublisher(6, 2, None, "s"),
    rs.Publish(1, [rs.PublishedMessage(0, b"m0"), rs.PublishedMessage(1, b"")]),
    rs.Publish(1, [rs.PublishedMessage(7, b"m", "f1"), rs.PublishedMessage(8, b"n", None)], 2),
    rs.Publish(
        1, [rs.PublishedMessage(9, simple_entry(b"a") + simple_entry(b"b"), None, (0, 2, 10))]
    ),
    rs.QueryPublisherSequence(7, "ref", "s"),
    rs.DeletePublisher(8, 1),
    rs.Subscribe(9, 0, "s", OffsetType.FIRST, 0, 10, {}),
    rs.Subscribe(
        9, 1, "s", OffsetType.OFFSET, 2**64 - 1, 1, {"single-active-consumer": "true", "name": "n"}
    ),
    rs.Subscribe(9, 2, "s", OffsetType.TIMESTAMP, -5, 1, {"filter.0": "a"}),
    rs.Credit(0, 65535),
    rs.StoreOffset("c", "s", 42),
    rs.QueryOffset(10, "c", "s"),
    rs.Unsubscribe(11, 0),
    rs.Create(12, "s", {"max-age": "1h", "max-length-bytes": "1000"}),
    rs.Delete(13, "s"),
    rs.Metadata(14, ["s", "t"]),
    rs.StreamStats(15, "s"),
    rs.Route(16, "rk", "super"),
    rs.Partitions(17, "super"),
    rs.CreateSuperStream(18, "super", ["super-0", "super-1"], ["0", "1"], {}),
    rs.DeleteSuperStream(19, "super"),
    rs.ExchangeCommandVersions(20, [rs.CommandVersion(2, 1, 2)]),
    rs.ConsumerUpdateResponse(21, 1, OffsetType.OFFSET, 10),
    rs.ConsumerUpdateResponse(21, 1, OffsetType.TIMESTAMP, -1),
]

CHUNK = encode_chunk([simple_entry(b"one"), simple_entry(b"two")], chunk_id=5, timestamp=9)

SERVER_COMMANDS: list[rs.Command] = [
    rs.PeerPropertiesResponse(1, Code.OK, {"product": "Leveret"}),
    rs.SaslHandshakeResponse(2, Code.OK, ["PLAIN"]),
    rs.SaslAuthenticateResponse(3, Code.OK),
    rs.SaslAuthenticateResponse(3, Code.SASL_CHALLENGE, b"challenge"),
    rs.Tune(1048576, 60),
    rs.OpenResponse(4, Code.OK, {"advertised_host": "h", "advertised_port": "5552"}),
    rs.OpenResponse(4, Code.VIRTUAL_HOST_ACCESS_FAILURE),
    rs.Close(5, Code.UNKNOWN_FRAME, "unknown frame"),
    rs.Heartbeat(),
    rs.Response(Key.SUBSCRIBE, 9, Code.OK),
    rs.Response(Key.CLOSE, 5, Code.OK),
    rs.PublishConfirm(1, [0, 1, 2**64 - 1]),
    rs.PublishError(1, [(3, Code.PUBLISHER_DOES_NOT_EXIST)]),
    rs.QueryPublisherSequenceResponse(7, Code.OK, 12),
    rs.Deliver(0, CHUNK),
    rs.Deliver(0, CHUNK, 5),
    rs.CreditResponse(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST, 9),
    rs.QueryOffsetResponse(10, Code.NO_OFFSET, 0),
    rs.MetadataResponse(
        14,
        [rs.Broker(0, "localhost", 5552)],
        [rs.StreamMetadata("s", Code.OK, 0, []), rs.StreamMetadata("t", 2, 0xFFFF, [1, 2])],
    ),
    rs.MetadataUpdate(Code.STREAM_NOT_AVAILABLE, "s"),
    rs.StreamStatsResponse(15, Code.OK, {"first_chunk_id": 0, "committed_chunk_id": -1}),
    rs.StreamsResponse(Key.ROUTE, 16, Code.OK, ["super-0"]),
    rs.StreamsResponse(Key.PARTITIONS, 17, Code.OK, ["super-0", "super-1"]),
    rs.ConsumerUpdate(21, 1, True),
    rs.ExchangeCommandVersionsResponse(20, Code.OK, [rs.CommandVersion(2, 1, 2)]),
]


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda c: type(c).__name__)
def test_client_commands_reach_the_server_as_sent(command: rs.Command) -> None:
    frame = StreamCodec(Role.CLIENT).send(command)
    assert StreamCodec(Role.SERVER).receive(frame) == [command]


@pytest.mark.parametrize("command", SERVER_COMMANDS, ids=lambda c: type(c).__name__)
def test_server_commands_reach_the_client_as_sent(command: rs.Command) -> None:
    frame = StreamCodec(Role.SERVER).send(command)
    assert StreamCodec(Role.CLIENT).receive(frame) == [command]


def test_rabbitmq_3_10_8_server_bytes_decode_and_re_encode_identically() -> None:
    """Every frame RabbitMQ 3.10.8 sent in one session (peer properties, SASL, tune, open,
    create/delete, publisher, publish with a duplicate, subscribe + deliver, offsets,
    metadata, credit of an unknown subscription, route/partitions, close)."""
    raw = bytes.fromhex(DATA.joinpath("rabbitmq-3.10.8-server.hex").read_text().strip())
    commands = StreamCodec(Role.CLIENT).receive(raw)
    assert [type(c).__name__ for c in commands][:6] == [
        "PeerPropertiesResponse",
        "SaslHandshakeResponse",
        "SaslAuthenticateResponse",
        "Tune",
        "OpenResponse",
        "Response",
    ]
    at = 0
    for command in commands:
        size = struct.unpack_from(">I", raw, at)[0]
        frame = raw[at : at + 4 + size]
        at += 4 + size
        if isinstance(command, rs.StreamsResponse):
            # 3.10.8 leaves the response bit off route/partitions; we send it.
            assert command.encode()[6:] == frame[6:]
            continue
        assert command.encode() == frame
    assert at == len(raw)
    delivers = [c for c in commands if isinstance(c, rs.Deliver)]
    assert len(delivers) == 1
    chunk = delivers[0].chunk
    assert chunk[0] == MAGIC_VERSION
    header = parse_header(chunk)
    # The trailer (publisher tracking) is counted in the header but not sent to readers.
    assert header.trailer_length > 0
    assert len(chunk) == HEADER_SIZE + header.data_length
    assert [r.offset for r in entries_of(chunk)] == [0, 1, 2]
    confirms = [c for c in commands if isinstance(c, rs.PublishConfirm)]
    assert [c.publishing_ids for c in confirms] == [[0, 1, 2], [1]]  # the duplicate too


def test_frames_split_anywhere_give_the_same_commands() -> None:
    wire = b"".join(StreamCodec(Role.CLIENT).send(c) for c in CLIENT_COMMANDS)
    for cut in range(len(wire) + 1):
        codec = StreamCodec(Role.SERVER)
        got = codec.receive(wire[:cut]) + codec.receive(wire[cut:])
        assert got == CLIENT_COMMANDS
        assert codec.buffered == 0


def test_a_server_refuses_what_only_a_server_sends() -> None:
    frame = rs.Deliver(0, CHUNK).encode()
    with pytest.raises(rs.UnknownFrame, match="may not be sent by a client"):
        StreamCodec(Role.SERVER).receive(frame)
    with pytest.raises(ValueError, match="does not send"):
        StreamCodec(Role.CLIENT).send(rs.Deliver(0, CHUNK))


def test_an_oversized_frame_is_refused_at_its_size_and_the_codec_stays_failed() -> None:
    codec = StreamCodec(Role.SERVER, frame_max=1024)
    with pytest.raises(rs.FrameTooLarge) as info:
        codec.receive(struct.pack(">I", 5000))
    assert info.value.code == Code.FRAME_TOO_LARGE
    with pytest.raises(rs.FrameTooLarge):
        codec.receive(rs.Heartbeat().encode())


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (struct.pack(">IHH", 4, 0x7777, 1), "unknown command key"),
        (struct.pack(">IHH", 4, Key.HEARTBEAT, 9), "unsupported version"),
        (struct.pack(">IHHI", 8, Key.OPEN, 1, 1), "cut short"),
        (struct.pack(">IHHxx", 6, Key.HEARTBEAT, 1), "left over"),
        (struct.pack(">IH", 2, 1), "no key and version"),
        (struct.pack(">IHHBi", 9, Key.PUBLISH, 1, 1, 1000), "does not fit"),
        (struct.pack(">IHHIH", 12, Key.OPEN, 1, 1, 2) + b"\xff\xfe", "UTF-8"),
    ],
)
def test_bad_frames_are_unknown_frame(frame: bytes, match: str) -> None:
    codec = StreamCodec(Role.SERVER)
    with pytest.raises(rs.UnknownFrame, match=match) as info:
        codec.receive(frame)
    assert info.value.code == Code.UNKNOWN_FRAME


def test_published_messages_are_osiris_entries() -> None:
    plain = rs.PublishedMessage(0, b"abc")
    assert plain.entry() == b"\x00\x00\x00\x03abc"
    assert plain.records == 1
    batch = rs.PublishedMessage(1, simple_entry(b"a") + simple_entry(b"bc"), None, (0, 2, 11))
    chunk = encode_chunk([plain.entry(), batch.entry()], chunk_id=10, timestamp=0, num_records=3)
    assert [(r.offset, r.data) for r in entries_of(chunk)] == [
        (10, b"abc"),
        (11, b"a"),
        (12, b"bc"),
    ]


def test_a_decoded_publish_keeps_each_message_as_its_stored_entry() -> None:
    plain = rs.PublishedMessage(7, b"abc", "f")
    batch = rs.PublishedMessage(8, simple_entry(b"a") + simple_entry(b"bc"), None, (1, 2, 11))
    sent = rs.Publish(3, [plain, batch], 2)
    assert (sent.ids, sent.counts, sent.filters) == ([7, 8], [1, 2], ["f", None])
    got = rs.StreamCodec(rs.Role.SERVER).receive(sent.encode())
    assert got == [sent]
    decoded = got[0]
    assert isinstance(decoded, rs.Publish)
    assert decoded.ids == [7, 8]
    assert decoded.entries == [plain.entry(), batch.entry()]
    assert decoded.counts == [1, 2]
    assert decoded.records == 3
    assert decoded.filters == ["f", None]
    # The flag byte's reserved bits are not stored (as ``PublishedMessage.entry`` makes it).
    frame = bytearray(rs.Publish(3, [batch]).encode())
    flag_at = len(frame) - len(batch.entry())
    frame[flag_at] |= 0x0F
    odd = rs.StreamCodec(rs.Role.SERVER).receive(bytes(frame))[0]
    assert isinstance(odd, rs.Publish)
    assert odd.entries == [batch.entry()]
    assert odd.messages == [batch]


@pytest.mark.parametrize("version", [1, 2])
def test_malformed_publish_frames_are_unknown_frames(version: int) -> None:
    good = rs.Publish(1, [rs.PublishedMessage(1, b"abc"), rs.PublishedMessage(2, b"de")], version)
    frame = good.encode()

    def refused(body: bytes, match: str) -> None:
        framed = struct.pack(">I", len(body)) + body
        with pytest.raises(rs.UnknownFrame, match=match):
            rs.StreamCodec(rs.Role.SERVER).receive(framed)

    body = frame[4:]
    refused(body + b"x", "left over")
    refused(body[:-1], "overruns|cut short|does not fit")
    # The second record's size says more than the frame holds.
    refused(body[:-6] + struct.pack(">I", 99) + b"de", "overruns")
    # A count larger than the messages there.
    refused(body[:5] + struct.pack(">i", 3) + body[9:], "cut short|does not fit")
    assert rs.StreamCodec(rs.Role.SERVER).receive(frame) == [good]


def test_chunk_errors() -> None:
    with pytest.raises(rs.UnknownFrame, match="CRC"):
        entries_of(CHUNK[:-1] + b"X")
    with pytest.raises(rs.UnknownFrame, match="cut short"):
        entries_of(CHUNK[:-1])
    with pytest.raises(rs.UnknownFrame, match="magic"):
        parse_header(b"\x00" * HEADER_SIZE)
    with pytest.raises(rs.UnknownFrame, match="header"):
        parse_header(b"\x50")
    compressed = rs.PublishedMessage(0, b"zz", None, (1, 2, 10)).entry()
    with pytest.raises(rs.UnknownFrame, match="compressed"):
        entries_of(encode_chunk([compressed], chunk_id=0, timestamp=0, num_records=2))


def test_versions_cover_every_key() -> None:
    assert set(rs.VERSIONS) == {int(k) for k in Key}
    assert rs.VERSIONS[Key.PUBLISH] == (1, 2)
    assert rs.VERSIONS[Key.DELIVER] == (1, 2)
