"""The cluster's metadata store: what every node agrees on, kept in etcd, written with
transactions and applied by every node from a watch (``cluster/apply.py``).

Reading: :meth:`MetadataStore.load` reads everything under the cluster's prefix at one
revision; :meth:`MetadataStore.watch` then applies every change from the next revision on,
watching again from where it was when the stream breaks (etcd restarted, a partition) and
reading everything again when etcd has compacted past that point.

Writing: each change is one transaction whose comparisons make concurrent writers agree:

- the auth registry and the runtime parameters: the change is made on a scratch copy
  (``documents.py``) and written with a comparison of the area's ``lock`` key, which
  every such change rewrites: of two changes made from the same state one fails, reads
  the newer state and is made again (up to ``ATTEMPTS`` times);
- a declaration: put-if-absent of the entity's key, comparing that its vhost exists; if
  the key exists, the transaction reads it instead, and the declaration gets what a
  redeclaration gets (ok when equivalent, 406 or 405 when not), checked by the model's own
  code on a scratch vhost;
- a deletion: compares the entity's create revision (the incarnation that was read), and,
  when it removes bindings that were read, that no binding of the vhost changed since;
- what a node writes because it leads a queue (its queue retiring: x-expires,
  auto-delete, its exclusive owner gone; an exclusive queue outliving its owner for a
  while, anyone's meanwhile): compares the node's lease as well
  (``lease_is``), so a node that lost its lease cannot write on the strength of it.

A writer applies its own accepted transaction to its copy at once (the API caller sees it;
the watch reports it again, a no-op by revision). The front ends will call these methods
through the shell's deferral (a declare answered when the transaction is); the management
API and ``leveret ctl`` call them now (``cluster/node.py`` wires them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from leveret.auth.users import AdminError, UserStore
from leveret.cluster import documents
from leveret.cluster.apply import Applier, QueueRecord, declare_recorded_queue
from leveret.cluster.etcd import (
    Compacted,
    Compare,
    Delete,
    EtcdClient,
    EtcdError,
    EtcdUnavailable,
    Get,
    Op,
    Put,
    RangeResult,
    absent,
    created_at,
    exists,
    lease_is,
    mod_is,
    prefix_end,
)
from leveret.cluster.keys import Layout, binding_digest, decode, encode, encode_arguments
from leveret.cluster.placement import (
    CLIENT_LOCAL,
    BadLocator,
    choose_leader,
    choose_members,
    group_size,
    locator,
)
from leveret.errors import AccessRefused, NotFound, PreconditionFailed
from leveret.model.policies import effective_definition, select
from leveret.model.vhost import STANDARD_EXCHANGES, VirtualHost, new_queue_name

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping, Sequence

    from leveret.cluster.etcd import KeyValue
    from leveret.cluster.membership import Membership
    from leveret.server.parameters import Runtime

log = logging.getLogger("leveret.cluster")

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

# Tries of one change when concurrent writers keep winning.
ATTEMPTS = 8
# etcd refuses transactions of more operations (its --max-txn-ops default is 128).
MAX_TXN_OPS = 100
# Seconds a writer whose comparison failed waits for its watch to bring the newer state.
CATCH_UP = 5.0
_PREDECLARED = frozenset(name for name, _type in STANDARD_EXCHANGES)


class Conflict(AdminError):
    """A change lost to concurrent ones ``ATTEMPTS`` times in a row."""


class ClusterUnavailable(AdminError):
    """etcd did not answer: the change was not made (``leveret ctl`` exits 69, the HTTP
    API answers 503)."""

    exit_code = 69
    http_status = 503


def _available(
    method: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """etcd's unavailability as the admin error callers already handle."""

    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except EtcdError as exc:
            raise ClusterUnavailable(
                f"the cluster's metadata store is unavailable: {exc}"
            ) from None

    return call


