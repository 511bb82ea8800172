"""Hypothesis suites for the stream-protocol codec: every command survives encode/decode in
the role that receives it, any split of the byte stream gives the same commands, chunks
round-trip, and random bytes only ever end in the protocol's error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol import rabbitstream as rs
from leveret.protocol.rabbitstream import Key, Role, StreamCodec
from leveret.protocol.rabbitstream.chunk import encode_chunk, entries_of, simple_entry

# Left out of the compiled pass (scripts/test): the stream protocol's codec is not compiled.
pytestmark = pytest.mark.pure_only

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=20)
props = st.dictionaries(text, text, max_size=4)
blob = st.binary(max_size=64)

offset_spec = st.one_of(
    st.tuples(st.sampled_from([1, 2, 3]), st.just(0)),
    st.tuples(st.just(4), u64),
    st.tuples(st.just(5), i64),
)
published = st.builds(lambda i, data: rs.PublishedMessage(i, data), u64, blob)
published_v2 = st.builds(
    lambda i, data, value: rs.PublishedMessage(i, data, value), u64, blob, st.none() | text
)
sub_batch = st.lists(blob, min_size=1, max_size=4).map(
    lambda records: (b"".join(simple_entry(r) for r in records), len(records))
)

CLIENT = st.one_of(
    st.builds(rs.PeerProperties, u32, props),
    st.builds(rs.SaslHandshake, u32),
    st.builds(rs.SaslAuthenticate, u32, text, st.none() | blob),
    st.builds(rs.Tune, u32, u32),
    st.builds(rs.Open, u32, text),
    st.builds(rs.Close, u32, u16, text),
    st.just(rs.Heartbeat()),
    st.builds(rs.DeclarePublisher, u32, u8, st.none() | text, text),
    st.builds(rs.Publish, u8, st.lists(published, max_size=5)),
    st.builds(rs.Publish, u8, st.lists(published_v2, max_size=5), st.just(2)),
    st.builds(
        lambda pid, pub, batch: rs.Publish(
            pid, [rs.PublishedMessage(pub, batch[0], None, (0, batch[1], len(batch[0])))]
        ),
        u8,
        u64,
        sub_batch,
    ),
    st.builds(rs.QueryPublisherSequence, u32, text, text),
    st.builds(rs.DeletePublisher, u32, u8),
    st.builds(
        lambda cid, sid, stream, spec, credit, p: rs.Subscribe(
            cid, sid, stream, spec[0], spec[1], credit, p
        ),
        u32,
        u8,
        text,
        offset_spec,
        u16,
        props,
    ),
    st.builds(rs.Credit, u8, u16),
    st.builds(rs.StoreOffset, text, text, u64),
    st.builds(rs.QueryOffset, u32, text, text),
    st.builds(rs.Unsubscribe, u32, u8),
    st.builds(rs.Create, u32, text, props),
    st.builds(rs.Delete, u32, text),
    st.builds(rs.Metadata, u32, st.lists(text, max_size=4)),
    st.builds(rs.StreamStats, u32, text),
    st.builds(rs.Route, u32, text, text),
    st.builds(rs.Partitions, u32, text),
    st.builds(
        rs.CreateSuperStream,
        u32,
        text,
        st.lists(text, max_size=3),
        st.lists(text, max_size=3),
        props,
    ),
    st.builds(rs.DeleteSuperStream, u32, text),
    st.builds(
        rs.ExchangeCommandVersions, u32, st.lists(st.builds(rs.CommandVersion, u16, u16, u16))
    ),
    st.builds(
        lambda cid, code, spec: rs.ConsumerUpdateResponse(cid, code, spec[0], spec[1]),
        u32,
        u16,
        st.one_of(st.tuples(st.sampled_from([0, 1, 2, 3, 4]), u64), st.tuples(st.just(5), i64)),
    ),
)

chunks = st.lists(blob, max_size=5).map(
    lambda records: encode_chunk([simple_entry(r) for r in records], chunk_id=3, timestamp=7)
)

SERVER = st.one_of(
    st.builds(rs.PeerPropertiesResponse, u32, u16, props),
    st.builds(rs.SaslHandshakeResponse, u32, u16, st.lists(text, max_size=3)),
    st.builds(rs.SaslAuthenticateResponse, u32, u16, st.none() | blob),
    st.builds(rs.Tune, u32, u32),
    st.builds(rs.OpenResponse, u32, st.just(1), props),
    st.builds(rs.OpenResponse, u32, st.integers(2, 0xFFFF)),
    st.builds(rs.Close, u32, u16, text),
    st.just(rs.Heartbeat()),
    st.builds(
        rs.Response,
        st.sampled_from(
            [Key.DECLARE_PUBLISHER, Key.SUBSCRIBE, Key.CREATE, Key.DELETE, Key.CLOSE]
        ).map(int),
        u32,
        u16,
    ),
    st.builds(rs.PublishConfirm, u8, st.lists(u64, max_size=10)),
    st.builds(rs.PublishError, u8, st.lists(st.tuples(u64, u16), max_size=5)),
    st.builds(rs.QueryPublisherSequenceResponse, u32, u16, u64),
    st.builds(rs.Deliver, u8, chunks, st.none() | u64),
    st.builds(rs.CreditResponse, u16, u8),
    st.builds(rs.QueryOffsetResponse, u32, u16, u64),
    st.builds(
        rs.MetadataResponse,
        u32,
        st.lists(st.builds(rs.Broker, u16, text, u32), max_size=3),
        st.lists(
            st.builds(rs.StreamMetadata, text, u16, u16, st.lists(u16, max_size=3)), max_size=3
        ),
    ),
    st.builds(rs.MetadataUpdate, u16, text),
    st.builds(rs.StreamStatsResponse, u32, u16, st.dictionaries(text, i64, max_size=4)),
    st.builds(
        rs.StreamsResponse,
        st.sampled_from([Key.ROUTE, Key.PARTITIONS]).map(int),
        u32,
        u16,
        st.lists(text, max_size=3),
    ),
    st.builds(rs.ConsumerUpdate, u32, u8, st.booleans()),
    st.builds(
        rs.ExchangeCommandVersionsResponse,
        u32,
        u16,
        st.lists(st.builds(rs.CommandVersion, u16, u16, u16), max_size=3),
    ),
)


@settings(max_examples=300)
@given(CLIENT)
def test_client_command_round_trip(command: rs.Command) -> None:
    assert StreamCodec(Role.SERVER).receive(StreamCodec(Role.CLIENT).send(command)) == [command]


@settings(max_examples=300)
@given(SERVER)
def test_server_command_round_trip(command: rs.Command) -> None:
    assert StreamCodec(Role.CLIENT).receive(StreamCodec(Role.SERVER).send(command)) == [command]


@settings(max_examples=60)
@given(st.lists(CLIENT, min_size=1, max_size=4), st.data())
def test_any_split_gives_the_same_commands(commands: list[rs.Command], data: st.DataObject) -> None:
    wire = b"".join(c.encode() for c in commands)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    codec = StreamCodec(Role.SERVER)
    got: list[rs.Command] = []
    start = 0
    for cut in [*cuts, len(wire)]:
        got += codec.receive(wire[start:cut])
        start = cut
    assert got == commands
    assert codec.buffered == 0


@settings(max_examples=20)
@given(st.lists(SERVER, min_size=1, max_size=3))
def test_byte_at_a_time(commands: list[rs.Command]) -> None:
    wire = b"".join(c.encode() for c in commands)
    codec = StreamCodec(Role.CLIENT)
    got: list[rs.Command] = []
    for i in range(len(wire)):
        got += codec.receive(wire[i : i + 1])
    assert got == commands


@settings(max_examples=200)
@given(st.lists(blob, max_size=8), u64, i64)
def test_chunk_round_trip(records: list[bytes], chunk_id: int, timestamp: int) -> None:
    chunk = encode_chunk([simple_entry(r) for r in records], chunk_id=chunk_id, timestamp=timestamp)
    got = entries_of(chunk)
    assert [r.data for r in got] == records
    assert [r.offset for r in got] == [chunk_id + i for i in range(len(records))]


@settings(max_examples=500)
@given(st.binary(max_size=80), st.sampled_from(list(Role)))
def test_random_bytes_only_ever_give_the_protocol_error(data: bytes, role: Role) -> None:
    codec = StreamCodec(role, frame_max=1 << 16)
    try:
        codec.receive(data)
    except rs.StreamProtocolError:
        pass


@settings(max_examples=300)
@given(CLIENT, st.integers(0, 200), u8)
def test_a_corrupted_client_frame_only_ever_gives_the_protocol_error(
    command: rs.Command, at: int, value: int
) -> None:
    frame = bytearray(command.encode())
    frame[at % len(frame)] = value
    try:
        StreamCodec(Role.SERVER, frame_max=1 << 20).receive(bytes(frame))
    except rs.StreamProtocolError:
        pass
