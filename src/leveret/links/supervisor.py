"""``Links``: the plug-in that runs shovels and federation links inside the broker.

Made with the server (``leveret/assembly.py``), before recovery, it registers the checks of
the ``shovel``, ``federation-upstream`` and ``federation-upstream-set`` parameters with the
runtime (so an invalid one is refused with RabbitMQ's text wherever it is set: ``leveret ctl
set_parameter``, ``PUT /api/parameters``, a definitions file), a listener for parameter and
policy changes, and the ``leveret ctl`` verbs. Started once the broker serves, it starts a
shovel per ``shovel`` parameter (they are in ``runtime.json``, so shovels survive restarts)
and the federation links the policies ask for; a parameter set again restarts its shovel
with the new definition, a cleared one stops it (RabbitMQ's ``adjust``/``stop_child``).

What runs is also looked at once a second (``RECONCILE_EVERY``): federation links follow the
exchanges and queues that policies match as they are declared and deleted, and bindings of
federated exchanges are propagated upstream (the model has no change hooks; a second is the
delay a binding may take to reach the upstream; ``docs/architecture.md``, "links").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, ClassVar

from leveret.auth.users import AdminError, InvalidArgument
from leveret.links import shovel_config
from leveret.links.federation import Federation
from leveret.links.local import LocalConnector
from leveret.links.shovel import Shovel
from leveret.links.status import NODE, NoSuchLink, format_timestamp
from leveret.links.validation import ValidationError
from leveret.links.verbs import link_verbs
from leveret.server.parameters import cluster_name

if TYPE_CHECKING:
    from leveret.server.server import Server

__all__ = ["Links", "NoSuchLink", "format_timestamp"]

log = logging.getLogger("leveret.links")

SHOVEL = "shovel"


class Links:
    """Shovels and federation of one broker (see the module docstring)."""

    RECONCILE_EVERY: ClassVar[float] = 1.0

    def __init__(self, server: Server) -> None:
        self.server = server
        self.runtime = server.runtime
        self.local = LocalConnector(server)
        self.shovels: dict[tuple[str, str], Shovel] = {}
        self.federation = Federation(self)
        self.started = False
        self._stopping: set[asyncio.Task[None]] = set()
        self._adjusting: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._reconciler: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        runtime = self.runtime
        runtime.validators[SHOVEL] = self._validate_shovel
        self.federation.register(runtime.validators)
        runtime.listeners.append(self._changed)
        server.admin.register(link_verbs(self))

    # -- the plug-in's life -------------------------------------------------------------------

    async def start(self) -> None:
        self.started = True
        self.server.broker.cluster_name = self.cluster_name()
        for (vhost, component, name), value in sorted(self.runtime.parameters.items()):
            if component == SHOVEL and vhost in self.server.broker.vhosts:
                self._start_shovel(vhost, name, value)
        self._reconciler = asyncio.get_running_loop().create_task(self._reconcile_loop())

    async def close(self) -> None:
        self.started = False
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
        shovels, self.shovels = list(self.shovels.values()), {}
        await asyncio.gather(
            *(s.stop() for s in shovels), self.federation.close(), return_exceptions=True
        )
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    def cluster_name(self) -> str:
        return cluster_name(self.runtime)

    @property
    def node(self) -> str:
        return NODE

    # -- parameters ---------------------------------------------------------------------------

    def _validate_shovel(self, vhost: str, name: str, value: object) -> None:
        try:
            shovel_config.validate(value, name)
        except ValidationError as exc:
            raise InvalidArgument(str(exc)) from None

    def _changed(self, vhost: str, component: str, name: str) -> None:
        if not self.started:
            return  # boot: start() takes what is there
        if component == SHOVEL:
            self._adjust_shovel(vhost, name)
        else:
            self.federation.changed(vhost, component, name)
            self._kick.set()

    def _adjust_shovel(self, vhost: str, name: str) -> None:
        """The shovel's parameter changed: stop what runs, then start the new definition
        (RabbitMQ's ``adjust``: the old worker is gone before the new one counts its
        queue for ``delete-after``, and never do two of them consume at once)."""
        key = (vhost, name)
        old = self.shovels.pop(key, None)
        previous = self._adjusting.get(key)

        async def adjust() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            if old is not None:
                await old.stop()
            value = self.runtime.parameters.get((vhost, SHOVEL, name))
            if value is not None and self.started and key not in self.shovels:
                self._start_shovel(vhost, name, value)

        task = asyncio.get_running_loop().create_task(adjust())
        self._adjusting[key] = task
        self._stopping.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._stopping.discard(t)
            if self._adjusting.get(key) is t:
                del self._adjusting[key]

        task.add_done_callback(done)

    def _stop_later(self, shovel: Shovel) -> None:
        task = asyncio.get_running_loop().create_task(shovel.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _start_shovel(self, vhost: str, name: str, value: Any) -> None:
        try:
            shovel_config.validate(value, name)
        except ValidationError as exc:
            log.error("Shovel '%s' in vhost '%s' not started: %s", name, vhost, exc)
            return
        shovel = Shovel(
            shovel_config.parse(vhost, name, value),
            local=self.local,
            cluster_name=self.cluster_name,
            on_done=self._shovel_done,
        )
        self.shovels[(vhost, name)] = shovel
        shovel.start()

    async def _shovel_done(self, shovel: Shovel) -> None:
        """``delete-after`` reached: the shovel deletes its own parameter (RabbitMQ clears
        it as the user ``rmq-shovel``)."""
        if self.shovels.get(shovel.key) is shovel:
            del self.shovels[shovel.key]
        vhost, name = shovel.key
        async with self.server.admin.lock:
            if (vhost, SHOVEL, name) in self.runtime.parameters:
                try:
                    await self.runtime.change(lambda rt: rt.clear_parameter(vhost, SHOVEL, name))
                except AdminError as exc:
                    log.error("Shovel '%s' in vhost '%s': %s", name, vhost, exc)

    # -- verbs -----------------------------------------------------------------------------------

    def shovel(self, vhost: str, name: str) -> Shovel:
        found = self.shovels.get((vhost, name))
        if found is None:
            raise NoSuchLink(f"Shovel '{name}' in vhost '{vhost}' was not found")
        return found

    async def restart_shovel(self, vhost: str, name: str) -> None:
        """Stop and start again (RabbitMQ's ``restart_shovel``)."""
        old = self.shovel(vhost, name)
        log.info("Shovel '%s' in virtual host '%s' will be restarted", name, vhost)
        del self.shovels[(vhost, name)]
        await old.stop()
        value = self.runtime.parameters.get((vhost, SHOVEL, name))
        if value is not None and (vhost, name) not in self.shovels:
            self._start_shovel(vhost, name, value)

    async def delete_shovel(self, vhost: str, name: str) -> None:
        """Clear the shovel's parameter (which stops it), as RabbitMQ's ``delete_shovel``."""
        self.shovel(vhost, name)
        await self.runtime.change(lambda rt: rt.clear_parameter(vhost, SHOVEL, name))

    # -- what is shown -------------------------------------------------------------------------

    def shovel_rows(self) -> list[dict[str, Any]]:
        """``/api/shovels``: RabbitMQ 3.10's fields, in its order."""
        rows = []
        for (vhost, name), shovel in sorted(self.shovels.items()):
            status = shovel.status
            row: dict[str, Any] = {
                "node": self.node,
                "timestamp": format_timestamp(status.timestamp),
                "name": name,
                "vhost": vhost,
                "type": "dynamic",
                "state": status.state,
            }
            if status.state == "running":
                row.update(status.info)
            elif status.state == "terminated":
                row["reason"] = status.reason
            rows.append(row)
        return rows

    def shovel_status_rows(self) -> list[dict[str, Any]]:
        """``rabbitmqctl shovel_status``'s fields (its ``fmt_status``)."""
        out = []
        renamed = {
            "src_address": "source_address",
            "src_queue": "source_queue",
            "src_exchange": "source_exchange",
            "src_exchange_key": "source_exchange_key",
            "dest_address": "destination_address",
            "dest_queue": "destination_queue",
            "dest_exchange": "destination_exchange",
            "dest_exchange_key": "destination_exchange_key",
        }
        for (vhost, name), shovel in sorted(self.shovels.items()):
            status = shovel.status
            row: dict[str, Any] = {
                "name": name,
                "vhost": vhost,
                "type": "dynamic",
                "state": status.state,
                "source": status.info.get("src_uri", ""),
                "destination": status.info.get("dest_uri", ""),
                "termination_reason": status.reason,
                "last_changed": format_timestamp(status.timestamp),
            }
            if status.state == "running":
                row["source_protocol"] = status.info.get("src_protocol", "")
                row["destination_protocol"] = status.info.get("dest_protocol", "")
                for key, value in status.info.items():
                    if key in renamed:
                        row[renamed[key]] = value
            out.append(row)
        return out

    # -- reconciliation --------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.RECONCILE_EVERY):
                    await self._kick.wait()
            self._kick.clear()
            try:
                self._reconcile()
            except Exception:  # a bug here must not end the loop: log it and go on
                log.exception("links: reconciliation failed")

    def _reconcile(self) -> None:
        broker = self.server.broker
        # What clients are told (federation on other brokers cuts loops by it) follows the
        # cluster_name parameter.
        broker.cluster_name = self.cluster_name()
        vhosts = broker.vhosts
        for key, shovel in list(self.shovels.items()):
            if key[0] not in vhosts:
                del self.shovels[key]
                self._stop_later(shovel)
        self.federation.reconcile()

    def kick(self) -> None:
        """Look at what should run now rather than within the second."""
        self._kick.set()
