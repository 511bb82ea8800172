"""A node's membership: the etcd lease it holds and the record it keeps under it.

At start the node takes a lease of ``ttl`` seconds and puts ``nodes/{name}`` under it (its
name, listeners, inter-node address, pid, version) and ``members/{name}`` without one (it
joined; ``forget_cluster_node`` removes that). A keepalive every ``ttl / 3`` seconds keeps
the lease; when the node stops, it revokes the lease and its record goes at once. When the
node dies, etcd expires the lease within ``ttl`` seconds and every other node's watch
reports ``nodes/{name}`` deleted: the node is down for all of them.

A node that loses its lease knows it: etcd answers a keepalive with TTL 0 (it was too slow:
paused, cut off), or no keepalive has been answered for ``ttl`` seconds counted from when
the last answered one was sent (so the node gives up no later than etcd does). Either way
:attr:`Membership.on_lost` callbacks run first (whatever it did because it held a role, it
stops doing), then it takes a new lease and registers again; :attr:`epoch` counts the
leases it has held, and :attr:`lease` is the one to compare in a fenced write.

:attr:`Membership.valid_until` is the monotonic instant until which the node holds its lease
for sure: the send time of the last answered keepalive plus the TTL, and etcd counts the TTL
from when it received that keepalive, later. :attr:`Membership.on_extended` callbacks get it
each time a keepalive is answered (the same lease, held on): a replicated queue's leader
serves until then (``cluster/replication.py``).

The name is one node's at a time: a record under another live lease makes :meth:`start`
wait (a node killed and restarted at once waits for its old lease to expire), up to
``wait`` seconds, then fail. Used by ``cluster/node.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.cluster.etcd import EtcdError, EtcdUnavailable, Get, Put, absent, lease_is
from leveret.cluster.keys import encode

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.cluster.etcd import EtcdClient
    from leveret.cluster.keys import Layout

log = logging.getLogger("leveret.cluster")


class NameInUse(Exception):
    """Another running node holds this node's name."""


@dataclass
class Membership:
    client: EtcdClient
    layout: Layout
    name: str
    ttl: int
    record: dict[str, Any] = field(default_factory=dict)
    lease: int = 0
    epoch: int = 0
    # Run (synchronously, on the loop) when the node learns it lost its lease.
    on_lost: list[Callable[[], None]] = field(default_factory=list)
    # Run after the node registered again under a new lease.
    on_renewed: list[Callable[[], None]] = field(default_factory=list)
    # Run with :attr:`valid_until` each time a keepalive of the lease held is answered.
    on_extended: list[Callable[[float], None]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _valid_until: float = field(default=0.0, init=False, repr=False)
    _lost: bool = field(default=False, init=False, repr=False)

    @property
    def held(self) -> bool:
        """Whether the node may still believe it holds its lease (and so its roles)."""
        return bool(self.lease) and not self._lost and time.monotonic() < self._valid_until

    @property
    def valid_until(self) -> float:
        """The monotonic instant until which the node holds its lease for sure (0: none)."""
        return self._valid_until if self.lease and not self._lost else 0.0

    def node_record(self) -> dict[str, Any]:
        return {"name": self.name, "pid": os.getpid(), "version": __version__, **self.record}

    async def start(self, wait: float = 0.0) -> None:
        """Take a lease and register; waits up to ``wait`` seconds for a previous holder
        of the name to go (its lease to expire)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                await self._register()
                break
            except NameInUse:
                if time.monotonic() >= deadline:
                    raise
                log.info("node name '%s' is held by a lease that has not expired yet", self.name)
                await asyncio.sleep(min(1.0, max(0.1, self.ttl / 5)))
        self._task = asyncio.create_task(self._keep(), name=f"leveret-lease-{self.name}")

    async def _register(self) -> None:
        sent = time.monotonic()
        lease, ttl = await self.client.grant(self.ttl)
        key = self.layout.node(self.name)
        result = await self.client.txn(
            [absent(key)],
            [
                Put(key, encode(self.node_record()), lease),
                Put(self.layout.member(self.name), encode({"name": self.name})),
            ],
            [Get(key)],
        )
        if not result.succeeded:
            await self.client.revoke(lease)
            raise NameInUse(f"node name '{self.name}' is in use by a running node")
        self.lease = lease
        self.epoch += 1
        self._lost = False
        self._valid_until = sent + ttl
        log.info("registered as cluster node '%s' (lease %x, %d s)", self.name, lease, ttl)

    async def update(self, record: dict[str, Any]) -> None:
        """Change what the node's record says (its listeners once they are up)."""
        self.record = {**self.record, **record}
        key = self.layout.node(self.name)
        await self.client.txn(
            [lease_is(key, self.lease)], [Put(key, encode(self.node_record()), self.lease)]
        )

    async def _keep(self) -> None:
        period = max(0.2, self.ttl / 3)
        while True:
            await asyncio.sleep(period)
            sent = time.monotonic()
            try:
                ttl = await self.client.keepalive(self.lease)
            except EtcdError as exc:
                if not self._lost and time.monotonic() >= self._valid_until:
                    log.error("cluster lease lost: etcd unreachable for %d s (%s)", self.ttl, exc)
                    self._lose()
                continue
            if ttl > 0 and not self._lost:
                self._valid_until = sent + ttl
                for extended in list(self.on_extended):
                    try:
                        extended(self._valid_until)
                    except Exception:  # the keepalive must go on whatever a listener does
                        log.exception("a lease-extended listener failed")
                continue
            if not self._lost:
                log.error("cluster lease lost: etcd expired it (this node was too slow)")
                self._lose()
            try:
                if ttl > 0:
                    await self.client.revoke(self.lease)  # given up already: let it go
                await self._register()
            except (NameInUse, EtcdUnavailable, EtcdError) as exc:
                log.warning("cannot register again yet: %s", exc)
                continue
            for callback in list(self.on_renewed):
                callback()

    def _lose(self) -> None:
        self._lost = True
        for callback in list(self.on_lost):
            try:
                callback()
            except Exception:  # one listener's failure must not keep the others uninformed
                log.exception("a lease-lost listener failed")

    async def stop(self) -> None:
        """Revoke the lease: the node's record goes at once (a clean leave)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.lease:
            try:
                await self.client.revoke(self.lease)
            except EtcdError as exc:
                log.warning("could not revoke the cluster lease (it expires by itself): %s", exc)
            self.lease = 0
