"""What the management plane's parts are handed, as Protocols: ``ManagementHost`` (what it
needs of the running server) and ``Plane`` (what the endpoints of ``api_*.py`` and the
Prometheus collector need of the management server they serve in). ``app.py``'s
``ManagementServer`` is the one ``Plane``; ``server/server.py`` is the one host.

Imported by ``app.py``, the endpoint modules and ``prometheus.py``, so that they depend on
these few names rather than on each other; imports nothing of Leveret at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aiohttp import web

    from leveret.management.authz import Principal
    from leveret.management.peers import Peers
    from leveret.management.stats import Sampler
    from leveret.server.ctl.admin import Admin, AdminHost
    from leveret.server.memory_alarm import MemoryAlarm
    from leveret.server.parameters import Runtime


class ManagementHost(Protocol):
    """What the management plane needs of the running server: the admin's host (settings,
    broker, users, connections, ...), the admin verbs, the runtime parameters, the alarm."""

    @property
    def admin_host(self) -> AdminHost: ...

    @property
    def admin(self) -> Admin: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def alarm(self) -> MemoryAlarm: ...


class Plane(Protocol):
    """The management server as its endpoints see it: the host, the statistics sampler, the
    URLs it listens on, the other nodes of a cluster, and the user a request is made as."""

    host: ManagementHost
    sampler: Sampler
    urls: list[str]
    # Its URLs that reach this node alone, and those of its Prometheus endpoint.
    node_urls: list[str]
    prometheus_urls: list[str]
    peers: Peers

    def principal(self, request: web.Request) -> Principal: ...