@dataclass
class MetadataStore:
    client: EtcdClient
    applier: Applier
    membership: Membership | None = None
    _applied: asyncio.Condition = field(default_factory=asyncio.Condition, init=False)
    _watch_task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    # Seconds between tries to watch again after the stream broke (doubles, bounded).
    retry_delay: float = 0.2

    @property
    def layout(self) -> Layout:
        return self.applier.layout

    @property
    def node(self) -> str:
        return self.applier.node

    # -- reading -------------------------------------------------------------------------

    async def read_all(self) -> RangeResult:
        return await self.client.get_prefix(self.layout.root)

    async def load(self) -> int:
        """Make the copy what etcd holds now; the revision read."""
        result = await self.read_all()
        self.applier.load_snapshot(result.kvs, result.revision)
        await self._notify()
        return result.revision

    def start_watch(self) -> None:
        self._watch_task = asyncio.create_task(self.watch(), name="leveret-cluster-watch")

    async def stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)
            self._watch_task = None

    async def watch(self) -> None:
        root = self.layout.root
        delay = self.retry_delay
        while True:
            try:
                async for batch in self.client.watch(
                    root, prefix_end(root), start_revision=self.applier.revision + 1
                ):
                    self.applier.apply_events(
                        [(e.deleted, e.kv) for e in batch.events], batch.revision
                    )
                    delay = self.retry_delay
                    await self._notify()
            except Compacted as exc:
                log.warning("the watch fell behind etcd's compaction (%s): reading everything", exc)
                await self._reload()
            except EtcdError as exc:
                log.warning("etcd watch interrupted (%s); watching again in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _reload(self) -> None:
        while True:
            try:
                await self.load()
                return
            except EtcdError as exc:
                log.warning("cannot read etcd (%s); trying again", exc)
                await asyncio.sleep(1.0)

    async def _notify(self) -> None:
        async with self._applied:
            self._applied.notify_all()

    async def wait_applied(self, revision: int) -> None:
        """Until the copy has applied every change up to ``revision`` (read again after
        ``CATCH_UP`` seconds if the watch has not got there)."""
        try:
            async with asyncio.timeout(CATCH_UP), self._applied:
                await self._applied.wait_for(lambda: self.applier.revision >= revision)
        except TimeoutError:
            await self.load()

    async def _commit(
        self, compare: Sequence[Compare], puts: Mapping[bytes, bytes], deletes: Sequence[bytes]
    ) -> int | None:
        """One transaction; applied to the copy when etcd accepts it. The revision, or
        None when a comparison failed (then the copy is brought up to date)."""
        ops: list[Op] = [Put(k, v) for k, v in puts.items()]
        ops += [Delete(k, prefix_end(k)) if k.endswith(b"/") else Delete(k) for k in deletes]
        result = await self.client.txn(compare, ops)
        if not result.succeeded:
            await self.wait_applied(result.revision)
            return None
        self.applier.apply_written(puts.items(), deletes, result.revision)
        await self._notify()
        return result.revision

    # -- the auth registry and the runtime parameters ------------------------------------

    @_available
    async def change_auth(self, change: Callable[[UserStore], T]) -> T:
        """Make ``change`` to the auth registry (users, vhosts, permissions, topic
        permissions, limits) as etcd holds it; its errors are the single node's. A vhost it
        deletes takes its parameters, policies, exchanges, queues and bindings along."""
        for _attempt in range(ATTEMPTS):
            users = documents.scratch_users(self.applier)
            before = documents.current(self.applier, "auth")
            result = change(users)
            after = documents.entries(self.layout, "auth", documents.auth_document(users))
            puts, deletes = documents.diff(before, after)
            gone = set(self.applier.users.vhosts) - set(users.vhosts)
            for vhost in sorted(gone):
                deletes += self._vhost_contents(vhost)
            if await self._locked("auth", puts, deletes) is not None:
                return result
        raise Conflict("the change kept losing to concurrent changes: try again")

    def _vhost_contents(self, vhost: str) -> list[bytes]:
        layout = self.layout
        return [
            layout.under("runtime", "policies", vhost),
            layout.under("runtime", "operator_policies", vhost),
            layout.under("runtime", "parameters", vhost),
            layout.under("entities", "exchanges", vhost),
            layout.under("entities", "queues", vhost),
            layout.under("entities", "bindings", vhost),
        ]

    @_available
    async def change_runtime(self, change: Callable[[Runtime], T]) -> T:
        """Make ``change`` to the policies, operator policies and parameters."""
        for _attempt in range(ATTEMPTS):
            runtime = documents.scratch_runtime(self.applier)
            before = documents.current(self.applier, "runtime")
            result = change(runtime)
            after = documents.entries(self.layout, "runtime", runtime.snapshot())
            puts, deletes = documents.diff(before, after)
            if await self._locked("runtime", puts, deletes) is not None:
                return result
        raise Conflict("the change kept losing to concurrent changes: try again")

    async def _locked(
        self, area: str, puts: dict[bytes, bytes], deletes: list[bytes]
    ) -> int | None:
        lock = self.layout.lock(area)
        known = self.applier.entries.get(lock)
        guard = absent(lock) if known is None else mod_is(lock, known.mod_revision)
        if not puts and not deletes:
            return self.applier.revision
        puts[lock] = encode({"node": self.node, "at": time.time()})
        return await self._commit([guard], puts, deletes)

    # -- exchanges -----------------------------------------------------------------------

    def _vhost_key(self, vhost: str) -> bytes:
        return self.layout.key("auth", "vhosts", vhost)

    @_available
    async def declare_exchange(
        self,
        vhost: str,
        name: str,
        type_name: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, object] | None = None,
    ) -> bool:
        """Declare an exchange; True if this call made it. The model's errors: 403 for a
        reserved name, 406 for a redeclaration that is not equivalent, ``KeyError`` for an
        unknown type, ``NotFound`` for a vhost that does not exist."""
        args = dict(arguments or {})
        scratch = VirtualHost(vhost)
        if name in _PREDECLARED or name == "":
            scratch.declare_exchange(
                name,
                type_name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=args,
            )
            return False
        scratch.declare_exchange(
            name,
            type_name,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=args,
        )
        key = self.layout.exchange(vhost, name)
        value = encode(
            {
                "type": type_name,
                "durable": durable,
                "auto_delete": auto_delete,
                "internal": internal,
                "arguments": encode_arguments(args),
            }
        )
        vhost_key = self._vhost_key(vhost)
        result = await self.client.txn(
            [exists(vhost_key), absent(key)], [Put(key, value)], [Get(vhost_key), Get(key)]
        )
        if result.succeeded:
            self.applier.apply_written([(key, value)], [], result.revision)
            await self._notify()
            return True
        found_vhost, found = self._found(result.ranges)
        if not found_vhost:
            raise NotFound(f"no vhost '{vhost}'")
        assert found is not None
        current = decode(found.value)
        check = VirtualHost(vhost)
        check.declare_exchange(
            name,
            str(current["type"]),
            durable=bool(current.get("durable", True)),
            auto_delete=bool(current.get("auto_delete", False)),
            internal=bool(current.get("internal", False)),
            arguments=_arguments(current),
        )
        check.declare_exchange(
            name,
            type_name,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=args,
        )
        return False

    @staticmethod
    def _found(ranges: list[RangeResult | None]) -> tuple[bool, KeyValue | None]:
        first, second = ranges[0], ranges[1]
        vhost = first is not None and bool(first.kvs)
        kv = second.kvs[0] if second is not None and second.kvs else None
        return vhost, kv

    async def _bindings(self, vhost: str) -> tuple[int, list[tuple[bytes, dict[str, Any]]]]:
        marker = self.layout.under("entities", "bindings", vhost)
        result = await self.client.get_prefix(marker)
        return result.revision, [(kv.key, decode(kv.value)) for kv in result.kvs]

    @_available
    async def delete_exchange(
        self, vhost: str, name: str, *, if_unused: bool = False, incarnation: int | None = None
    ) -> None:
        """Delete an exchange and every binding from or to it (RabbitMQ: deleting one
        that does not exist succeeds); 403 for the default and ``amq.*`` exchanges, 406
        with ``if_unused`` when it has bindings. ``incarnation``: the create revision of
        the exchange the caller checked (a super stream's deletion); NotFound when that
        one is gone (another node's concurrent deletion won) or was made again meanwhile,
        which the transaction's compare on its create revision decides."""
        VirtualHost(vhost).delete_exchange(name)  # the model's refusals, by the model
        key = self.layout.exchange(vhost, name)
        for _attempt in range(ATTEMPTS):
            found = await self.client.get(key)
            if incarnation is not None and (
                not found.kvs or found.kvs[0].create_revision != incarnation
            ):
                raise NotFound(f"no exchange '{name}' in vhost '{vhost}'")
            if not found.kvs:
                return
            revision, bindings = await self._bindings(vhost)
            out = [b for b in bindings if b[1].get("source") == name]
            if if_unused and out:
                raise PreconditionFailed(f"exchange '{name}' in vhost '{vhost}' in use")
            into = [
                b
                for b in bindings
                if b[1].get("kind") == "exchange" and b[1].get("destination") == name
            ]
            deletes = [key] + [k for k, _v in out + into]
            deletes += self._auto_deleted(vhost, bindings, {k for k, _v in into})
            compare = [
                created_at(key, found.kvs[0].create_revision),
                self._unchanged(vhost, revision),
            ]
            if await self._commit(compare, {}, deletes) is not None:
                return
        raise Conflict("the deletion kept losing to concurrent changes: try again")

    def _unchanged(self, vhost: str, revision: int) -> Compare:
        """No binding of ``vhost`` was made or changed after ``revision``."""
        marker = self.layout.under("entities", "bindings", vhost)
        return Compare(marker, "MOD", "LESS", revision + 1, prefix_end(marker))

    def _auto_deleted(
        self, vhost: str, bindings: list[tuple[bytes, dict[str, Any]]], removed: set[bytes]
    ) -> list[bytes]:
        """Auto-delete exchanges left without bindings once ``removed`` go, and the
        bindings to them; and so on up the chain (an auto-delete exchange whose only
        binding was to one of those goes too), as RabbitMQ deletes an auto-delete
        exchange with its last binding, whatever removed it."""
        out: list[bytes] = []
        gone = set(removed)
        sources = {v.get("source") for k, v in bindings if k in gone}
        seen: set[str] = set()
        while sources:
            source = sources.pop()
            if not isinstance(source, str) or source in seen:
                continue
            seen.add(source)
            entry = self.applier.entries.get(self.layout.exchange(vhost, source))
            if entry is None or not entry.value.get("auto_delete"):
                continue
            if any(v.get("source") == source and k not in gone for k, v in bindings):
                continue
            out.append(self.layout.exchange(vhost, source))
            into = [
                (k, v)
                for k, v in bindings
                if v.get("kind") == "exchange" and v.get("destination") == source and k not in gone
            ]
            out += [k for k, _v in into]
            gone.update(k for k, _v in into)
            sources.update(v.get("source") for _k, v in into)
        return out

    # -- queues --------------------------------------------------------------------------

    def _policy_definition(
        self, vhost: str, name: str, arguments: Mapping[str, object]
    ) -> dict[str, object]:
        model = self.applier.broker.vhosts.get(vhost)
        if model is None:
            return {}
        queue_type = arguments.get("x-queue-type", "classic")
        kind = queue_type.decode() if isinstance(queue_type, bytes) else str(queue_type)
        policy = select(model.policies.values(), name, "queue", kind)
        operator = select(model.operator_policies.values(), name, "queue", kind)
        return effective_definition(policy, operator)

    @_available
    async def declare_queue(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool = True,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Mapping[str, object] | None = None,
        owner: str | None = None,
        client_node: str | None = None,
        generated_name: str = "",
    ) -> tuple[QueueRecord, bool]:
        """Declare a queue: its record and whether this call made it. Its leader is chosen
        by its locator (``placement.py``) among the running nodes, ``client_node`` (this
        node by default) being the declaring one. ``owner``: the connection of an
        exclusive queue (a token unique in the cluster). ``generated_name``: the name of a
        server-named queue (``name`` ""), made by the caller. The model's errors: 403 for a
        reserved name, 406 for invalid arguments or an inequivalent redeclaration, 405 for
        another connection's exclusive queue, ``NotFound`` for a missing vhost."""
        args = dict(arguments or {})
        server_named = not name
        name = name or generated_name or new_queue_name()
        owners: dict[str | None, object] = {None: None}

        def owner_of(token: str | None) -> object:
            return owners.setdefault(token, object())

        VirtualHost(vhost).declare_queue(
            "" if server_named else name,
            generated_name=name,
            owner=owner_of(owner),
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=args,
        )
        try:
            how = locator(args, self._policy_definition(vhost, name, args))
        except BadLocator as exc:
            raise PreconditionFailed(str(exc)) from None
        if exclusive:
            how = CLIENT_LOCAL  # its connection's node's, as in RabbitMQ
        here = client_node or self.node
        leader = choose_leader(how, here, self.applier.view.nodes, self.applier.view.leaders())
        record = self.with_members(
            QueueRecord(vhost, name, durable, auto_delete, exclusive, args, leader, owner)
        )
        key = self.layout.queue(vhost, name)
        value = encode(_queue_value(record))
        vhost_key = self._vhost_key(vhost)
        result = await self.client.txn(
            [exists(vhost_key), absent(key)], [Put(key, value)], [Get(vhost_key), Get(key)]
        )
        if result.succeeded:
            self.applier.apply_written([(key, value)], [], result.revision)
            await self._notify()
            return record, True
        found_vhost, found = self._found(result.ranges)
        if not found_vhost:
            raise NotFound(f"no vhost '{vhost}'")
        assert found is not None
        existing = QueueRecord.from_value(vhost, name, decode(found.value))
        check = VirtualHost(vhost)
        declare_recorded_queue(
            check,
            name,
            owner=owner_of(existing.owner),
            durable=existing.durable,
            exclusive=existing.exclusive,
            auto_delete=existing.auto_delete,
            arguments=existing.arguments,
        )
        declare_recorded_queue(
            check,
            name,
            owner=owner_of(owner),
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=args,
        )
        return existing, False

    @_available
    async def delete_queue(
        self,
        vhost: str,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        owner: str | None = None,
        incarnation: int | None = None,
    ) -> int:
        """Delete a queue and its bindings; the messages it held when its leader is this
        node (0 otherwise, and for a queue that does not exist). ``if_unused`` and
        ``if_empty`` are checked on the leader's copy: this node's queues only, until the
        inter-node link (406 otherwise rather than deleting what may not be empty).
        ``incarnation``: the create revision of the queue the caller checked (a front
        end's deletion); another incarnation (deleted and declared again meanwhile) is not
        that queue, and stays."""
        key = self.layout.queue(vhost, name)
        for _attempt in range(ATTEMPTS):
            found = await self.client.get(key)
            if not found.kvs:
                return 0
            if incarnation is not None and found.kvs[0].create_revision != incarnation:
                return 0
            record = QueueRecord.from_value(vhost, name, decode(found.kvs[0].value))
            if record.exclusive and record.owner != owner and owner is not None:
                check = VirtualHost(vhost)
                declare_recorded_queue(check, name, owner=object(), exclusive=True)
                check.queue(name, object())  # 405, with the model's text
            count = self._check_local(record, if_unused=if_unused, if_empty=if_empty)
            compare = [created_at(key, found.kvs[0].create_revision)]
            deletes = [key, self.layout.bindings_to(vhost, "q", name)]
            if self._has_auto_delete_source(vhost, name):
                revision, bindings = await self._bindings(vhost)
                prefix = self.layout.bindings_to(vhost, "q", name)
                mine = {k for k, _v in bindings if k.startswith(prefix)}
                deletes += self._auto_deleted(vhost, bindings, mine)
                compare.append(self._unchanged(vhost, revision))
            if await self._commit(compare, {}, deletes) is not None:
                return count
        raise Conflict("the deletion kept losing to concurrent changes: try again")

    def _check_local(self, record: QueueRecord, *, if_unused: bool, if_empty: bool) -> int:
        model = self.applier.broker.vhosts.get(record.vhost)
        queue = model.queues.get(record.name) if model is not None else None
        if queue is None:
            if if_unused or if_empty:
                raise PreconditionFailed(
                    f"queue '{record.name}' in vhost '{record.vhost}' is led by node "
                    f"'{record.leader}': if-unused and if-empty are checked on this node's "
                    "queues only"
                )
            return 0
        where = f"queue '{record.name}' in vhost '{record.vhost}'"
        if if_unused and queue.consumers:
            raise PreconditionFailed(f"{where} in use")
        if if_empty and queue.has_ready():
            raise PreconditionFailed(f"{where} is not empty")
        return int(queue.message_count)

    def _has_auto_delete_source(self, vhost: str, queue: str) -> bool:
        prefix = self.layout.bindings_to(vhost, "q", queue)
        for key, entry in self.applier.entries.items():
            if key.startswith(prefix):
                source = self.applier.entries.get(
                    self.layout.exchange(vhost, str(entry.value.get("source")))
                )
                if source is not None and source.value.get("auto_delete"):
                    return True
        return False

    async def queue_removed(self, vhost: str, name: str) -> bool:
        """This node removed a queue it leads (x-expires, auto-delete, its exclusive
        connection gone): remove its record and bindings, and the auto-delete exchanges
        that leaves without bindings, fenced by the node's lease and the record's
        revision. False when the write was refused (the record changed, or the node no
        longer holds its lease: then it is not this node's to remove)."""
        key = self.layout.queue(vhost, name)
        entry = self.applier.entries.get(key)
        if entry is None or entry.value.get("leader") != self.node:
            return False
        prefix = self.layout.bindings_to(vhost, "q", name)
        for _attempt in range(ATTEMPTS):
            compare = [mod_is(key, entry.mod_revision), *self._fence()]
            deletes = [key, prefix]
            if self._has_auto_delete_source(vhost, name):
                revision, bindings = await self._bindings(vhost)
                mine = {k for k, _v in bindings if k.startswith(prefix)}
                deletes += self._auto_deleted(vhost, bindings, mine)
                compare.append(self._unchanged(vhost, revision))
            if await self._commit(compare, {}, deletes) is not None:
                return True
            found = await self.client.get(key)
            if not found.kvs or found.kvs[0].mod_revision != entry.mod_revision:
                return False
            if self.membership is None or not self.membership.held:
                return False
            # Only a binding of the vhost changed meanwhile: read them again.
        return False

    async def exclusive_released(self, vhost: str, name: str) -> bool:
        """The exclusive queue ``name``, led here, outlives its owner for a while (Qpid's
        ``qpid.auto_delete_timeout`` after its 0-10 session ended, when this node's model
        lets any session use it): its record names no owner any more, so every node serves
        it to anyone until it goes. Fenced by the node's lease and the record's revision;
        False when the write was refused or there was nothing to release."""
        key = self.layout.queue(vhost, name)
        entry = self.applier.entries.get(key)
        if entry is None or entry.value.get("leader") != self.node:
            return False
        if not entry.value.get("exclusive"):
            return False
        value = {k: v for k, v in entry.value.items() if k != "owner"}
        value["exclusive"] = False
        compare = [mod_is(key, entry.mod_revision), *self._fence()]
        return await self._commit(compare, {key: encode(value)}, []) is not None

    async def exclusive_of_gone_node(self, node: str) -> int:
        """``node``'s lease expired (it died, or was cut off or paused past its lease): the
        exclusive queues it led went with their connections, so their records go, with
        their bindings and the auto-delete exchanges that leaves without any (RabbitMQ
        deletes a down node's exclusive queues). Fenced on ``node`` having no record, so
        a node that is back keeps what it holds; each queue's removal also compares its
        record, so nodes doing this at once remove each one once. How many went."""
        node_key = self.layout.node(node)
        removed = 0
        for record in list(self.applier.view.queues.values()):
            if record.leader != node or not record.exclusive:
                continue
            key = self.layout.queue(record.vhost, record.name)
            entry = self.applier.entries.get(key)
            if entry is None:
                continue
            prefix = self.layout.bindings_to(record.vhost, "q", record.name)
            compare = [absent(node_key), mod_is(key, entry.mod_revision)]
            deletes = [key, prefix]
            if self._has_auto_delete_source(record.vhost, record.name):
                revision, bindings = await self._bindings(record.vhost)
                mine = {k for k, _v in bindings if k.startswith(prefix)}
                deletes += self._auto_deleted(record.vhost, bindings, mine)
                compare.append(self._unchanged(record.vhost, revision))
            if await self._commit(compare, {}, deletes) is not None:
                removed += 1
        return removed

    def _fence(self) -> list[Compare]:
        membership = self.membership
        if membership is None or not membership.held:
            # Without a lease there is nothing this node may write as a role holder: a
            # comparison that cannot hold (a key both absent and present) fails the write.
            return [absent(self.layout.node(self.node)), exists(self.layout.node(self.node))]
        return [lease_is(self.layout.node(self.node), membership.lease)]

    # -- bindings ------------------------------------------------------------------------

    def binding_key(
        self,
        vhost: str,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> bytes:
        kind = "e" if dest_kind == "exchange" else "q"
        digest = binding_digest(routing_key, dict(arguments))
        return self.layout.binding(vhost, kind, destination, source, digest)

    @_available
    async def bind(
        self,
        vhost: str,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object] | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        """Bind ``destination`` (a queue or an exchange, ``dest_kind``) to ``source``.
        The model's errors: 404 for a missing end, 403 for the default exchange, 405 for
        another connection's exclusive queue, 406 for arguments the exchange refuses."""
        args = dict(arguments or {})
        layout = self.layout
        source_key = layout.exchange(vhost, source)
        dest_key = (
            layout.exchange(vhost, destination)
            if dest_kind == "exchange"
            else layout.queue(vhost, destination)
        )
        key = self.binding_key(vhost, source, dest_kind, destination, routing_key, args)
        value = encode(
            {
                "source": source,
                "destination": destination,
                "kind": dest_kind,
                "routing_key": routing_key,
                "arguments": encode_arguments(args),
            }
        )
        for _attempt in range(ATTEMPTS):
            read = await self.client.txn(
                [], [Get(self._vhost_key(vhost)), Get(source_key), Get(dest_key), Get(key)]
            )
            vhost_kv, source_kv, dest_kv, binding_kv = (
                r.kvs[0] if r is not None and r.kvs else None for r in read.ranges
            )
            if vhost_kv is None:
                raise NotFound(f"no vhost '{vhost}'")
            check = VirtualHost(vhost)
            owners: dict[str | None, object] = {None: None}
            self._scratch_exchange(check, source, source_kv)
            if dest_kind == "exchange":
                self._scratch_exchange(check, destination, dest_kv)
                check.bind_exchange(destination, source, routing_key, args)
            else:
                if dest_kv is not None:
                    record = QueueRecord.from_value(vhost, destination, decode(dest_kv.value))
                    # Of its real type and arguments: some exchange types refuse a
                    # queue type (x-local-random a quorum queue), as every node would.
                    declare_recorded_queue(
                        check,
                        destination,
                        owner=owners.setdefault(record.owner, object()),
                        durable=record.durable,
                        exclusive=record.exclusive,
                        auto_delete=record.auto_delete,
                        arguments=record.arguments,
                    )
                check.bind_queue(
                    destination,
                    source,
                    routing_key,
                    args,
                    owner=owners.setdefault(owner, object()),
                )
            if binding_kv is not None:
                return
            compare = [absent(key)]
            for ident, kv in ((source_key, source_kv), (dest_key, dest_kv)):
                if kv is not None:
                    compare.append(created_at(ident, kv.create_revision))
            if await self._commit(compare, {key: value}, []) is not None:
                return
        raise Conflict("the binding kept losing to concurrent changes: try again")

    @staticmethod
    def _scratch_exchange(vhost: VirtualHost, name: str, kv: KeyValue | None) -> None:
        if kv is None or name in vhost.exchanges:
            return  # missing: the model's own 404 follows (predeclared ones are there)
        value = decode(kv.value)
        vhost.declare_exchange(name, str(value["type"]), arguments=_arguments(value))

    @_available
    async def unbind(
        self,
        vhost: str,
        source: str,
        dest_kind: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object] | None = None,
    ) -> None:
        """Remove a binding (one that does not exist: nothing to do, as in RabbitMQ); an
        auto-delete source left without bindings goes with it."""
        if source == "" or (dest_kind == "exchange" and destination == ""):
            raise AccessRefused("operation not permitted on the default exchange")
        args = dict(arguments or {})
        key = self.binding_key(vhost, source, dest_kind, destination, routing_key, args)
        source_entry = self.applier.entries.get(self.layout.exchange(vhost, source))
        for _attempt in range(ATTEMPTS):
            compare = [exists(key)]
            deletes = [key]
            if source_entry is not None and source_entry.value.get("auto_delete"):
                revision, bindings = await self._bindings(vhost)
                deletes += self._auto_deleted(vhost, bindings, {key})
                compare.append(self._unchanged(vhost, revision))
            if await self._commit(compare, {}, deletes) is not None:
                return
            if not (await self.client.get(key)).kvs:
                return
        raise Conflict("the unbinding kept losing to concurrent changes: try again")

    # -- nodes ---------------------------------------------------------------------------

    @_available
    async def forget_node(self, name: str) -> int:
        """Remove a stopped node from the cluster, with the queues it led (their records
        and bindings; its data directory keeps their messages until it is reset). The
        number of queues removed. Refused while the node runs."""
        layout = self.layout
        if (await self.client.get(layout.node(name))).kvs:
            raise AdminError(f"node '{name}' is running: stop it before forgetting it")
        if (
            not (await self.client.get(layout.member(name))).kvs
            and name not in self.applier.view.members
        ):
            raise AdminError(f"node '{name}' is not a member of this cluster")
        queues = [r for r in self.applier.view.queues.values() if r.leader == name]
        for start in range(0, len(queues), MAX_TXN_OPS // 2):
            deletes: list[bytes] = []
            for record in queues[start : start + MAX_TXN_OPS // 2]:
                deletes.append(layout.queue(record.vhost, record.name))
                deletes.append(layout.bindings_to(record.vhost, "q", record.name))
            await self._commit([absent(layout.node(name))], {}, deletes)
        await self._commit([absent(layout.node(name))], {}, [layout.member(name)])
        return len(queues)

    # -- uploading what a node held before it joined -------------------------------------

    def with_members(self, record: QueueRecord) -> QueueRecord:
        """``record`` with its members if it is a quorum queue or a stream (replicated: its
        leader and ``x-quorum-initial-group-size - 1`` other running nodes, a stream's
        ``x-initial-cluster-size - 1``), epoch 1, all in sync."""
        kind = record.arguments.get("x-queue-type")
        if isinstance(kind, bytes):
            kind = kind.decode(errors="replace")
        if kind not in ("quorum", "stream") or record.members:
            return record
        view = self.applier.view
        size = group_size(
            record.arguments,
            "x-quorum-initial-group-size" if kind == "quorum" else "x-initial-cluster-size",
        )
        members = choose_members(record.leader, size, view.nodes, view.leaders())
        if len(members) < 2:
            return record
        return replace(record, members=members, epoch=1, in_sync=members)

    async def replace_queue_record(self, record: QueueRecord, base: QueueRecord) -> bool:
        """Write a replicated queue's record as this node's role allows it (a leader
        changing its in-sync set or handing the queue over, a member elected): fenced by
        this node's lease and the revision of the record this node holds, which must still
        name ``base``'s leader and epoch (the record the change was worked out from: a
        write started before an election was applied here must not undo it). False when
        any of them changed."""
        key = self.layout.queue(record.vhost, record.name)
        entry = self.applier.entries.get(key)
        if entry is None:
            return False
        held = QueueRecord.from_value(record.vhost, record.name, entry.value)
        if (held.leader, held.epoch) != (base.leader, base.epoch):
            return False
        compare = [mod_is(key, entry.mod_revision), *self._fence()]
        try:
            return await self._commit(compare, {key: queue_value(record)}, []) is not None
        except EtcdError as exc:
            log.warning(
                "queue '%s' in '%s': record not written: %s", record.name, record.vhost, exc
            )
            return False

    @_available
    async def change_queue_record(self, record: QueueRecord, compare: Sequence[Compare]) -> bool:
        """Write a queue's record if ``compare`` holds (an operator's membership change,
        ``cluster/members.py``); etcd's unavailability is ``ClusterUnavailable``."""
        key = self.layout.queue(record.vhost, record.name)
        return await self._commit(compare, {key: queue_value(record)}, []) is not None

    async def put_if_absent(self, key: bytes, value: bytes) -> bool:
        return await self._commit([absent(key)], {key: value}, []) is not None


def _arguments(value: Mapping[str, Any]) -> dict[str, object]:
    from leveret.cluster.keys import decode_arguments

    return decode_arguments(value.get("arguments"))


def _queue_value(record: QueueRecord) -> dict[str, Any]:
    value: dict[str, Any] = {
        "durable": record.durable,
        "auto_delete": record.auto_delete,
        "exclusive": record.exclusive,
        "arguments": encode_arguments(record.arguments),
        "leader": record.leader,
    }
    if record.owner is not None:
        value["owner"] = record.owner
    if record.members:
        value["members"] = list(record.members)
        value["epoch"] = record.epoch
        value["in_sync"] = list(record.in_sync)
    elif record.epoch:
        # Shrunk to one node (cluster/members.py): the epoch stays, so that a deposed
        # leader's log is never taken as newer once the queue is replicated again.
        value["epoch"] = record.epoch
    return value


def queue_value(record: QueueRecord) -> bytes:
    return encode(_queue_value(record))


__all__ = ["Conflict", "EtcdUnavailable", "MetadataStore", "queue_value"]
