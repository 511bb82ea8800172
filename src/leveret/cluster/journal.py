"""What the model journals on a cluster node, told to etcd too: the durable exchanges,
queues and bindings a front end declared or deleted on this node.

Until the front-end shell's deferral lets a declaration wait for etcd (then it is in etcd
before the client's answer, as the management API's are now), a front end's declaration
is made in this node's model first and written to etcd right after (put-if-absent, a
queue with this node as its leader): so it is in the cluster's definitions, and a restart
of this node, which takes etcd as the truth, keeps it. Changes the node applies from etcd
are not written back (the applier says when it is applying). The per-message calls go to
the store's journal directly (bound methods, no frame of this wrapper's), and a publish
that wants a confirm reads ``writes`` and ``ok`` from the store's journal itself (the
node attaches it as the broker's ``store_journal``): this wrapper's properties, a Python
frame each, stay for the other readers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from leveret.cluster.apply import QueueRecord
from leveret.cluster.keys import encode, encode_arguments
from leveret.cluster.metadata import queue_value

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    from leveret.cluster.apply import Applier
    from leveret.cluster.metadata import MetadataStore
    from leveret.model.journal import Journal

log = logging.getLogger("leveret.cluster")


class ClusterJournal:
    """``Journal`` = the store's journal + durable definitions written behind to etcd."""

    def __init__(
        self,
        inner: Journal,
        store: MetadataStore,
        spawn: Callable[[Coroutine[Any, Any, Any]], object],
    ) -> None:
        self.inner = inner
        self.store = store
        self.spawn = spawn
        self.enqueued = inner.enqueued
        self.delivered = inner.delivered
        self.removed = inner.removed
        self.after_commit = inner.after_commit
        self.dtx_committed = inner.dtx_committed
        self.dtx_forgotten = inner.dtx_forgotten

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def writes(self) -> int:
        return self.inner.writes

    @writes.setter
    def writes(self, value: int) -> None:
        self.inner.writes = value

    @property
    def ok(self) -> bool:
        return self.inner.ok

    @ok.setter
    def ok(self, value: bool) -> None:
        self.inner.ok = value

    @property
    def _applier(self) -> Applier:
        return self.store.applier

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_name: str,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, object],
    ) -> None:
        self.inner.exchange_declared(vhost, name, type_name, auto_delete, internal, arguments)
        if self._applier.applying:
            return
        value = {
            "type": type_name,
            "durable": True,
            "auto_delete": auto_delete,
            "internal": internal,
            "arguments": encode_arguments(dict(arguments)),
        }
        key = self.store.layout.exchange(vhost, name)
        self.spawn(self.store.put_if_absent(key, encode(value)))

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self.inner.exchange_deleted(vhost, name)
        if not self._applier.applying:
            self.spawn(self.store.delete_exchange(vhost, name))

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        store_id = self.inner.queue_declared(vhost, name, auto_delete, arguments)
        if not self._applier.applying:
            record = self.store.with_members(
                QueueRecord(vhost, name, True, auto_delete, False, dict(arguments), self.store.node)
            )
            key = self.store.layout.queue(vhost, name)
            self.spawn(self._claim(key, queue_value(record), vhost, name))
        return store_id

    async def _claim(self, key: bytes, value: bytes, vhost: str, name: str) -> None:
        if not await self.store.put_if_absent(key, value):
            log.warning(
                "queue '%s' in vhost '%s', declared on this node, is already in the cluster "
                "(led by the node its record names)",
                name,
                vhost,
            )

    def queue_deleted(self, vhost: str, name: str, store_id: int) -> None:
        # Its record goes through the vhost's on_queue_removed (fenced by the lease).
        self.inner.queue_deleted(vhost, name, store_id)

    def binding_changed(
        self,
        added: bool,
        vhost: str,
        source: str,
        to_queue: bool,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, object],
    ) -> None:
        self.inner.binding_changed(
            added, vhost, source, to_queue, destination, routing_key, arguments
        )
        if self._applier.applying:
            return
        kind = "queue" if to_queue else "exchange"
        args = dict(arguments)
        key = self.store.binding_key(vhost, source, kind, destination, routing_key, args)
        if (key in self._applier.entries) == added:
            return  # etcd has it so already (written first, through VirtualHost.shared)
        if not added:
            self.spawn(self.store.unbind(vhost, source, kind, destination, routing_key, args))
            return
        value = {
            "source": source,
            "destination": destination,
            "kind": kind,
            "routing_key": routing_key,
            "arguments": encode_arguments(args),
        }
        self.spawn(self.store.put_if_absent(key, encode(value)))
