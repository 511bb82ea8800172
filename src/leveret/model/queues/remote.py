"""A queue led by another node of a cluster, as this node's model holds it: ``RemoteQueue``,
a proxy whose operations go to the leader over the inter-node link (``LinkLeader``).

Made by the cluster part for every queue record that names another node as leader, with
the leader's type (so the type's declare-time rules and capabilities are the leader's) and
put in its vhost's ``remote_queues``: routing on this node reaches it, and a consumer, a
``basic.get``, an ack on this node act on the queue on its leader. What answers at once on
one node answers later here: ``forward`` returns the leader's confirm as a completion (the
publisher's confirm waits for it), ``fetch`` the leader's answer to a get; deliveries come
back through the link to the local consumers' owners; settlements need no answer.

While the leader's node cannot be reached (``LinkLeader.up`` False), operations get what
RabbitMQ 3.10 answers for a classic queue whose node is down: 404 "home node ... is down or
inaccessible" for a declare, a consume, a get or a delete; a publish routed to it alone is
unroutable (returned when mandatory, then confirmed), as RabbitMQ 3.10.8 answers
(``tests/data/cluster/rabbitmq-3.10.8-down-node.json``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.errors import AccessRefused, AMQPError, NotFound
from leveret.model.completion import Completion
from leveret.model.consumer import UNLIMITED, CallbackOwner, Consumer
from leveret.model.dead_letter import REJECTED
from leveret.model.queues.base import Queue, QueueHost, type_of
from leveret.model.queues.stream import StreamConsumer, parse_offset_spec

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # an install without mypy (mypy_extensions is a build-time dependency)

    def _no_attrs(**attrs: object) -> Callable[[type], type]:
        # mypyc reads the decorator when it compiles and leaves a native class as it is.
        return lambda cls: cls

    mypyc_attr = _no_attrs  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from leveret.model.consumer import ConsumerOwner
    from leveret.model.entry import QueuedMessage
    from leveret.model.message import Message
    from leveret.model.queues.args import QueueConfig

__all__ = ["ACCEPT", "ELSEWHERE", "REJECT", "REQUEUE", "LinkLeader", "RemoteQueue"]

# The owner of an exclusive queue whose connection is on another node: no connection of
# this node is it (405 for every one of them, as RabbitMQ answers).
ELSEWHERE = object()

# How deliveries are settled (the link's Settle kinds).
ACCEPT = 0
REJECT = 1
REQUEUE = 2


@mypyc_attr(allow_interpreted_subclasses=True)
class LinkLeader:
    """What a proxy asks of the link to its leader's node: the base class of the link's
    peer (``cluster/link.py``'s ``Peer``), which implements every method. A native class,
    not a Protocol: in the compiled build a call through a protocol is a Python-level
    call (the attribute looked up on the type, the arguments boxed and parsed again by
    the method's wrapper), and a forwarded publish made four (``up``, ``publish``,
    ``room``, ``backlogged``), an ack two (``accept``, ``credit``); a method of a native
    class is called through its vtable, a C call. Interpreted subclasses are allowed for
    the tests' stand-ins (their methods are reached through mypyc's glue; ``Peer``, a
    native subclass, keeps the direct call)."""

    node: str
    up: bool

    def publish(
        self, queue: RemoteQueue, message: Message, confirm: bool
    ) -> Completion[bool] | None:
        raise NotImplementedError

    def consume(self, queue: RemoteQueue, consumer: Consumer) -> None:
        raise NotImplementedError

    def answer(self, queue: RemoteQueue, consumer: Consumer) -> Completion[None] | None:
        raise NotImplementedError

    def release(self, queue: RemoteQueue, consumer: Consumer) -> None:
        raise NotImplementedError

    def credit(self, queue: RemoteQueue, consumer: Consumer) -> None:
        raise NotImplementedError

    def drain(self, queue: RemoteQueue, consumer: Consumer) -> Completion[None] | None:
        raise NotImplementedError

    def cancel(self, queue: RemoteQueue, consumer: Consumer) -> None:
        raise NotImplementedError

    def caught_up(self, queue: RemoteQueue) -> Completion[None] | None:
        raise NotImplementedError

    def settle(self, kind: int, entries: Iterable[QueuedMessage]) -> None:
        raise NotImplementedError

    def accept(self, entry: QueuedMessage) -> None:
        """One delivery acked (``settle(ACCEPT, (entry,))``, the path every ack of a
        consumer takes: ``Peer`` writes it without the tuple and the loop)."""
        self.settle(ACCEPT, (entry,))

    def get(
        self, queue: RemoteQueue, auto_settle: bool
    ) -> Completion[tuple[QueuedMessage | None, int]]:
        raise NotImplementedError

    def acquire(
        self, queue: RemoteQueue, entry: QueuedMessage
    ) -> Completion[tuple[QueuedMessage | None, int]] | None:
        raise NotImplementedError

    def inspect(self, queue: RemoteQueue, purge: bool) -> Completion[tuple[int, int]]:
        raise NotImplementedError

    def stats(self, queue: RemoteQueue) -> Completion[tuple[int, int, int]]:
        raise NotImplementedError

    def store_offset(self, queue: RemoteQueue, reference: str, offset: int) -> None:
        raise NotImplementedError

    def query_offset(self, queue: RemoteQueue, reference: str) -> Completion[int | None]:
        raise NotImplementedError

    def backlogged(self) -> bool:
        raise NotImplementedError

    def room(self, behind: bool) -> Completion[None] | None:
        raise NotImplementedError

    def dropped(self, queue: RemoteQueue) -> None:
        raise NotImplementedError


class RemoteQueue(Queue):
    """A queue whose leader is another node; see the module docstring."""

    forwards = True

    def __init__(
        self,
        leader: LinkLeader,
        host: QueueHost,
        name: str,
        *,
        durable: bool,
        auto_delete: bool,
        exclusive: bool,
        arguments: Mapping[str, object] | None,
        config: QueueConfig,
    ) -> None:
        super().__init__(
            host.name,
            name,
            type_of(arguments, queue=name, vhost=host.name),
            durable=durable,
            exclusive_owner=ELSEWHERE if exclusive else None,
            auto_delete=auto_delete,
            arguments=arguments,
            gauge=host.gauge,
            config=config,
            host=host,
            timers=host.timers,
        )
        self.leader = leader
        # The leader said its consumers do not keep up (publishers feeding it are paced).
        self.behind = False
        # A replicated queue (its members elect another leader when this one is down).
        self.replicated = False

    def down(self) -> NotFound:
        kind = "durable" if self.durable else "transient"
        return NotFound(
            f"home node '{self.leader.node}' of {kind} queue '{self.name}' in vhost "
            f"'{self.vhost_name}' is down or inaccessible"
        )

    def available(self) -> bool:
        # A replicated queue's publish is nacked while no leader is up (Peer.publish),
        # as RabbitMQ's quorum queues refuse what they cannot commit.
        return self.leader.up or self.replicated

    def reachable(self) -> None:
        if not self.leader.up:
            raise self.down()

    # -- stats: the leader's; this node knows its own consumers only --------------------

    @property
    def message_count(self) -> int:
        return 0

    # -- publishing -----------------------------------------------------------------------

    def enqueue(self, message: Message) -> bool:
        self.leader.publish(self, message, False)
        return True

    def forward(self, message: Message, confirm: bool) -> Completion[bool] | None:
        self.n_publish += 1
        return self.leader.publish(self, message, confirm)

    def falling_behind(self) -> bool:
        if self.behind:
            return True
        return self.leader.backlogged()

    def room(self) -> Completion[None] | None:
        return self.leader.room(self.behind)

    # -- consumers ------------------------------------------------------------------------

    def consumer(
        self,
        tag: str,
        owner: ConsumerOwner,
        *,
        auto_settle: bool,
        exclusive: bool = False,
        credit: int = UNLIMITED,
        arguments: Mapping[str, object] | None = None,
        priority: int = 0,
        timeout: float | None = None,
    ) -> Consumer:
        if self.type.name == "stream":
            # The leader's check of where a stream consumer starts, made here too: the
            # client gets its 406 at basic.consume, as on one node, not a basic.cancel
            # once the leader has refused it.
            spec = parse_offset_spec(
                arguments, where=f"for {self.resource}", wall_ms=int(self.timers.wall * 1000)
            )
            if not auto_settle:
                # A stream consumer, which the link moves on to the offset after each
                # delivery (``Peer._deliver``): when the stream's leader changes, it
                # resumes there, at the new leader or in this node's own copy.
                return StreamConsumer(
                    tag,
                    self,
                    owner,
                    spec=spec,
                    credit=credit,
                    exclusive=exclusive,
                    arguments=arguments,
                    priority=priority,
                    timeout=timeout,
                )
        return super().consumer(
            tag,
            owner,
            auto_settle=auto_settle,
            exclusive=exclusive,
            credit=credit,
            arguments=arguments,
            priority=priority,
            timeout=timeout,
        )

    def has_exclusive_consumer(self) -> bool:
        # A browsing consumer (``Consumer.browses``) holds nothing, as a browser on one node.
        return any(c.exclusive and not c.browses for c in self.consumers)

    def check_exclusive_use(self, exclusive: bool) -> None:
        if self.has_exclusive_consumer() or (
            exclusive and any(not c.browses for c in self.consumers)
        ):
            raise AccessRefused(f"{self.resource} in exclusive use")

    def add_consumer(self, consumer: Consumer) -> None:
        self.reachable()
        self.check_exclusive_use(consumer.exclusive)
        self.consumers.append(consumer)
        self.leader.consume(self, consumer)

    def answer(self, consumer: Consumer) -> Completion[None] | None:
        """The leader's answer to ``consumer``'s consume (``add_consumer``), when it has not
        come yet: done once the leader accepted it, failed with its refusal (403 for an
        exclusive use, as one node answers) or with the node's loss. Until it is done the
        consumer gets nothing, until ``release``; an owner that waits for it is not told of
        a refusal by ``consumer_removed``."""
        return self.leader.answer(self, consumer)

    def release(self, consumer: Consumer) -> None:
        """The owner told its client the consume is on (after ``answer``): deliver."""
        self.leader.release(self, consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self._detach(consumer) >= 0:
            self.leader.cancel(self, consumer)

    def withdrawn(self, consumer: Consumer) -> Completion[None] | None:
        """Done once the leader has handled what this node sent it up to now, the
        consumer's cancel with it (``LinkLeader.caught_up``); None while the link is
        down (the leader lost this node's consumers with it)."""
        return self.leader.caught_up(self)

    def dispatch(self) -> None:
        """Credit came back: the link tells the leader what each consumer may take."""
        leader = self.leader
        for consumer in self.consumers:
            leader.credit(self, consumer)

    def drain(self, consumer: Consumer) -> Completion[None] | None:
        """The leader delivers what it holds up to ``consumer``'s credit and answers; done
        then, with those deliveries handed (None: nothing to ask, the link is down)."""
        return self.leader.drain(self, consumer)

    # -- taking and settling --------------------------------------------------------------

    def get(self, *, auto_settle: bool) -> QueuedMessage | None:
        raise self.unsupported("a synchronous get")

    def fetch(self, *, auto_settle: bool) -> Completion[tuple[QueuedMessage | None, int]]:
        self.reachable()
        return self.leader.get(self, auto_settle)

    def inspect(self, *, purge: bool) -> Completion[tuple[int, int]]:
        self.reachable()
        return self.leader.inspect(self, purge)

    def stats(self) -> Completion[tuple[int, int, int]]:
        """The counters at the leader (ready, unacknowledged, consumers): a look, not a
        use (``inspect`` is a declaration's)."""
        return self.leader.stats(self)

    def store_offset(self, reference: str, offset: int) -> None:
        """A stream's consumer offset, kept by the leader's log (the stream protocol's
        store_offset through this node)."""
        self.leader.store_offset(self, reference, offset)

    def query_offset(self, reference: str) -> Completion[int | None]:
        """The consumer offset the leader's log keeps for ``reference`` (None: none)."""
        return self.leader.query_offset(self, reference)

    def deletion_counts(self) -> Completion[tuple[int, int]]:
        """The leader's messages and consumers for a deletion through this node (what its
        count, ``if-unused`` and ``if-empty`` are about), where the leader's "no queue" (an
        auto-delete queue that went with its last consumer, a cancel just before) counts
        as empty: as on one node, deleting a queue that is gone succeeds with 0. A leader
        that is down still answers its 404."""
        answer: Completion[tuple[int, int]] = Completion()

        def settled(done: Completion[tuple[int, int]]) -> None:
            try:
                answer.resolve(done.result())
            except NotFound as exc:
                if self.leader.up:
                    answer.resolve((0, 0))
                else:
                    answer.fail(exc)
            except AMQPError as exc:
                answer.fail(exc)

        self.inspect(purge=False).on_done(settled)
        return answer

    def peek(self, limit: int) -> Completion[list[QueuedMessage]]:
        """The first ``limit`` ready messages at the leader, oldest first, none taken: a
        browsing consumer (``Consumer.browses``) of ``limit`` credit for one drain, then
        cancelled (AMQP/Fast's QUERY and BROWSE of a queue led by another node)."""
        self.reachable()
        seen: list[QueuedMessage] = []
        done: Completion[list[QueuedMessage]] = Completion()

        def finish(error: BaseException | None = None) -> None:
            if done.done:
                return
            if consumer in self.consumers:
                self.remove_consumer(consumer)
            if error is not None:
                done.fail(error)
            else:
                done.resolve(seen[:limit])

        def drain() -> None:
            drained = self.drain(consumer)
            if drained is None:
                finish(self.down())
            else:
                drained.on_done(lambda _drained: finish())

        def answered(answer: Completion[None]) -> None:
            if answer.error is not None:
                finish(answer.error)
                return
            self.release(consumer)
            drain()

        # Unsettled, as a 0-10 browser's: a leader that predates browsing holds what it
        # sends (given back at the cancel) rather than taking it.
        consumer = Consumer(
            f"leveret.peek-{id(done):x}",
            self,
            CallbackOwner(lambda _c, entry: seen.append(entry), lambda _c: finish()),
            auto_settle=False,
            exclusive=False,
            credit=max(limit, 1),
            browses=True,
        )
        self.add_consumer(consumer)
        answer = self.answer(consumer)
        if answer is None:
            drain()
        else:
            answer.on_done(answered)
        return done

    def purge(self) -> int:
        raise self.unsupported("a synchronous purge")

    def browse_after(self, seq: int, limit: int) -> list[QueuedMessage]:
        """None here: a 0-10 browser of this queue is a browsing consumer
        (``Consumer.browses``), which the leader sends copies of what it holds."""
        return []

    def acquire(self, entry: QueuedMessage) -> QueuedMessage | None:
        """Not at once: the leader holds it (``claim``)."""
        return None

    def claim(self, entry: QueuedMessage) -> Completion[QueuedMessage | None]:
        """The leader takes the message a browsing consumer was sent, if it is still
        ready there: done with this node's entry for it (settled through the link as a
        delivery is), or None (gone, taken, the link lost)."""
        done: Completion[QueuedMessage | None] = Completion()
        asked = self.leader.acquire(self, entry)
        if asked is None:
            done.resolve(None)
        else:
            asked.on_done(lambda a: done.resolve(None if a.error is not None else a.result()[0]))
        return done

    def settle(self, entry: QueuedMessage) -> None:
        self.n_ack += 1
        self.leader.accept(entry)

    def discard(self, entry: QueuedMessage, reason: str = REJECTED) -> None:
        self.leader.settle(REJECT, (entry,))

    def requeue(self, entries: Iterable[QueuedMessage], redelivered: bool = True) -> None:
        self.leader.settle(REQUEUE, entries)

    def amend(
        self, entry: QueuedMessage, headers: Mapping[str, object] | None, failed: bool
    ) -> None:
        return None  # the leader's copy is the one that counts (not carried yet)

    # -- the whole queue ------------------------------------------------------------------

    def on_delete(self) -> None:
        self.leader.dropped(self)
