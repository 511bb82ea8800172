"""An operator's changes to a replicated queue's members (``rabbitmq-queues``' verbs for
quorum queues, ``rabbitmq-streams``' ``add_replica``/``delete_replica`` for streams;
``cluster/member_verbs.py`` answers them; docs/cluster.md, "Changing a queue's members").

Each change is a new record written to etcd with a transaction that compares the record's
revision (what the change was computed from; a concurrent election or in-sync change makes
it fail, and it is computed again from the newer record), and, where the change counts on
a node running, that node's key: never applied to one node's copy alone, every node
learns it from the watch. What follows is the nodes' own work (``cluster/replication.py``):

- **add**: the node is a member outside the in-sync set; the leader sends it the queue's
  state (a snapshot) and then the log, as to a returning follower, and once it has
  acknowledged the leader's offset, writes it into the in-sync set. A quorum queue of one
  node (no members listed) gets its leader and the new node as members.
- **delete**: the node leaves the members and the in-sync set; it closes and removes its
  copy's file (a node that is down does so when it next starts). The last member cannot
  be removed. Removing the leader hands leadership over, as RabbitMQ's Raft leader steps
  down when it is removed: to a running member of the in-sync set, with the next epoch
  (an election made by the operator; refused when no such member runs). A queue left
  with one member is a queue of one node again (its leader's journal alone; an heir
  takes it over from its copy first).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from leveret.auth.users import AdminError
from leveret.cluster.etcd import Compare, exists, mod_is
from leveret.cluster.metadata import ATTEMPTS, Conflict
from leveret.model.replication import successor

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.cluster.apply import QueueRecord, View
    from leveret.cluster.metadata import MetadataStore

__all__ = [
    "MemberError",
    "added",
    "change",
    "is_quorum",
    "is_stream",
    "members_of",
    "quorum_record",
    "removed",
]


class MemberError(AdminError):
    """A membership change that cannot be made (``leveret ctl`` exits 65)."""


class QueueNotFound(MemberError):
    exit_code = 69  # rabbitmqctl's for a queue that does not exist


def is_quorum(record: QueueRecord) -> bool:
    return record.arguments.get("x-queue-type") in ("quorum", b"quorum")


def members_of(record: QueueRecord) -> tuple[str, ...]:
    """The queue's members: those listed, or its leader alone (a queue of one node)."""
    return record.members or (record.leader,)


def is_stream(record: QueueRecord) -> bool:
    return record.arguments.get("x-queue-type") in ("stream", b"stream")


def quorum_record(view: View, vhost: str, name: str, kind: str = "quorum") -> QueueRecord:
    """The record of a replicated queue of ``kind``: ``quorum`` (``rabbitmq-queues``'
    verbs) or ``stream`` (``rabbitmq-streams``')."""
    record = view.queues.get((vhost, name))
    if record is None:
        raise QueueNotFound(f"queue '{name}' in vhost '{vhost}' does not exist")
    if not (is_stream(record) if kind == "stream" else is_quorum(record)):
        found = record.arguments.get("x-queue-type") or "classic"
        if isinstance(found, bytes):
            found = found.decode(errors="replace")
        has = (
            "only streams have replicas" if kind == "stream" else "only quorum queues have members"
        )
        raise MemberError(f"queue '{name}' in vhost '{vhost}' is a {found} queue: {has}")
    return record


def added(record: QueueRecord, node: str, view: View) -> QueueRecord:
    """``record`` with ``node`` a member (outside the in-sync set until it caught up)."""
    members = members_of(record)
    if node in members:
        raise MemberError(f"node '{node}' is already a member of queue '{record.name}'")
    if node not in view.members and node not in view.nodes:
        raise MemberError(f"node '{node}' is not a member of this cluster")
    if node not in view.nodes:
        raise MemberError(f"node '{node}' is not running")
    if record.members:
        return replace(record, members=(*record.members, node))
    # A queue of one node: its leader, in sync by itself, and the new member; a new epoch
    # (one past any it had while replicated).
    return replace(
        record, members=(record.leader, node), epoch=record.epoch + 1, in_sync=(record.leader,)
    )


def removed(record: QueueRecord, node: str, view: View) -> QueueRecord:
    """``record`` without ``node`` (its leader handed over when it is the leader)."""
    members = members_of(record)
    if node not in members:
        raise MemberError(f"node '{node}' is not a member of queue '{record.name}'")
    if len(members) == 1:
        raise MemberError(
            f"node '{node}' is the last member of queue '{record.name}': delete the queue instead"
        )
    rest = tuple(m for m in members if m != node)
    in_sync = tuple(m for m in record.in_sync if m != node)
    leader, epoch = record.leader, record.epoch
    if node == leader:
        # The hand-over's rule (an in-sync member whose node runs), the leader's own
        # acknowledgements unknown here: the first such member.
        heir = successor(node, in_sync, members, set(view.nodes), {}, set())
        if heir is None:
            raise MemberError(
                f"node '{node}' leads queue '{record.name}' and no other in-sync member is "
                "running to take over: wait until one is in sync"
            )
        leader, epoch = heir, epoch + 1
    if len(rest) == 1:
        # One member left, the leader (the heir takes the queue over from its copy): a
        # queue of one node, its journal alone holds it.
        return replace(record, leader=leader, members=(), epoch=epoch, in_sync=())
    return replace(record, leader=leader, epoch=epoch, members=rest, in_sync=in_sync)


async def change(
    store: MetadataStore,
    vhost: str,
    name: str,
    compute: Callable[[QueueRecord], QueueRecord],
    *,
    running: str | None = None,
    kind: str = "quorum",
) -> QueueRecord:
    """Write ``compute(record)`` of the queue's current record, fenced by the record's
    revision (and ``running``'s key existing, and the new leader's when it changes);
    computed again from the newer record when a concurrent change won. The record
    written."""
    view = store.applier.view
    key = store.layout.queue(vhost, name)
    for _attempt in range(ATTEMPTS):
        record = quorum_record(view, vhost, name, kind)
        entry = store.applier.entries.get(key)
        if entry is None:
            raise QueueNotFound(f"queue '{name}' in vhost '{vhost}' does not exist")
        new = compute(record)
        compare: list[Compare] = [mod_is(key, entry.mod_revision)]
        for node in {running, new.leader if new.leader != record.leader else None} - {None}:
            assert node is not None
            compare.append(exists(store.layout.node(node)))
        if await store.change_queue_record(new, compare):
            return new
    raise Conflict(f"queue '{name}' in vhost '{vhost}' kept changing: try again")
