"""``bench.store_path``: a round writes what it times: a message record for each message,
then one record of their first deliveries, then one of their removals (the figure it
prints is per message)."""

from __future__ import annotations

import struct

from bench import store_path


def test_a_round_writes_each_message_then_its_delivery_then_its_removal() -> None:
    enqueued, delivered, removed = store_path.batches(1024, 5)
    assert [r[:1] for r in enqueued] == [b"M"] * 5
    assert all(r.endswith(b"x" * 1024) for r in enqueued)
    ids = [struct.unpack_from("<Q", r, 9)[0] for r in enqueued]
    assert len(set(ids)) == 5
    for records, kind in ((delivered, b"D"), (removed, b"A")):
        assert len(records) == 1
        assert records[0][:1] == kind
        pairs = struct.unpack(f"<{2 * 5}Q", records[0][1:])
        assert list(pairs[1::2]) == ids


def test_a_run_times_each_step() -> None:
    times = store_path.run(64, 4, 2)
    assert len(times) == len(store_path.STEPS)
    assert all(t > 0 for t in times)
