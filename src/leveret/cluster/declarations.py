"""The front ends' declarations on a cluster node, written to etcd before they are answered
(``model.shared_metadata.SharedMetadata`` for one vhost).

A 0-9-1 ``queue.declare`` of a queue this node does not know yet goes to the store's
``declare_queue`` (its leader chosen by its locator, the comparison of revisions deciding
between concurrent declarations), and so do ``exchange.declare`` and the bindings; the
client's channel waits meanwhile (the shell's deferral). Once etcd has the record and this
node's model has applied it, the front end declares on the model as on one node, which
finds the entity there: a queue led here, or the proxy of one led elsewhere. The other
front ends' declarations (1.0's management requests and links, 0-10's, AMQP/Fast's, the
stream protocol's streams) go the same way, and so do unbinds, exchange deletions and the
stream protocol's super streams (``create_super_stream``: exchange, partitions, bindings).

An exclusive queue is led by its owner's node whatever its locator says, and its record
names its owner by a token unique in the cluster (``owner_token``): the record comes
first, then the front end makes the queue in the model with its owner (a connection; a
0-10 session, which outlives a connection it is detached from) as the exclusive owner (the
applier leaves an exclusive record of this node to the model); an owner that ends before
its front end made the queue (a lost connection drops that continuation) has the record
removed (``owner_gone``). Every other node holds its proxy, which refuses every
connection (405), and its bindings are in etcd like any others, so an auto-delete
exchange goes with its last binding whichever node's queue that was. Errors are the
model's (403, 404, 405, 406 as the store raises them); a store that cannot be reached
closes the connection with 541 and says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.auth.users import AdminError
from leveret.errors import AMQPError, InternalError, NotFound, PreconditionFailed
from leveret.model import super_stream
from leveret.model.completion import Completion
from leveret.server.awaiting import settled

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping, Sequence

    from leveret.cluster.metadata import MetadataStore
    from leveret.model.queues.base import Queue
    from leveret.model.vhost import VirtualHost

log = logging.getLogger("leveret.cluster")

T = TypeVar("T")

# Seconds a declaration waits for the node chosen to lead the queue to have it.
LEADER_CATCH_UP = 5.0


class SharedDeclarations:
    """``SharedMetadata`` of ``vhost`` on this node: its declarations through ``store``."""

    def __init__(
        self,
        vhost: VirtualHost,
        store: MetadataStore,
        spawn: Callable[[Coroutine[Any, Any, Any]], object],
    ) -> None:
        self.vhost = vhost
        self.store = store
        self.spawn = spawn
        # Each exclusive owner's token (``owner_token``), while the owner lives.
        self._tokens: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
        # The removal of each queue's record this node started (a queue deleted here): a
        # declaration of the same name waits for it, so a delete and a declare in a row
        # reach etcd in that order.
        self._removals: dict[str, asyncio.Task[Any]] = {}
        # The exclusive queues each live owner's declarations wrote (by token), and the
        # owners' declarations still being written, with whether the owner has ended
        # meanwhile: a record written for an owner that ended before its front end made
        # the queue (a lost connection drops the continuation) is removed (``owner_gone``).
        self._declared: dict[str, set[str]] = {}
        self._writing: dict[str, int] = {}
        self._ended: set[str] = set()

    def removing(self, name: str, removal: asyncio.Task[Any]) -> None:
        self._removals[name] = removal

        def done(_task: asyncio.Task[Any]) -> None:
            if self._removals.get(name) is removal:
                del self._removals[name]

        removal.add_done_callback(done)

    def owner_token(self, owner: object) -> str:
        """``owner``'s name in the cluster's records: this node's name and a random part
        (an exclusive queue's record compares it, never the object)."""
        try:
            return self._tokens[owner]
        except KeyError:
            token = f"{self.store.node}/{uuid.uuid4().hex}"
            self._tokens[owner] = token
            return token

    def declare_queue(
        self,
        name: str,
        *,
        generated_name: str,
        owner: object,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, object],
    ) -> Completion[bool] | None:
        server_named = not name
        name = name or generated_name
        key = self.store.layout.queue(self.vhost.name, name)

        token = self.owner_token(owner) if exclusive else None

        async def write() -> bool:
            removal = self._removals.get(name)
            if removal is not None:
                await asyncio.wait([removal])
            if token is not None:
                self._writing[token] = self._writing.get(token, 0) + 1
            try:
                record, made = await self.store.declare_queue(
                    self.vhost.name,
                    "" if server_named else name,
                    generated_name=generated_name,
                    durable=durable,
                    exclusive=exclusive,
                    auto_delete=auto_delete,
                    arguments=arguments,
                    owner=token,
                )
            finally:
                ended = token is not None and self._written(token)
            if record.exclusive:
                if made and token is not None:
                    if ended:
                        # Its owner ended meanwhile: nobody makes the queue.
                        await self.store.queue_removed(self.vhost.name, name)
                    else:
                        self._declared.setdefault(token, set()).add(name)
                return made  # the front end makes it (its owner owns it), or refuses
            if self.vhost.find_queue(name) is None:
                await self._applied(key)
            if record.leader != self.store.node:
                await self._led_there(name)
            return made

        return self._run(write())

    def _written(self, token: str) -> bool:
        """One declaration of ``token``'s owner is written: whether the owner ended."""
        left = self._writing[token] - 1
        ended = token in self._ended
        if left:
            self._writing[token] = left
        else:
            del self._writing[token]
            self._ended.discard(token)
        return ended

    def owner_gone(self, owner: object) -> None:
        """``owner`` ended, its exclusive queues removed from the model (each record's
        removal started by it): the records of those its front end never made go too (its
        connection was lost while the record was written, so the continuation that makes
        the queue did not run), now or, for a record still being written, once it is."""
        token = self._tokens.get(owner)
        if token is None:
            return
        if token in self._writing:
            self._ended.add(token)
        vname, store = self.vhost.name, self.store
        for name in self._declared.pop(token, ()):
            record = store.applier.view.queues.get((vname, name))
            if record is None or record.owner != token or record.leader != store.node:
                continue  # gone already, or another queue of that name now
            if name in self.vhost.queues or name in self._removals:
                continue  # made (an auto-delete timeout's grace), or being removed
            removal = self.spawn(store.queue_removed(vname, name))
            if isinstance(removal, asyncio.Task):
                self.removing(name, removal)

    def released(self, queue: Queue) -> None:
        # (The write goes on its own: the queue's late removal, at least a second later,
        # compares the record this one writes.)
        self.spawn(self.store.exclusive_released(self.vhost.name, queue.name))

    def declare_exchange(
        self,
        name: str,
        type_name: str,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> Completion[None] | None:
        key = self.store.layout.exchange(self.vhost.name, name)

        async def write() -> None:
            await self.store.declare_exchange(
                self.vhost.name,
                name,
                type_name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
            if name not in self.vhost.exchanges:
                await self._applied(key)

        return self._run(write())

    def bind(
        self,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
        owner: object,
    ) -> Completion[None] | None:
        store = self.store
        token = self.owner_token(owner)
        key = store.binding_key(
            self.vhost.name, source, dest_kind, destination, routing_key, arguments
        )

        async def write() -> None:
            await store.bind(
                self.vhost.name,
                source,
                dest_kind,
                destination,
                routing_key,
                arguments,
                owner=token,
            )
            if key not in store.applier.entries:
                await self._applied(key)

        return self._run(write())

    def unbind(
        self,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> Completion[None] | None:
        store = self.store
        key = store.binding_key(
            self.vhost.name, source, dest_kind, destination, routing_key, arguments
        )
        if key not in store.applier.entries:
            return None  # not in etcd: this node's model alone has it, if anyone does

        async def write() -> None:
            await store.unbind(
                self.vhost.name, source, dest_kind, destination, routing_key, arguments
            )

        return self._run(write())

    def delete_exchange(self, name: str, *, if_unused: bool) -> Completion[None] | None:
        if self.store.layout.exchange(self.vhost.name, name) not in self.store.applier.entries:
            return None

        async def write() -> None:
            await self.store.delete_exchange(self.vhost.name, name, if_unused=if_unused)

        return self._run(write())

    def delete_queue(self, queue: Queue) -> Completion[None] | None:
        """``queue`` (checked by the front end: ``VirtualHost.check_delete``) out of the
        store, with its bindings, comparing the incarnation this node's copy knows; done
        once etcd and this node's model have lost it and, when another node leads it, that
        node has too (its passive declarations then get 404 as this node's do). None when
        etcd has no record of it (a queue this node's model alone holds): the model's
        deletion alone."""
        store, vname, name = self.store, self.vhost.name, queue.name
        entry = store.applier.entries.get(store.layout.queue(vname, name))
        if entry is None:
            return None
        incarnation = entry.create_revision

        async def write() -> None:
            await store.delete_queue(vname, name, incarnation=incarnation)
            if queue.forwards:
                await self._gone_there(queue)

        return self._run(write())

    def create_super_stream(
        self,
        name: str,
        streams: Sequence[str],
        binding_keys: Sequence[str],
        arguments: Mapping[str, object],
        owner: object | None,
    ) -> Completion[bool]:
        """Super stream ``name`` into the store (the module docstring); done with whether
        this call made it. ``owner``: the creating connection, None for ``leveret ctl``."""
        store, vname = self.store, self.vhost.name
        token = self.owner_token(owner) if owner is not None else None
        queue_arguments = super_stream.partition_arguments(arguments)

        async def write() -> bool:
            # The exchange decides between concurrent creations: put-if-absent, so one
            # makes it and the others find it (an exchange of the name that is not a super
            # stream's is there already as well).
            try:
                made = await store.declare_exchange(
                    vname,
                    name,
                    "direct",
                    durable=True,
                    arguments=super_stream.exchange_arguments(),
                )
            except PreconditionFailed:
                return False
            if not made:
                return False
            leaders: list[tuple[str, str]] = []
            try:
                for stream in streams:
                    record, made = await store.declare_queue(
                        vname,
                        stream,
                        generated_name=stream,
                        durable=True,
                        exclusive=False,
                        auto_delete=False,
                        arguments=queue_arguments,
                    )
                    if not made:
                        raise super_stream.AlreadyExists(f"there is already a queue named {stream}")
                    leaders.append((stream, record.leader))
                for index, (stream, key) in enumerate(zip(streams, binding_keys, strict=True)):
                    await store.bind(
                        vname,
                        name,
                        "queue",
                        stream,
                        key,
                        super_stream.binding_arguments(index),
                        owner=token,
                    )
            except (AMQPError, AdminError):
                # As the model's create: nothing made here is left.
                for stream, _leader in leaders:
                    await store.delete_queue(vname, stream)
                await store.delete_exchange(vname, name)
                raise
            # (Written in turn: this node's copy has all once it has etcd's state of now.)
            await self._applied(store.layout.exchange(vname, name))
            for stream, leader in leaders:
                if leader != store.node:
                    await self._led_there(stream)
            return True

        return self._run(write())

    def delete_super_stream(self, name: str, partitions: Sequence[Queue]) -> Completion[None]:
        """Super stream ``name`` out of the store: its exchange (with its bindings), then
        its ``partitions`` (``super_stream.members``, this node's copy of them), each
        comparing the incarnation this node knows; done once etcd and this node's model
        have lost them and the nodes leading them have too. The exchange's deletion
        compares its incarnation too, so of two nodes' concurrent deletions one wins and
        the other fails with NotFound (a super stream that does not exist), deleting
        nothing."""
        store, vname = self.store, self.vhost.name
        exchange = store.applier.entries.get(store.layout.exchange(vname, name))
        # None: a record not written yet (the journal's, behind a ctl creation).
        made_at = exchange.create_revision if exchange is not None else None
        incarnations = []
        for queue in partitions:
            entry = store.applier.entries.get(store.layout.queue(vname, queue.name))
            if entry is not None:
                incarnations.append((queue, entry.create_revision))

        async def write() -> None:
            await store.delete_exchange(vname, name, incarnation=made_at)
            for queue, incarnation in incarnations:
                await store.delete_queue(vname, queue.name, incarnation=incarnation)
            for queue, _incarnation in incarnations:
                if queue.forwards:
                    await self._gone_there(queue)

        return self._run(write())

    async def _led_there(self, name: str) -> None:
        """Until the node chosen to lead queue ``name`` has it: that node learns of the
        record from its own watch, and the client may use the queue (through this node's
        proxy) as soon as it is answered."""
        deadline = time.monotonic() + LEADER_CATCH_UP
        while True:
            proxy = self.vhost.find_queue(name)
            if proxy is None or not proxy.forwards:
                return
            asked = proxy.inspect(purge=False)
            await settled(asked)
            if asked.error is None or time.monotonic() > deadline:
                return  # (an error past the deadline is the client's to see)
            if not isinstance(asked.error, NotFound):
                return
            await asyncio.sleep(0.02)

    async def _gone_there(self, proxy: Queue) -> None:
        """Until the node that led ``proxy``'s queue has removed it (its watch brings the
        deletion): asked through the proxy this node's copy has just dropped."""
        deadline = time.monotonic() + LEADER_CATCH_UP
        while True:
            asked = proxy.inspect(purge=False)
            await settled(asked)
            if asked.error is not None or time.monotonic() > deadline:
                return  # 404 (gone), or its leader is down (it removes it when back)
            await asyncio.sleep(0.02)

    async def _applied(self, key: bytes) -> None:
        """Until this node's copy has applied etcd's state of ``key`` as it is now (a
        record another node wrote, which the store found rather than made)."""
        found = await self.store.client.get(key)
        await self.store.wait_applied(found.revision)

    def _run(self, write: Coroutine[Any, Any, T]) -> Completion[T]:
        done: Completion[T] = Completion()

        async def run() -> None:
            try:
                result = await write
            except AMQPError as exc:
                done.fail(exc)
            except AdminError as exc:
                log.warning("a declaration could not be written to etcd: %s", exc)
                done.fail(InternalError(str(exc)))
            except Exception as exc:
                done.fail(InternalError(f"the declaration failed: {exc}"))
                raise
            else:
                done.resolve(result)

        self.spawn(run())
        return done
