"""The replicated log's records (``cluster/replication.py``): a follower's copy rebuilt from
them is the leader's, a snapshot replaces what the copy held, bad input is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.cluster.replication import (
    DELIVERED,
    ENQUEUE,
    REMOVED,
    REQUEUED,
    Replica,
    apply_record,
    encode_purged,
    encode_record,
    encode_snapshot,
)
from leveret.model.replication import ReplicaState

if TYPE_CHECKING:
    from pathlib import Path

_message = st.tuples(
    st.text(max_size=5), st.text(max_size=5), st.integers(0, 3), st.binary(max_size=8),
    st.binary(max_size=8),
)  # fmt: skip
_op = st.one_of(
    st.tuples(st.just(ENQUEUE), st.integers(1, 6), st.integers(0, 3), _message),
    st.tuples(
        st.sampled_from((DELIVERED, REMOVED, REQUEUED)), st.integers(1, 6), st.integers(0, 3)
    ),
    st.tuples(st.just(0), st.lists(st.integers(1, 6), max_size=3)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=20))
def test_a_copy_from_records_and_from_a_snapshot_is_the_leaders(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    leader, follower = ReplicaState(), ReplicaState()
    for op in ops:
        if op[0] == 0:
            record = encode_purged(op[1])
            leader.purged(op[1])
        elif op[0] == ENQUEUE:
            record = encode_record(ENQUEUE, op[1], op[2], op[3])
            leader.enqueued(op[1], op[3], op[2], False)
        else:
            record = encode_record(op[0], op[1], op[2])
            if op[0] == DELIVERED:
                leader.delivered(op[1])
            elif op[0] == REMOVED:
                leader.removed(op[1])
            else:
                leader.requeued(op[1], op[2])
        apply_record(follower, record)
    assert follower.messages == leader.messages
    fresh = ReplicaState()
    fresh.enqueued(99, ("x", "y", 0, b"", b""), 0, False)  # replaced by the snapshot
    apply_record(fresh, encode_snapshot(leader))
    assert fresh.messages == leader.messages


@pytest.mark.parametrize(
    "record",
    [
        b"",
        b"\x01",
        b"\x09" + bytes(8),
        encode_record(ENQUEUE, 1, 0, ("e", "k", 0, b"r", b"b"))[:-1],
    ],
)
def test_bad_records_are_refused(record: bytes) -> None:
    with pytest.raises(ValueError, match="record"):
        apply_record(ReplicaState(), record)


def test_a_followers_file_compacted_loads_as_the_same_copy(tmp_path: Path) -> None:
    replica = Replica(tmp_path / "q.log")
    for offset, record in enumerate(
        (
            encode_record(ENQUEUE, 1, 0, ("", "q", 0, b"p", b"one")),
            encode_record(ENQUEUE, 2, 0, ("", "q", 0, b"p", b"two")),
            encode_record(DELIVERED, 1),
            encode_record(REMOVED, 2),
            encode_record(REQUEUED, 1, 1),
        ),
        1,
    ):
        apply_record(replica.state, record)
        replica.write(4, offset, record, truncate=False)
        replica.epoch, replica.offset = 4, offset
    replica.file.flush()
    before = (tmp_path / "q.log").stat().st_size
    replica.compact()
    replica.write(4, 6, encode_record(DELIVERED, 1), truncate=False)
    apply_record(replica.state, encode_record(DELIVERED, 1))
    replica.close()
    assert (tmp_path / "q.log").stat().st_size < before + 100
    again = Replica(tmp_path / "q.log")
    again.load()
    assert (again.epoch, again.offset) == (4, 6)
    assert (
        again.state.messages == replica.state.messages == {1: [("", "q", 0, b"p", b"one"), 1, True]}
    )
