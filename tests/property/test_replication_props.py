"""The replicated log's rules (``model/replication.py``), against plain models.

- Truncation by epoch (KIP-101): replicas written by a run of leaders (each new leader
  takes the next epoch, followers truncate to their divergence from it and copy a prefix
  of what follows) keep the log-matching property, and a replica's divergence from any
  other is exactly their longest common prefix: nothing two logs agree on is cut.
- The commit rule: a committed offset is held by a majority (the leader and in-sync
  followers that acknowledged it), never past an in-sync follower's acknowledgement, and
  nothing is committed while the in-sync set is below a majority.
- The hand-over: a leader hands its queue only to an in-sync member whose node runs, only
  when it hears from no follower, and its heir holds every offset the leader committed
  (so a hand-over loses nothing confirmed).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.replication import (
    EpochLog,
    ReplicaState,
    committed,
    least_in_sync,
    majority,
    successor,
)


def _epochs(log: EpochLog) -> list[int]:
    return [log.epoch_at(offset) for offset in range(1, log.end + 1)]


def _copy(log: EpochLog) -> EpochLog:
    return EpochLog(list(log.starts), log.end)


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# A step: which replica leads the next epoch, how many entries it writes, and for each
# replica how much of the new leader's log past its divergence it copies.
_step = st.tuples(
    st.integers(0, 2), st.integers(0, 4), st.lists(st.integers(0, 8), min_size=3, max_size=3)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_step, min_size=1, max_size=8))
def test_truncation_by_epoch_keeps_what_logs_agree_on(
    steps: list[tuple[int, int, list[int]]],
) -> None:
    replicas = [EpochLog(), EpochLog(), EpochLog()]
    epoch = 0
    for leader_index, writes, copies in steps:
        epoch += 1
        leader = replicas[leader_index]
        for _ in range(writes):
            leader.append(epoch, leader.end + 1)
        for index, take in enumerate(copies):
            if index == leader_index:
                continue
            follower = replicas[index]
            cut = follower.divergence(leader)
            assert cut == _lcp(_epochs(follower), _epochs(leader))
            follower.truncate(cut)
            assert _epochs(follower) == _epochs(leader)[: follower.end]
            for offset in range(follower.end + 1, min(leader.end, follower.end + take) + 1):
                follower.append(leader.epoch_at(offset), offset)
    for a in replicas:
        for b in replicas:
            assert a.divergence(b) == _lcp(_epochs(a), _epochs(b))


def test_an_older_epoch_is_refused() -> None:
    log = EpochLog()
    log.append(2, 1)
    try:
        log.append(1, 2)
    except ValueError:
        pass
    else:
        raise AssertionError("a deposed leader's append was taken")


_nodes = ("a", "b", "c", "d", "e")


def _queues(node_sets: int) -> st.SearchStrategy[tuple[Any, ...]]:
    """A queue's members (the first leads), the leader's end, each node's acknowledged
    offset, and ``node_sets`` sets of members (the in-sync set first)."""
    return st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.just(_nodes[:n]),
            st.integers(0, 50),
            st.dictionaries(st.sampled_from(_nodes[:n]), st.integers(0, 60)),
            *(st.sets(st.sampled_from(_nodes[:n])) for _ in range(node_sets)),
        )
    )


@settings(max_examples=300, deadline=None)
@given(_queues(1))
def test_commit_rule(case: tuple[tuple[str, ...], int, dict[str, int], set[str]]) -> None:
    members, leader_end, acked, in_sync = case
    leader = members[0]
    offset = committed(leader, leader_end, acked, in_sync, members)
    voting = in_sync | {leader}
    if len(voting) < majority(len(members)):
        assert offset is None
        return
    assert offset is not None
    assert offset <= leader_end
    holders = {leader} | {n for n in in_sync if n != leader and acked.get(n, 0) >= offset}
    assert holders == voting  # every in-sync follower holds it...
    assert len(holders) >= majority(len(members))  # ...and they are a majority
    # It is the highest such offset.
    assert offset == leader_end or any(acked.get(n, 0) == offset for n in in_sync if n != leader)


@settings(max_examples=500, deadline=None)
@given(_queues(3))
def test_the_heir_is_in_sync_running_and_holds_every_commit(
    case: tuple[tuple[str, ...], int, dict[str, int], set[str], set[str], set[str]],
) -> None:
    members, leader_end, acked, in_sync, running, reachable = case
    leader = members[0]
    reachable.discard(leader)
    # What the leader acknowledged itself is its own end; the others' acks cannot pass it.
    acked = {n: min(v, leader_end) for n, v in acked.items() if n != leader}
    heir = successor(leader, in_sync, members, running, acked, reachable)
    candidates = {m for m in members if m != leader and m in in_sync and m in running}
    if reachable or not candidates:
        assert heir is None
        return
    assert heir in candidates
    assert acked.get(heir, -1) == max(acked.get(m, -1) for m in candidates)
    upto = committed(leader, leader_end, acked, in_sync, members)
    if upto is not None:
        assert acked.get(heir, 0) >= upto  # nothing the leader confirmed is behind it


def test_takeover_counts_a_delivery_that_was_out() -> None:
    state = ReplicaState()
    state.enqueued(1, "m1", 0, False)
    state.enqueued(2, "m2", 0, False)
    state.enqueued(3, "m3", 0, False)
    state.delivered(1)
    state.delivered(2)
    state.requeued(2, 1)
    state.removed(3)
    assert state.takeover() == [("m1", 1, True), ("m2", 1, True)]


@given(
    configured=st.one_of(st.none(), st.integers(min_value=1, max_value=9)),
    members=st.integers(min_value=1, max_value=7),
)
def test_least_in_sync_is_the_majority_unless_lowered_and_never_past_the_members(
    configured: int | None, members: int
) -> None:
    least = least_in_sync(configured, members)
    if configured is None:
        assert least is None
    else:
        assert least == min(configured, members)
    # With a minimum of 1 the leader alone commits what it has on disk.
    assert committed("a", 5, {}, {"a"}, ["a", "b", "c"], least_in_sync(1, 3)) == 5
    assert committed("a", 5, {}, {"a"}, ["a", "b", "c"], least_in_sync(None, 3)) is None
