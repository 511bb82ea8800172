"""Pure bookkeeping of the load generator: body stamps, confirms, receipts, verification, stats.

Nothing here touches a socket or a process, so it is unit-tested directly
(``tests/unit/bench``).

Every body starts with a 16-byte stamp: the send time (``time.monotonic_ns()``; CLOCK_MONOTONIC
is shared by every process on the machine), the publisher's sequence number (0, 1, 2, ...) and
the publisher id; the rest of the body is padding.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

__all__ = [
    "STAMP",
    "STAMP_SIZE",
    "ConfirmTracker",
    "QueueVerdict",
    "ReceiptLog",
    "percentiles",
    "read_stamp",
    "stamp_body",
    "verify_queue",
]

STAMP = struct.Struct(">QII")  # send time (monotonic ns), sequence number, publisher id
STAMP_SIZE = STAMP.size  # 16


def stamp_body(size: int, sent_ns: int, seq: int, publisher: int) -> bytes:
    """A ``size``-byte body carrying the stamp; ``size`` must be at least 16."""
    if size < STAMP_SIZE:
        raise ValueError(f"body size {size} is smaller than the {STAMP_SIZE}-byte stamp")
    return STAMP.pack(sent_ns, seq, publisher) + bytes(size - STAMP_SIZE)


def read_stamp(body: bytes | bytearray | memoryview, offset: int = 0) -> tuple[int, int, int]:
    """(send time ns, sequence number, publisher id) of a stamped body."""
    sent_ns, seq, publisher = STAMP.unpack_from(body, offset)
    return sent_ns, seq, publisher


def _grow(buf: bytearray, index: int) -> None:
    if index >= len(buf):
        buf.extend(bytes(max(index + 1, 2 * len(buf), 1024) - len(buf)))


class ConfirmTracker:
    """Publisher confirms of one channel: delivery tag ``n`` is the message with sequence ``n-1``.

    ``acked``/``nacked`` hold one byte per sequence number (1 = confirmed that way).
    """

    __slots__ = ("acked", "floor", "n_acked", "n_nacked", "nacked")

    def __init__(self) -> None:
        self.acked = bytearray()
        self.nacked = bytearray()
        self.floor = 0  # every sequence below this one is resolved
        self.n_acked = 0
        self.n_nacked = 0

    @property
    def resolved(self) -> int:
        return self.n_acked + self.n_nacked

    def confirm(self, delivery_tag: int, *, multiple: bool, ack: bool) -> None:
        """Record basic.ack / basic.nack (``multiple``: every tag up to this one)."""
        seq = delivery_tag - 1
        if seq < 0:
            return
        mine = self.acked if ack else self.nacked
        _grow(self.acked, seq)
        _grow(self.nacked, seq)
        acked, nacked = self.acked, self.nacked
        added = 0
        if multiple:
            for i in range(self.floor, seq + 1):
                if not acked[i] and not nacked[i]:
                    mine[i] = 1
                    added += 1
        elif not acked[seq] and not nacked[seq]:
            mine[seq] = 1
            added = 1
        if ack:
            self.n_acked += added
        else:
            self.n_nacked += added
        floor = self.floor
        limit = len(acked)
        while floor < limit and (acked[floor] or nacked[floor]):
            floor += 1
        self.floor = floor


@dataclass
class ReceiptLog:
    """What the consumers of one queue received from one publisher.

    ``counts`` has one byte per sequence number (how many times it arrived, capped at 255);
    ``total`` is the exact number of arrivals.  Logs of several consumers (and processes) of the
    same queue are merged with :meth:`merge`.
    """

    counts: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, seq: int) -> bool:
        """Count one arrival of ``seq``; False if it had arrived before (a duplicate)."""
        counts = self.counts
        if seq >= len(counts):
            _grow(counts, seq)
        c = counts[seq]
        if c < 255:
            counts[seq] = c + 1
        self.total += 1
        return c == 0

    def merge(self, other: ReceiptLog) -> None:
        a, b = self.counts, other.counts
        if len(b) > len(a):
            a.extend(bytes(len(b) - len(a)))
        for i, c in enumerate(b):
            if c:
                a[i] = min(255, a[i] + c)
        self.total += other.total


@dataclass
class QueueVerdict:
    """The check of one queue: what was expected on it against what its consumers received."""

    expected: int = 0
    missing: int = 0
    duplicates: int = 0
    unexpected: int = 0
    unconfirmed_but_delivered: int = 0

    def add(self, other: QueueVerdict) -> None:
        self.expected += other.expected
        self.missing += other.missing
        self.duplicates += other.duplicates
        self.unexpected += other.unexpected
        self.unconfirmed_but_delivered += other.unconfirmed_but_delivered


def _ones(buf: bytes | bytearray, n: int) -> int:
    """Big integer with byte ``i`` = 1 where ``buf[i]`` is non-zero, for the first ``n`` bytes."""
    view = bytes(buf[:n]).ljust(n, b"\x00")
    return int.from_bytes(view.translate(_NONZERO_TO_ONE), "little")


_NONZERO_TO_ONE = bytes([0] + [1] * 255)


def verify_queue(published: int, log: ReceiptLog, acked: bytes | bytearray | None) -> QueueVerdict:
    """Compare what one publisher sent towards one queue with what arrived there.

    ``published``: sequence numbers 0..published-1 were sent.  ``acked``: with confirms, one
    byte per sequence (non-zero = positively confirmed) and only those are expected; without
    confirms (``None``) everything published is expected.  Sequence numbers at or beyond
    ``published`` are ``unexpected``; extra arrivals of a sequence are ``duplicates``.
    """
    counts = log.counts
    n = published
    in_range = counts[:n]
    distinct = len(in_range) - in_range.count(0)
    arrivals_in_range = sum(in_range)
    # counts saturate at 255: the exact total tells arrivals beyond the range apart.
    beyond = counts[n:]
    unexpected = sum(beyond)
    if arrivals_in_range + unexpected < log.total:  # saturated counters: attribute to range
        arrivals_in_range = log.total - unexpected
    verdict = QueueVerdict(duplicates=arrivals_in_range - distinct, unexpected=unexpected)
    if n == 0:
        return verdict
    received = _ones(counts, n)
    if acked is None:
        verdict.expected = n
        verdict.missing = n - distinct
    else:
        confirmed = _ones(acked, n)
        verdict.expected = confirmed.bit_count()
        verdict.missing = (confirmed & ~received).bit_count()
        verdict.unconfirmed_but_delivered = (received & ~confirmed).bit_count()
    return verdict


def percentiles(samples: list[int]) -> dict[str, float | int] | None:
    """Mean, p50, p95, p99, p99.9 and max of ``samples`` (nearest rank), or None if empty."""
    if not samples:
        return None
    data = sorted(samples)
    n = len(data)

    def rank(p: float) -> int:
        return data[min(n - 1, max(0, math.ceil(p * n) - 1))]

    return {
        "samples": n,
        "mean": round(sum(data) / n, 1),
        "p50": rank(0.50),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "p99_9": rank(0.999),
        "max": data[-1],
    }
