"""What the model journals on a cluster node, told to etcd too: the durable exchanges,
queues and bindings a front end declared or deleted on this node.

Until the front-end shell's deferral lets a declaration wait for etcd (then it is in etcd
before the client's answer, as the management API's are now), a front end's declaration
is made in this node's model first and written to etcd right after (put-if-absent, a
queue with this node as its leader): so it is in the cluster's definitions, and a restart
of this node, which takes etcd as the truth, keeps it. Changes the node applies from etcd
are not written back (the applier says when it is applying).

It is the store's journal itself (a ``StreamJournal`` whose definitions are also written
to etcd), not a wrapper of it: a wrapper read ``writes`` and ``ok`` through a Python
property of its own on top of the store's, three times a confirmed publish on the leader
and twice on the publisher's node (docs/benchmarks.md); the per-message calls were bound
methods already.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from leveret.cluster.apply import QueueRecord
from leveret.cluster.keys import encode, encode_arguments
from leveret.cluster.metadata import queue_value
from leveret.store.stream_journal import StreamJournal

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    from leveret.cluster.apply import Applier
    from leveret.cluster.metadata import MetadataStore
    from leveret.model.journal import Journal
    from leveret.store.stream_log import StreamStore

log = logging.getLogger("leveret.cluster")


class ClusterJournal(StreamJournal):
    """``Journal`` = the store's journal, its durable definitions written behind to etcd."""

    def __init__(
        self,
        disk: Journal,
        streams: StreamStore,
        store: MetadataStore,
        spawn: Callable[[Coroutine[Any, Any, Any]], object],
    ) -> None:
        super().__init__(disk, streams)
        self.store = store
        self.spawn = spawn

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
        super().exchange_declared(vhost, name, type_name, auto_delete, internal, arguments)
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
        super().exchange_deleted(vhost, name)
        if not self._applier.applying:
            self.spawn(self.store.delete_exchange(vhost, name))

    def queue_declared(
        self, vhost: str, name: str, auto_delete: bool, arguments: Mapping[str, object]
    ) -> int:
        store_id = super().queue_declared(vhost, name, auto_delete, arguments)
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
        super().queue_deleted(vhost, name, store_id)

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
        super().binding_changed(added, vhost, source, to_queue, destination, routing_key, arguments)
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
