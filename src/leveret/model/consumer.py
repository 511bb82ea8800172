"""Where a queue meets its consumers: the ``Consumer`` record and the two interfaces between
a queue and whatever consumes from it, so that the queue never knows a protocol.

- ``ConsumerOwner`` is what a consumer belongs to on the front end's side (a 0-9-1 channel,
  an AMQP 1.0 link's session): the queue asks it whether it takes a delivery now
  (``accepts``) and hands deliveries to it (``deliver``); it learns that its queue went
  (``consumer_removed``) and when a consumer's settlement deadline came
  (``consumer_deadline``).
- ``Source`` is the queue as a consumer's owner sees it: settle an entry for good, discard it
  (dead-lettered where the queue says so), put entries back, change one before it goes back
  (``amend``), dispatch again, drop a consumer. ``model/queues/base.py``'s ``Queue`` is the
  whole interface of a queue; this is the part a consumer's owner holds.

Credit is the consumer's own count of deliveries it may still take (``UNLIMITED`` for a
consumer nobody limits); the owner spends and restores it as its protocol says (0-9-1: a
prefetch window given back by acks; 1.0: link credit granted by flow), the queue only reads
it. Both interfaces are base classes rather than Protocols so that the compiled build calls
them natively on the per-message path.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from leveret.model.dead_letter import REJECTED

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from leveret.errors import NotImplemented_
    from leveret.model.completion import Completion
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message

__all__ = ["UNLIMITED", "Browser", "CallbackOwner", "Consumer", "ConsumerOwner", "Source"]

# Credit of a consumer that nobody limits (large, and still a small int when spent from).
UNLIMITED = 1 << 60


class Source:
    """A queue, as the owner of one of its consumers sees it."""

    name: str
    vhost_name: str
    deleted: bool

    def dispatch(self) -> None:
        """Hand ready entries to consumers that can take them (credit came back)."""
        raise NotImplementedError

    def answer(self, consumer: Consumer) -> Completion[None] | None:
        """The answer to ``consumer``'s consume (``add_consumer``) when it is not known
        yet (a queue led by another node: its leader's); until it is done the consumer gets
        nothing (``release``). None: answered already, as every local queue is."""
        return None

    def release(self, consumer: Consumer) -> None:
        """The owner told its client the consume is on (after ``answer``): deliver."""

    def drain(self, consumer: Consumer) -> Completion[None] | None:
        """``consumer`` drains (AMQP 1.0's flow with drain): it is handed what the queue
        holds up to its credit, and then its owner gives up the credit left. None: handed
        already (``dispatch``); else done once it was (a queue led by another node: its
        leader's deliveries reached the owner before the completion is done)."""
        self.dispatch()
        return None

    def settle(self, entry: QueuedMessage) -> None:
        """An unsettled entry was accepted: it leaves the queue."""
        raise NotImplementedError

    def discard(self, entry: QueuedMessage, reason: str = REJECTED) -> None:
        """An unsettled entry was refused for good: dead-lettered if the queue says so,
        else dropped."""
        raise NotImplementedError

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        """Unsettled entries go back to their places, marked redelivered (unless
        ``redelivered`` is False: AMQP 0-10's release without set-redelivered leaves the
        mark as it was)."""
        raise NotImplementedError

    def remove_consumer(self, consumer: Consumer) -> None:
        """Cancel ``consumer``; an auto-delete queue left without consumers goes."""
        raise NotImplementedError

    def withdrawn(self, consumer: Consumer) -> Completion[None] | None:
        """After ``remove_consumer``: done once the queue has let ``consumer`` go, when
        that is not known yet (a queue led by another node: once its leader has, so that
        a consume reaching the leader another way is not refused for it). None: gone
        already, as from every local queue. It never fails."""
        return None

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        """An unsettled entry is about to be released or rejected changed (AMQP 1.0's
        ``modified``): ``headers`` merged into its message (this queue's copy only), a
        failed delivery counted when ``failed``; the queue decides what it keeps (a stream's
        log is never changed; a quorum queue counts failed deliveries itself)."""
        raise NotImplementedError

    def rejects(self) -> bool:
        """Whether its deliveries can be rejected or released, not only accepted (a
        stream's deliveries only give credit back)."""
        return True

    def unsupported(self, operation: str) -> NotImplemented_:
        """The error for ``operation``, which this queue does not support."""
        raise NotImplementedError


class ConsumerOwner:
    """The front end's side of a consumer; see the module docstring."""

    def accepts(self, consumer: Consumer, size: int) -> bool:
        """Whether a delivery of ``size`` body bytes may go to ``consumer`` now (beyond its
        own credit: a channel's flow, a full socket, a channel-wide limit)."""
        raise NotImplementedError

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        """``entry`` goes to ``consumer``; unless it settles automatically it stays
        unsettled in its queue until the owner settles, discards or requeues it."""
        raise NotImplementedError

    def consumer_removed(self, consumer: Consumer) -> None:
        """``consumer``'s queue was deleted: the consumer is gone."""
        raise NotImplementedError

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        """The deadline ``consumer`` asked ``Timers`` for (``armed``) came."""
        raise NotImplementedError


class CallbackOwner(ConsumerOwner):
    """A consumer's owner made of functions, for code that is not compiled (in the compiled
    build an interpreted class cannot subclass ``ConsumerOwner``): deliveries go to
    ``deliver``, a deleted queue is reported to ``removed``, a settlement deadline to
    ``deadline``; ``writable`` False holds deliveries back."""

    def __init__(
        self,
        deliver: Callable[[Consumer, QueuedMessage], None],
        removed: Callable[[Consumer], None] | None = None,
        deadline: Callable[[Consumer, float], None] | None = None,
    ) -> None:
        self.on_deliver = deliver
        self.on_removed = removed
        self.on_deadline = deadline
        self.writable = True

    def accepts(self, consumer: Consumer, size: int) -> bool:
        return self.writable

    def deliver(self, consumer: Consumer, entry: QueuedMessage) -> None:
        self.on_deliver(consumer, entry)

    def consumer_removed(self, consumer: Consumer) -> None:
        if self.on_removed is not None:
            self.on_removed(consumer)

    def consumer_deadline(self, consumer: Consumer, now: float) -> None:
        if self.on_deadline is not None:
            self.on_deadline(consumer, now)


class Browser:
    """Something that looks at a queue's ready messages without taking them (AMQP 0-10's
    not-acquired subscriptions): in ``Queue.browsers``, woken when messages become ready;
    it reads ``Queue.ready`` itself, from where it last stopped."""

    def browse(self) -> None:
        raise NotImplementedError


class Consumer:
    """One consumer of one queue."""

    __slots__ = (
        "arguments",
        "armed",
        "auto_settle",
        "browses",
        "credit",
        "exclusive",
        "owner",
        "pending",
        "priority",
        "queue",
        "tag",
        "timeout",
        "unsettled",
    )

    def __init__(
        self,
        tag: str,
        queue: Source,
        owner: ConsumerOwner,
        *,
        auto_settle: bool,
        exclusive: bool,
        credit: int = UNLIMITED,
        arguments: Mapping[str, object] | None = None,
        priority: int = 0,
        timeout: float | None = None,
        browses: bool = False,
    ) -> None:
        self.tag = tag
        self.queue = queue
        self.owner = owner
        # Deliveries are settled as they go out (0-9-1 no-ack, 1.0 pre-settled).
        self.auto_settle = auto_settle
        self.exclusive = exclusive
        self.credit = credit
        self.arguments: Mapping[str, object] = arguments if arguments is not None else {}
        self.priority = priority
        # Seconds an unsettled delivery may stay so (None: forever); the owner enforces it.
        self.timeout = timeout
        # It looks and does not take (an AMQP 0-10 not-acquired subscription of a queue
        # led by another node: its leader browses for it, ``cluster/link.py``); a local
        # queue's browsers are ``Browser``s instead, never consumers.
        self.browses = browses
        self.unsettled = 0
        # The owner's ids of this consumer's deliveries in delivery order (settled ones leave
        # lazily, so the head is the oldest unsettled one), and whether a deadline is armed.
        self.pending: deque[int] = deque()
        self.armed = False

    def __repr__(self) -> str:
        return f"Consumer({self.tag!r})"

    def can_take(self, message: Message) -> bool:
        return self.credit > 0 and self.owner.accepts(self, len(message.body))

    def on_deadline(self, now: float) -> None:
        """``Timers`` woke us (see ``armed``)."""
        self.armed = False
        self.owner.consumer_deadline(self, now)
