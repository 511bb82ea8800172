"""Unit tests of the load generator's bookkeeping: stamps, confirms, receipts, verification."""

from __future__ import annotations

import pytest

from bench.stats import (
    STAMP_SIZE,
    ConfirmTracker,
    ReceiptLog,
    percentiles,
    read_stamp,
    stamp_body,
    verify_queue,
)

# Left out of the compiled pass (scripts/test): the load generator's bookkeeping, not the broker.
pytestmark = pytest.mark.pure_only


def test_stamp_round_trip_and_padding() -> None:
    body = stamp_body(64, 123_456_789_012, 42, 7)
    assert len(body) == 64
    assert read_stamp(body) == (123_456_789_012, 42, 7)
    assert body[STAMP_SIZE:] == bytes(64 - STAMP_SIZE)


def test_stamp_needs_sixteen_bytes() -> None:
    assert len(stamp_body(16, 1, 2, 3)) == 16
    with pytest.raises(ValueError, match="smaller than"):
        stamp_body(15, 1, 2, 3)


def test_confirm_single_and_multiple() -> None:
    t = ConfirmTracker()
    t.confirm(2, multiple=False, ack=True)  # seq 1
    assert (t.n_acked, t.floor) == (1, 0)
    t.confirm(4, multiple=True, ack=True)  # seqs 0, 2, 3
    assert (t.n_acked, t.floor, t.resolved) == (4, 4, 4)
    t.confirm(6, multiple=True, ack=False)  # seqs 4, 5 nacked
    assert (t.n_acked, t.n_nacked, t.floor) == (4, 2, 6)
    assert bytes(t.acked[:6]) == b"\x01\x01\x01\x01\x00\x00"
    assert bytes(t.nacked[:6]) == b"\x00\x00\x00\x00\x01\x01"


def test_confirm_repeated_tag_counts_once() -> None:
    t = ConfirmTracker()
    t.confirm(1, multiple=False, ack=True)
    t.confirm(1, multiple=False, ack=True)
    t.confirm(1, multiple=True, ack=True)
    assert t.n_acked == 1


def test_receipt_log_counts_duplicates_and_merges() -> None:
    a, b = ReceiptLog(), ReceiptLog()
    assert a.add(0)
    assert a.add(2)
    assert not a.add(2)
    assert b.add(1)
    assert b.add(5000)  # grows
    a.merge(b)
    assert a.total == 5
    assert a.counts[:3] == bytearray(b"\x01\x01\x02")
    assert a.counts[5000] == 1


def test_verify_clean_run() -> None:
    log = ReceiptLog()
    for seq in range(100):
        log.add(seq)
    v = verify_queue(100, log, None)
    assert (v.expected, v.missing, v.duplicates, v.unexpected) == (100, 0, 0, 0)


def test_verify_loss_duplicates_and_unexpected() -> None:
    log = ReceiptLog()
    for seq in (0, 1, 1, 3, 7):
        log.add(seq)
    v = verify_queue(5, log, None)  # 0..4 published; 2 and 4 missing; 7 never published
    assert v.expected == 5
    assert v.missing == 2
    assert v.duplicates == 1
    assert v.unexpected == 1


def test_verify_with_confirms_expects_only_acked() -> None:
    log = ReceiptLog()
    for seq in (0, 2, 3):
        log.add(seq)
    acked = bytes([1, 1, 0, 1])  # seq 2 unconfirmed, seq 1 confirmed but lost
    v = verify_queue(4, log, acked)
    assert v.expected == 3
    assert v.missing == 1
    assert v.unconfirmed_but_delivered == 1


def test_verify_saturated_counts_use_the_exact_total() -> None:
    log = ReceiptLog()
    for _ in range(300):
        log.add(0)
    v = verify_queue(1, log, None)
    assert v.duplicates == 299
    assert v.missing == 0


def test_verify_nothing_published() -> None:
    v = verify_queue(0, ReceiptLog(), None)
    assert (v.expected, v.missing, v.duplicates) == (0, 0, 0)


def test_percentiles_nearest_rank() -> None:
    assert percentiles([]) is None
    p = percentiles(list(range(1, 101)))
    assert p is not None
    assert (p["p50"], p["p95"], p["p99"], p["max"], p["samples"]) == (50, 95, 99, 100, 100)
    assert p["mean"] == 50.5
    one = percentiles([7])
    assert one is not None
    assert one["p50"] == one["p99"] == one["max"] == 7
