"""The record codec and how a damaged file is classified (torn tail vs corruption)."""

from __future__ import annotations

import zlib

import pytest

from leveret.store.records import COMMIT, HEADER_SIZE, MAGIC, frame, scan

# Left out of the compiled pass (scripts/test): the store is not compiled.
pytestmark = pytest.mark.pure_only


def _batches(*batches: list[bytes]) -> bytes:
    return b"".join(b"".join(frame(p) for p in batch) + frame(COMMIT) for batch in batches)


def _payloads(data: bytes) -> list[bytes]:
    return [bytes(p) for p in scan(data).payloads if p != COMMIT]


def test_frame_layout() -> None:
    record = frame(b"hello")
    assert record[:2] == MAGIC
    assert int.from_bytes(record[2:6], "little") == 5
    assert int.from_bytes(record[6:10], "little") == zlib.crc32(b"hello")
    assert record[HEADER_SIZE:] == b"hello"


def test_round_trip_of_many_records() -> None:
    items = [bytes([i % 256]) * i for i in range(200)]
    data = _batches(items[:100], items[100:])
    result = scan(data)
    assert not result.damaged
    assert result.good_end == len(data)
    assert _payloads(data) == items


def test_empty_file() -> None:
    result = scan(b"")
    assert not result.damaged
    assert result.payloads == []


def test_torn_tail_at_every_byte_of_the_last_batch() -> None:
    first = _batches([b"a" * 10, b"b" * 20])
    last = _batches([b"c" * 30, b"d" * 40])
    for cut in range(1, len(last)):
        data = first + last[:cut]
        result = scan(data)
        assert not result.corrupt, cut
        assert result.good_end >= len(first)
        assert _payloads(data[: result.good_end])[:2] == [b"a" * 10, b"b" * 20]


def test_zeros_after_the_last_batch_are_a_torn_tail() -> None:
    data = _batches([b"x" * 100]) + b"\0" * 4096
    result = scan(data)
    assert result.damaged
    assert not result.corrupt
    assert result.good_end == len(data) - 4096


def test_hole_in_the_last_unsynced_batch_is_a_torn_tail() -> None:
    # After a power loss pages of the last batch may be missing while later ones are there.
    synced = _batches([b"a" * 50])
    last = bytearray(_batches([b"b" * 5000, b"c" * 50]))
    last[HEADER_SIZE + 100 : HEADER_SIZE + 200] = b"\0" * 100
    result = scan(synced + bytes(last))
    assert result.damaged
    assert result.commits_after == 1
    assert not result.corrupt
    assert result.good_end == len(synced)


def test_damage_followed_by_committed_batches_is_corruption() -> None:
    data = bytearray(_batches([b"a" * 50], [b"b" * 50], [b"c" * 50]))
    data[HEADER_SIZE + 10] ^= 0xFF  # a bit flip in the first record
    result = scan(bytes(data))
    assert result.damaged
    assert result.corrupt
    assert result.good_end == 0
    assert result.resumes_at > 0


def test_bad_length_field_in_the_middle_is_corruption() -> None:
    data = bytearray(_batches([b"a" * 50], [b"b" * 50], [b"c" * 50]))
    data[2:6] = (10**6).to_bytes(4, "little")
    result = scan(bytes(data))
    assert result.corrupt
