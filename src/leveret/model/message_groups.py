"""Message groups (Qpid's shared groups, JMS's JMSXGroupID, AMQP 1.0's group-id): the
group ownership table of one queue and the choice of what a consumer may take next.

A queue declared with a group key (``qpid.group_header_key``) puts every message in a group:
the value of that header, else the message's own AMQP 1.0 ``group-id``, else the default
group ``qpid.no-group``. The rules, Qpid's:

- while a consumer holds unsettled messages of a group (its *owner*), the group's other
  messages go to that consumer only; nobody else gets any;
- a group is free again when its messages held are all settled (accepted, rejected, or
  released back to the queue); a consumer that goes keeps its groups until what it held is
  settled or released (0-9-1: its channel closes; 0-10: its session);
- a consumer takes the first message in queue order whose group is free or its own, so a
  group's messages go out in their queue order (a released one goes back to its place, in
  front of its group's later messages), and a busy group never holds up the others;
- a get (0-9-1 ``basic.get``, 0-10 ``acquire`` of a browsed message) may take the first
  message of a free group; until that is settled, the group is held by no consumer.

Theory of operation. The queue keeps its ready entries as always (``Queue.ready``: order,
TTL, limits, browsing); this table indexes them by group. Each :class:`Group` keeps its
ready entries in queue order (``pending``), its ``owner`` and how many of its messages are
held (``held``). Groups with ready messages wait in heaps ordered by their first message's
place in the queue: one heap of free groups, one per consumer of the groups it owns. A
consumer's next message is the first of the better of its heap's top and the free heap's
top, so choosing costs O(log groups) and never scans the queue. Heap items are not removed
when a group changes: each group has a ``version`` bumped on every change, and an item whose
version is not the group's current one is dropped when it reaches the top.

The table knows queue entries (``QueuedMessage``) and consumers only as things to compare;
``model/keyed_queue.py`` is the queue that calls it.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections import deque
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message

__all__ = ["NO_GROUP", "Group", "MessageGroups", "group_of"]

NO_GROUP: Final = "qpid.no-group"
# Idle groups are forgotten once the table holds this many (or twice those in use).
SWEEP_FLOOR: Final = 4096

# A heap item: (place of the group's first ready entry, a tie-breaker, version, group).
_Item = tuple[tuple[int, int], int, int, "Group"]


def group_of(message: Message, key: str) -> str:
    """The group of ``message`` on a queue grouping by header ``key``."""
    headers = message.headers
    value = headers.get(key) if headers else None
    if value is None:
        value = getattr(message.properties, "group_id", None)
        if value is None:
            return NO_GROUP
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _place(entry: QueuedMessage) -> tuple[int, int]:
    """An entry's place in its queue's delivery order: higher priority first, then older."""
    return (-entry.priority, entry.seq)


class Group:
    """One group of one queue."""

    __slots__ = ("held", "name", "owner", "pending", "version")

    def __init__(self, name: str) -> None:
        self.name = name
        self.owner: Consumer | None = None  # the consumer holding its messages, if any
        self.held = 0  # its messages handed out and not settled yet
        self.pending: deque[QueuedMessage] = deque()  # its ready entries, in queue order
        self.version = 0

    @property
    def free(self) -> bool:
        return self.held == 0

    def __repr__(self) -> str:
        return f"Group({self.name!r}, held={self.held}, pending={len(self.pending)})"


class MessageGroups:
    """The group table of one queue; see the module docstring."""

    __slots__ = (
        "_free",
        "_groups",
        "_held_by",
        "_owned",
        "_pending_in",
        "_sweep_at",
        "_ticket",
        "key",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self._groups: dict[str, Group] = {}
        self._free: list[_Item] = []
        self._owned: dict[Consumer, list[_Item]] = {}
        # Ready entries and handed-out ones, with their group.
        self._pending_in: dict[QueuedMessage, Group] = {}
        self._held_by: dict[QueuedMessage, Group] = {}
        self._ticket = 0
        self._sweep_at = SWEEP_FLOOR

    # -- looking -------------------------------------------------------------------------

    def __len__(self) -> int:
        """Groups with ready or held messages."""
        return sum(1 for _ in self.groups())

    def groups(self) -> Iterator[Group]:
        """Every group with ready or held messages."""
        return (g for g in self._groups.values() if g.held or g.pending)

    def group_for(self, entry: QueuedMessage) -> Group | None:
        return self._pending_in.get(entry) or self._held_by.get(entry)

    def is_ready(self, entry: QueuedMessage) -> bool:
        return entry in self._pending_in

    # -- entries becoming ready or leaving -----------------------------------------------

    def ready(self, entry: QueuedMessage, *, waiting: bool = True) -> bool:
        """``entry`` is ready (new, released, recovered); whether it is now the first of its
        group (only then may a consumer take it at once). ``waiting`` False: the caller
        tries to hand it out at once and calls :meth:`waiting` if it could not."""
        name = group_of(entry.message, self.key)
        group = self._groups.get(name)
        if group is None:
            group = self._groups[name] = Group(name)
            if len(self._groups) >= self._sweep_at:
                self._sweep()
        pending = group.pending
        if not pending:
            pending.append(entry)
        else:
            place = _place(entry)
            if _place(pending[-1]) < place:
                pending.append(entry)
            else:
                insort(pending, entry, key=_place)
        self._pending_in[entry] = group
        first = pending[0] is entry
        if first and waiting:
            self._changed(group)
        return first

    def waiting(self, entry: QueuedMessage) -> None:
        """``entry``, the first of its group (``ready(waiting=False)``), was not handed out:
        it waits for a consumer."""
        self._changed(self._pending_in[entry])

    def unready(self, entry: QueuedMessage) -> None:
        """A ready entry left without being handed out (expired, dropped, purged, moved,
        replaced by a last value)."""
        group = self._pending_in.pop(entry, None)
        if group is None:
            return
        pending = group.pending
        was_first = pending[0] is entry
        pending.remove(entry)
        if was_first:
            self._changed(group)

    def taken(self, entry: QueuedMessage, consumer: Consumer | None, settled: bool) -> None:
        """``entry`` (ready) went to ``consumer`` (None: a get); ``settled``: at once (no
        acknowledgement: the group stays free)."""
        group = self._pending_in.pop(entry)
        pending = group.pending
        if pending[0] is entry:
            pending.popleft()
        else:
            pending.remove(entry)
        if not settled:
            group.held += 1
            group.owner = consumer
            self._held_by[entry] = group
        if pending:
            self._changed(group)
        else:
            group.version += 1

    def settled(self, entry: QueuedMessage) -> bool:
        """A handed-out entry was settled (accepted, rejected, dropped): it leaves. Whether
        that freed a group with ready messages (consumers may take them now)."""
        group = self._held_by.pop(entry, None)
        if group is None:
            return False
        group.held -= 1
        if group.held:
            return False
        group.owner = None
        if not group.pending:
            group.version += 1
            return False
        self._changed(group)
        return True

    def gone(self, entry: QueuedMessage) -> bool:
        """``entry`` leaves for good, ready or handed out; whether a group was freed."""
        if entry in self._pending_in:
            self.unready(entry)
            return False
        return self.settled(entry)

    def released(self, entry: QueuedMessage) -> None:
        """A handed-out entry goes back to the queue (``ready`` is called next)."""
        self.settled(entry)

    def cleared(self) -> None:
        """Every ready entry went (a purge); what is held stays held."""
        for entry, group in list(self._pending_in.items()):
            group.pending.clear()
            del self._pending_in[entry]
        for group in list(self._groups.values()):
            self._changed(group)

    def consumer_gone(self, consumer: Consumer) -> None:
        """``consumer`` left: its groups stay its own until what it holds comes back."""
        self._owned.pop(consumer, None)

    # -- choosing ------------------------------------------------------------------------

    def next_for(self, consumer: Consumer | None) -> QueuedMessage | None:
        """The first ready entry ``consumer`` may take (None: a get, free groups only)."""
        best = self._top(self._free)
        if consumer is not None:
            own = self._owned.get(consumer)
            if own is not None:
                mine = self._top(own)
                if mine is not None and (best is None or mine[0] < best[0]):
                    best = mine
        return None if best is None else best[3].pending[0]

    def owner_of(self, entry: QueuedMessage) -> tuple[bool, Consumer | None]:
        """(whether ``entry``'s group is free, its owner) for a ready entry."""
        group = self._pending_in[entry]
        return group.held == 0, group.owner

    def _top(self, heap: list[_Item]) -> _Item | None:
        while heap:
            item = heap[0]
            group = item[3]
            if item[2] == group.version and group.pending:
                return item
            heapq.heappop(heap)
        return None

    # -- bookkeeping ---------------------------------------------------------------------

    def _changed(self, group: Group) -> None:
        """The group's first entry or its state changed: a fresh heap item where it now
        waits (the old ones go stale)."""
        group.version += 1
        if not group.pending:
            return
        heap: list[_Item] | None
        if group.held == 0:
            heap = self._free
        else:
            owner = group.owner
            if owner is None:
                return  # held by a get: nobody may take its messages meanwhile
            heap = self._owned.get(owner)
            if heap is None:
                if owner.queue.deleted or not _attached(owner):
                    return  # its consumer went: it waits for its held messages
                heap = self._owned[owner] = []
        self._ticket += 1
        heapq.heappush(heap, (_place(group.pending[0]), self._ticket, group.version, group))
        if len(heap) > 64 and len(heap) > 4 * len(self._groups):
            self._compact(heap)

    def _compact(self, heap: list[_Item]) -> None:
        heap[:] = [item for item in heap if item[2] == item[3].version and item[3].pending]
        heapq.heapify(heap)

    def _sweep(self) -> None:
        """Forget the groups with nothing ready or held. Idle groups are kept until then, so
        that a group seen again costs a lookup, not a new object; the table never holds more
        than twice the groups in use (or ``SWEEP_FLOOR``)."""
        self._groups = {n: g for n, g in self._groups.items() if g.held or g.pending}
        self._sweep_at = max(SWEEP_FLOOR, 2 * len(self._groups))


def _attached(consumer: Consumer) -> bool:
    """Whether ``consumer`` is still one of its queue's consumers."""
    return consumer in getattr(consumer.queue, "consumers", ())
