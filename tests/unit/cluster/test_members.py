"""The records an operator's membership changes write (``cluster/members.py``), and the
refusals, without etcd: the nodes' part is tested through real nodes in
``tests/cluster/test_quorum_verbs.py``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from leveret.cluster.apply import QueueRecord, View
from leveret.cluster.members import (
    MemberError,
    QueueNotFound,
    added,
    members_of,
    quorum_record,
    removed,
)

QUORUM = {"x-queue-type": "quorum"}


def view(running: tuple[str, ...] = ("a", "b", "c", "d"), stopped: tuple[str, ...] = ()) -> View:
    return View(nodes={n: {} for n in running}, members={n: {} for n in (*running, *stopped)})


def record(members: tuple[str, ...] = ("a", "b", "c"), **changes: object) -> QueueRecord:
    base = QueueRecord("/", "q", True, False, False, dict(QUORUM), "a", None, members, 3, members)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_added_member_follows_outside_the_in_sync_set() -> None:
    new = added(record(), "d", view())
    assert new.members == ("a", "b", "c", "d")
    assert new.in_sync == ("a", "b", "c")
    assert (new.leader, new.epoch) == ("a", 3)


def test_a_queue_of_one_node_gets_its_leader_and_the_new_member() -> None:
    single = record((), epoch=0, in_sync=())
    assert members_of(single) == ("a",)
    new = added(single, "b", view())
    assert (new.members, new.in_sync, new.epoch) == (("a", "b"), ("a",), 1)
    # Shrunk to one node before: the epoch goes on from where it was.
    again = added(replace(single, epoch=4), "b", view())
    assert again.epoch == 5


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ("b", "already a member"),
        ("z", "not a member of this cluster"),
        ("s", "not running"),
    ],
)
def test_add_refusals(node: str, words: str) -> None:
    with pytest.raises(MemberError, match=words):
        added(record(), node, view(stopped=("s",)))


def test_removed_follower_leaves_members_and_in_sync_set() -> None:
    new = removed(record(), "c", view())
    assert (new.members, new.in_sync, new.leader, new.epoch) == (("a", "b"), ("a", "b"), "a", 3)


def test_removing_a_down_member_is_allowed() -> None:
    new = removed(record(), "c", view(running=("a", "b")))
    assert new.members == ("a", "b")


def test_removed_leader_hands_over_to_a_running_in_sync_member_with_the_next_epoch() -> None:
    new = removed(record(in_sync=("a", "c")), "a", view())
    assert (new.leader, new.epoch, new.members, new.in_sync) == ("c", 4, ("b", "c"), ("c",))


def test_removed_leader_without_a_running_in_sync_heir_is_refused() -> None:
    with pytest.raises(MemberError, match="no other in-sync member is running"):
        removed(record(in_sync=("a", "c")), "a", view(running=("a", "b")))


def test_two_members_left_one_is_a_queue_of_one_node() -> None:
    new = removed(record(("a", "b"), in_sync=("a", "b")), "b", view())
    assert (new.members, new.in_sync, new.epoch, new.leader) == ((), (), 3, "a")
    handed = removed(record(("a", "b"), in_sync=("a", "b")), "a", view())
    assert (handed.members, handed.in_sync, handed.epoch, handed.leader) == ((), (), 4, "b")
    with pytest.raises(MemberError, match="no other in-sync member"):
        removed(record(("a", "b"), in_sync=("a",)), "a", view())


@pytest.mark.parametrize(
    ("single", "node", "words"),
    [(record((), epoch=0, in_sync=()), "a", "last member"), (record(), "d", "not a member")],
)
def test_remove_refusals(single: QueueRecord, node: str, words: str) -> None:
    with pytest.raises(MemberError, match=words):
        removed(single, node, view())


def test_only_quorum_queues_have_members() -> None:
    known = view()
    known.queues[("/", "q")] = record()
    known.queues[("/", "c")] = replace(record(), name="c", arguments={})
    known.queues[("/", "s")] = replace(record(), name="s", arguments={"x-queue-type": "stream"})
    assert quorum_record(known, "/", "q").name == "q"
    with pytest.raises(MemberError, match="classic queue"):
        quorum_record(known, "/", "c")
    with pytest.raises(MemberError, match="stream queue"):
        quorum_record(known, "/", "s")
    with pytest.raises(QueueNotFound, match="does not exist"):
        quorum_record(known, "other", "q")
