"""Federation: exchanges and queues that receive from the same-named exchanges and queues
of upstream brokers, as RabbitMQ 3.10's federation plugin runs them.

:class:`Federation` follows the policies: an exchange or queue whose policy names an
upstream, an upstream set or an upstream pattern gets one link per upstream
(``federation_config.upstreams_for``); a link whose exchange, queue, policy or upstream goes
away stops, and removes what it made upstream (unless ``resource-cleanup-mode`` is
``never``); an upstream whose definition changed restarts its links.

An **exchange link** (``federation_exchange.ExchangeLink``) keeps, on the upstream, a
durable queue ``federation: <exchange> -> <cluster name>`` fed by an internal exchange of
type ``x-federation-upstream`` (``fanout`` on a broker without it) that is bound to the
upstream exchange with the downstream exchange's bindings; it consumes that queue and
republishes to the downstream exchange, adding an ``x-received-from`` entry. Messages
that have made ``max-hops`` hops, or that were already received here, are acknowledged
and dropped (loops are cut). Bindings carry ``x-bound-from`` so they travel no further
than messages could.

A **queue link** (``federation_queue.QueueLink``) consumes the upstream queue (with
priority -1, so the upstream's own consumers come first) only while the downstream queue is
empty and has a consumer with room, and republishes there.

Both acknowledge upstream as their ack mode says (``on-confirm``: only what the downstream
queue confirmed) and, after a failure, start again after ``reconnect-delay``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from leveret.auth.users import InvalidArgument
from leveret.links.federation_config import (
    UPSTREAM,
    UPSTREAM_SET,
    Upstream,
    federates,
    upstreams_for,
    validate_upstream,
    validate_upstream_set,
)
from leveret.links.federation_exchange import ExchangeLink
from leveret.links.federation_queue import QueueLink
from leveret.links.validation import ValidationError

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.links.federation_link import FederationLink, LinkKey
    from leveret.links.status import LinkHost
    from leveret.model.vhost import VirtualHost

__all__ = ["Federation"]

log = logging.getLogger("leveret.links")


class Federation:
    """Every federation link of the broker (see the module docstring)."""

    def __init__(self, host: LinkHost) -> None:
        self.host = host
        self.active: dict[LinkKey, FederationLink] = {}
        self.forwarded = 0  # messages every link forwarded (Prometheus)
        self.tasks: set[asyncio.Task[None]] = set()
        # Upstream-side state that outlives a link's runs: the internal exchange's suffix
        # (A or B) per exchange link (RabbitMQ keeps it in the exchange's scratch space).
        self.suffixes: dict[LinkKey, str] = {}

    def register(self, validators: dict[str, Callable[[str, str, object], None]]) -> None:
        def upstream(vhost: str, name: str, value: object) -> None:
            try:
                validate_upstream(value, name)
            except ValidationError as exc:
                raise InvalidArgument(str(exc)) from None

        def upstream_set(vhost: str, name: str, value: object) -> None:
            try:
                validate_upstream_set(value, name)
            except ValidationError as exc:
                raise InvalidArgument(str(exc)) from None

        validators[UPSTREAM] = upstream
        validators[UPSTREAM_SET] = upstream_set

    def changed(self, vhost: str, component: str, name: str) -> None:
        """A parameter or policy changed: the next reconciliation (kicked by ``Links``)
        takes it into account; nothing is cached in between."""

    # -- what should run -------------------------------------------------------------------

    def desired(self) -> dict[LinkKey, tuple[Upstream, str]]:
        """Every link the policies ask for: key -> (upstream, policy name)."""
        out: dict[LinkKey, tuple[Upstream, str]] = {}
        parameters = self.host.runtime.parameters
        for vname, vhost in self.host.server.broker.vhosts.items():
            policies = {n: p for n, p in vhost.policies.items() if federates(p.definition)}
            if not policies:
                continue
            self._desired_exchanges(vname, vhost, policies, parameters, out)
            self._desired_queues(vname, vhost, policies, parameters, out)
        return out

    @staticmethod
    def _desired_exchanges(
        vname: str,
        vhost: VirtualHost,
        policies: dict[str, Any],
        parameters: dict[tuple[str, str, str], Any],
        out: dict[LinkKey, tuple[Upstream, str]],
    ) -> None:
        for name, exchange in vhost.exchanges.items():
            policy = policies.get(exchange.policy or "")
            if policy is None or not name or exchange.internal:
                continue
            for u in upstreams_for(policy.definition, vname, name, parameters):
                out[("exchange", vname, name, u.name, u.exchange)] = (u, policy.name)

    @staticmethod
    def _desired_queues(
        vname: str,
        vhost: VirtualHost,
        policies: dict[str, Any],
        parameters: dict[tuple[str, str, str], Any],
        out: dict[LinkKey, tuple[Upstream, str]],
    ) -> None:
        for name, queue in vhost.queues.items():
            policy = policies.get(queue.policy or "")
            if policy is None or "x-internal-purpose" in queue.arguments:
                continue
            for u in upstreams_for(policy.definition, vname, name, parameters):
                out[("queue", vname, name, u.name, u.queue)] = (u, policy.name)

    def reconcile(self) -> None:
        """Start what should run and is not, stop what runs and should not, and bring the
        exchange links' upstream bindings up to date."""
        desired = self.desired()
        for key, link in list(self.active.items()):
            wanted = desired.get(key)
            if wanted is None or wanted[0] != link.upstream:
                del self.active[key]
                gone = wanted is None
                self._stop_later(link, cleanup=gone)
        for key, (upstream, policy) in desired.items():
            if key in self.active:
                continue
            cls: type[FederationLink] = ExchangeLink if key[0] == "exchange" else QueueLink
            link = cls(self, key, upstream)
            link.policy = policy
            self.active[key] = link
            link.start()
        for link in self.active.values():
            if isinstance(link, ExchangeLink):
                link.sync_bindings()

    def _stop_later(self, link: FederationLink, *, cleanup: bool) -> None:
        task = asyncio.get_running_loop().create_task(link.stop(cleanup=cleanup))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        active, self.active = list(self.active.values()), {}
        await asyncio.gather(*(link.stop() for link in active), return_exceptions=True)
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- verbs and rows -----------------------------------------------------------------------

    def find(self, link_id_: str) -> FederationLink | None:
        for link in self.active.values():
            if link.id == link_id_:
                return link
        return None

    async def restart(self, link: FederationLink) -> None:
        if self.active.get(link.key) is link:
            del self.active[link.key]
        await link.stop()
        self.reconcile()

    def rows(self, node: str) -> list[dict[str, Any]]:
        return [link.row(node) for _k, link in sorted(self.active.items())]
