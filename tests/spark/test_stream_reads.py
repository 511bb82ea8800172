"""The stream-protocol read path without Spark: offset discovery and range reads against a
real broker (``_stream_reads``), and the stream client's refusals."""

from __future__ import annotations

import dataclasses
import time

import pytest

from leveret.protocol.rabbitstream.constants import Code
from leveret.spark._client import ConnectionParams
from leveret.spark._stream_client import StreamClient, StreamClientError
from leveret.spark._stream_reads import StreamTailFinder, read_range_chunks
from leveret.spark._streams import OffsetRange
from tests.spark import support


@pytest.fixture
def params(amqp_url: str, stream_port: int) -> ConnectionParams:
    return dataclasses.replace(ConnectionParams.from_uri(amqp_url), port=stream_port)


def _read(params: ConnectionParams, queue: str, start: int, end: int) -> list[int]:
    offsets: list[int] = []
    for batch in read_range_chunks(
        params,
        OffsetRange(queue, start, end),
        credit=2,
        read_timeout=10,
        fail_on_data_loss=True,
        include_headers=True,
        batch_rows=100,
    ):
        assert batch.num_rows <= 100 + 1000  # a batch is cut after the chunk that fills it
        offsets.extend(batch.column("offset").to_pylist())
    return offsets


def test_offsets_of_an_empty_and_a_filled_stream(
    params: ConnectionParams, stream_url: str, name: str
) -> None:
    support.declare_stream(stream_url, name)
    finder = StreamTailFinder(params, timeout=0.3)
    try:
        assert finder.next_offset(name) == 0
        assert finder.first_offset(name) == 0
        assert finder.offset_for_timestamp(name, 0) == 0
        before = int(time.time() * 1000) - 1000
        support.publish(stream_url, name, [b"%d" % i for i in range(1200)])
        assert finder.next_offset(name) == 1200
        assert finder.first_offset(name) == 0
        assert finder.offset_for_timestamp(name, before) == 0
        assert finder.offset_for_timestamp(name, int(time.time() * 1000) + 60_000) == 1200
    finally:
        finder.close()
        support.delete(stream_url, name)


def test_ranges_read_exactly_their_offsets(
    params: ConnectionParams, stream_url: str, name: str
) -> None:
    support.declare_stream(stream_url, name)
    try:
        for n in (1, 7, 300, 900):  # chunks of different sizes
            support.publish(stream_url, name, [b"x"] * n)
        total = 1208
        assert _read(params, name, 0, total) == list(range(total))
        assert _read(params, name, 5, 6) == [5]
        assert _read(params, name, 8, 400) == list(range(8, 400))
        assert _read(params, name, 400, total) == list(range(400, total))
        assert _read(params, name, 10, 10) == []
    finally:
        support.delete(stream_url, name)


def test_refusals_carry_the_protocols_codes(params: ConnectionParams, name: str) -> None:
    with StreamClient(params, timeout=10).connect() as client:
        with pytest.raises(StreamClientError) as info:
            client.subscribe(1, f"{name}.missing", 1)
        assert info.value.code == Code.STREAM_DOES_NOT_EXIST
        assert client.metadata([f"{name}.missing"]) == {
            f"{name}.missing": Code.STREAM_DOES_NOT_EXIST
        }
    wrong = dataclasses.replace(params, password="not-the-password")
    with pytest.raises(StreamClientError) as refused:
        StreamClient(wrong, timeout=10).connect()
    assert refused.value.code == Code.AUTHENTICATION_FAILURE
    missing_vhost = dataclasses.replace(params, vhost="no-such-vhost")
    with pytest.raises(StreamClientError) as info:
        StreamClient(missing_vhost, timeout=10).connect()
    assert info.value.code == Code.VIRTUAL_HOST_ACCESS_FAILURE


def test_a_chunk_over_frame_max_is_read(
    params: ConnectionParams, stream_url: str, name: str
) -> None:
    # One 2 MiB message (0-9-1 splits it into body frames) is a chunk over the stream
    # protocol's 1 MiB frame_max, which the broker sends whole in one deliver frame.
    support.declare_stream(stream_url, name)
    try:
        body = bytes(range(256)) * (8 << 10)
        support.publish(stream_url, name, [body, b"after"])
        values: list[bytes] = []
        for batch in read_range_chunks(
            params,
            OffsetRange(name, 0, 2),
            credit=2,
            read_timeout=10,
            fail_on_data_loss=True,
            include_headers=False,
            batch_rows=100,
        ):
            values.extend(batch.column("value").to_pylist())
        assert values == [body, b"after"]
    finally:
        support.delete(stream_url, name)
