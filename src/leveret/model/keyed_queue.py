"""A classic queue whose messages are keyed: message groups (``model/message_groups.py``)
and/or last-value replacement (``model/last_value.py``).

The vhost makes a ``KeyedQueue`` instead of a ``Queue`` when the arguments name a group key
(``qpid.group_header_key``) or a last-value key (``qpid.last_value_queue_key``), whatever
protocol declares it. Everything else is the classic queue's: it only takes the feature
paths (which keep every ready message in memory, in ``ready``), and it tells its two tables
what happens to entries at the few places where entries move:

- an entry becomes ready (``_place`` of a new one, ``_requeue_special``, recovery);
- a ready entry is handed out (``_hand_over``, ``get``, ``acquire``);
- a handed-out entry is settled (``settle``, ``discard``) or released;
- a ready entry leaves without being handed out (``_drop``: expiry, length limits; ``take``,
  ``purge``; a last value replaced).

With groups, dispatch is the group table's choice (each consumer takes the first message
its groups allow) instead of the head of the queue; settling a group's last held message
frees the group, so it dispatches again. Plain queues never run any of this: this class
replaces nothing of ``Queue`` for them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING

from leveret.model import dead_letter as dl
from leveret.model.last_value import LastValueIndex
from leveret.model.message_groups import MessageGroups
from leveret.model.queue import Queue
from leveret.model.queue_features import PriorityReady

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from leveret.model.consumer import Consumer
    from leveret.model.entry import QueuedMessage
    from leveret.model.memory_gauge import MemoryGauge
    from leveret.model.queue_args import QueueConfig
    from leveret.model.queue_features import QueueHost
    from leveret.model.timers import Timers

__all__ = ["KeyedQueue"]


class KeyedQueue(Queue):
    """A classic queue with message groups and/or last-value keys; see the module docstring."""

    def __init__(
        self,
        vhost_name: str,
        name: str,
        *,
        config: QueueConfig,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        gauge: MemoryGauge | None = None,
        host: QueueHost | None = None,
        timers: Timers | None = None,
    ) -> None:
        super().__init__(
            vhost_name,
            name,
            durable=durable,
            exclusive_owner=exclusive_owner,
            auto_delete=auto_delete,
            arguments=arguments,
            gauge=gauge,
            config=config,
            host=host,
            timers=timers,
        )
        self.groups: MessageGroups | None = (
            MessageGroups(config.group_key) if config.group_key is not None else None
        )
        self.last_values: LastValueIndex | None = (
            LastValueIndex(config.lvq_key) if config.lvq_key is not None else None
        )
        # Set when settling freed a group that has ready messages: dispatch again.
        self._freed = False
        self._enter_features()

    # -- entries becoming ready ------------------------------------------------------------

    def _place(self, entry: QueuedMessage, now: float) -> None:
        last_values = self.last_values
        if last_values is not None:
            old = last_values.replaces(entry)
            if old is not None and self._unready(old):
                self._replaced(old)
        groups = self.groups
        if groups is None:
            super()._place(entry, now)
            return
        first = groups.ready(entry, waiting=False)
        if first:
            if self.consumers and (entry.expires is None or entry.expires > now):
                consumer = self._taker(entry)
                if consumer is not None:
                    self._hand_over(consumer, entry)
                    return
            groups.waiting(entry)
        if entry.expires is not None and entry.expires <= now:
            self._drop(entry, dl.EXPIRED)  # TTL 0: deliver now or never
            return
        self.ready.append(entry)
        self.ready_bytes += len(entry.message.body)
        self._trim()
        self._schedule_head()

    def _restore_special(self, entry: QueuedMessage, enqueued_at: float | None = None) -> None:
        super()._restore_special(entry, enqueued_at)
        last_values = self.last_values
        if last_values is not None:
            old = last_values.replaces(entry)
            if old is not None and self._unready(old):
                self._replaced(old)
        if self.groups is not None:
            self.groups.ready(entry)

    def _requeue_special(self, entries: Iterable[QueuedMessage], redelivered: bool) -> None:
        ready = self.ready
        groups = self.groups
        last_values = self.last_values
        for entry in sorted(entries, key=lambda e: e.seq, reverse=True):
            self.unacked_count -= 1
            if groups is not None:
                groups.released(entry)
            if last_values is not None and not last_values.back(entry):
                self._gone(entry)  # a newer value of its key is ready: this one is stale
                continue
            if redelivered:
                entry.redelivered = True
            if isinstance(ready, PriorityReady):
                ready.put_back(entry)
            else:
                _insert(ready, entry)
            self.ready_bytes += len(entry.message.body)
            if groups is not None:
                groups.ready(entry)
        self._dispatch_special()

    # -- entries leaving -----------------------------------------------------------------

    def _hand_over(self, consumer: Consumer, entry: QueuedMessage) -> None:
        if self.groups is not None:
            self.groups.taken(entry, consumer, consumer.auto_settle)
        if self.last_values is not None:
            self.last_values.left(entry)
        super()._hand_over(consumer, entry)

    def _drop(self, entry: QueuedMessage, reason: str) -> None:
        self._left(entry)
        super()._drop(entry, reason)

    def _left(self, entry: QueuedMessage) -> None:
        """``entry`` leaves for good (ready or handed out)."""
        groups = self.groups
        if groups is not None and groups.gone(entry):
            self._freed = True
        if self.last_values is not None:
            self.last_values.left(entry)

    def _replaced(self, old: QueuedMessage) -> None:
        """A ready entry replaced by a newer value of its key: it goes (no dead-lettering)."""
        self.ready_bytes -= len(old.message.body)
        if self.groups is not None:
            self.groups.unready(old)
        self._gone(old)

    def _unready(self, entry: QueuedMessage) -> bool:
        """Take ``entry`` out of ``ready`` wherever it is; False if it is not there."""
        ready = self.ready
        if isinstance(ready, PriorityReady):
            return ready.remove(entry)
        i = bisect_left(ready, entry.seq, key=lambda e: e.seq)
        if i >= len(ready) or ready[i] is not entry:
            return False
        del ready[i]
        return True

    def settle(self, entry: QueuedMessage) -> None:
        self._left(entry)
        super().settle(entry)
        self._after_freeing()

    def discard(self, entry: QueuedMessage, reason: str = dl.REJECTED) -> None:
        super().discard(entry, reason)
        self._after_freeing()

    def _after_freeing(self) -> None:
        if self._freed:
            self._freed = False
            self._dispatch_special()

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        groups = self.groups
        if groups is None:
            entry = super().get(auto_settle=auto_settle)
            if entry is not None and self.last_values is not None:
                self.last_values.left(entry)
            return entry
        self._before_get()
        now = self.timers.now
        while True:
            entry = groups.next_for(None)
            if entry is None:
                self.n_get_empty += 1
                return None
            self._unready(entry)
            self.ready_bytes -= len(entry.message.body)
            if entry.expires is not None and entry.expires <= now:
                self._drop(entry, dl.EXPIRED)
                continue
            break
        groups.taken(entry, None, auto_settle)
        if self.last_values is not None:
            self.last_values.left(entry)
        if entry.redelivered:
            self.n_redeliver += 1
        if auto_settle:
            self.n_get_no_ack += 1
            self._gone(entry)
        else:
            self.n_get += 1
            self.unacked_count += 1
            if entry.sid and not entry.redelivered:
                self.journal.delivered(self.store_id, entry.sid)
        self._schedule_head()
        return entry

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        groups = self.groups
        if groups is not None and groups.is_ready(entry):
            free, _owner = groups.owner_of(entry)
            if not free:
                return None  # its group is someone else's
        taken = super().acquire(entry)
        if taken is not None:
            if groups is not None:
                groups.taken(taken, None, False)
            if self.last_values is not None:
                self.last_values.left(taken)
        return taken

    def take(self, entry: QueuedMessage) -> bool:
        groups = self.groups
        if groups is not None:
            groups.unready(entry)
        if self.last_values is not None:
            self.last_values.left(entry)
        return super().take(entry)

    def purge(self) -> int:
        count = super().purge()
        if self.groups is not None:
            self.groups.cleared()
        if self.last_values is not None:
            self.last_values.cleared()
        return count

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)
        if self.groups is not None:
            self.groups.consumer_gone(consumer)

    # -- dispatch ------------------------------------------------------------------------

    def _taker(self, entry: QueuedMessage) -> Consumer | None:
        """Who takes ``entry`` (the first ready message of its group) now, if anyone: its
        group's owner, or for a free group whom the queue's rules pick (round-robin,
        consumer priorities, the single active consumer)."""
        groups = self.groups
        assert groups is not None
        free, owner = groups.owner_of(entry)
        if free:
            return self._pick(entry.message)
        if owner is not None and owner.can_take(entry.message) and owner in self.consumers:
            return owner
        return None

    def _in_turn(self) -> list[Consumer]:
        """The consumers that may take messages now, in the order they get them: the active
        one of a single-active-consumer queue; else round-robin from ``_rr``, higher
        consumer priorities first."""
        consumers = self.consumers
        if not consumers:
            return []
        if self.config.single_active_consumer:
            draining = self._sac_draining
            if draining is not None:
                if draining.unsettled > 0:
                    return []
                self._sac_draining = None
            return [consumers[0]]
        start = self._rr % len(consumers)
        turn = consumers[start:] + consumers[:start]
        if self._prioritised:
            turn.sort(key=lambda c: -c.priority)
        return turn

    def _dispatch_special(self) -> None:
        groups = self.groups
        if groups is None:
            super()._dispatch_special()
            return
        now = self.timers.now
        progress = True
        while progress and self.ready and self.consumers:
            progress = False
            for consumer in self._in_turn():
                while True:
                    entry = groups.next_for(consumer)
                    if entry is None:
                        break
                    if entry.expires is not None and entry.expires <= now:
                        self._unready(entry)
                        self.ready_bytes -= len(entry.message.body)
                        self._drop(entry, dl.EXPIRED)
                        continue
                    if consumer.can_take(entry.message):
                        self._unready(entry)
                        self.ready_bytes -= len(entry.message.body)
                        self._hand_over(consumer, entry)
                        progress = True
                    break
            if progress and self.consumers:
                self._rr = (self._rr + 1) % len(self.consumers)
        self._schedule_head()

    # -- looking (management) ------------------------------------------------------------

    def group_state(self) -> list[dict[str, object]]:
        """Each group with messages: its id, how many messages (ready and held) and the
        consumer that owns it ("" when free), as Qpid's queue query shows them."""
        groups = self.groups
        if groups is None:
            return []
        return [
            {
                "group_id": group.name,
                "msg_count": len(group.pending) + group.held,
                "consumer": group.owner.tag if group.owner is not None else "",
            }
            for group in groups.groups()
        ]


def _insert(ready: object, entry: QueuedMessage) -> None:
    """Put ``entry`` back at its place by sequence number in a deque of ready entries."""
    assert isinstance(ready, deque)
    if not ready or entry.seq < ready[0].seq:
        ready.appendleft(entry)
    else:
        ready.insert(bisect_left(ready, entry.seq, key=lambda e: e.seq), entry)
