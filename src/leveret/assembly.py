"""The whole broker as ``leveret serve`` and the embedded broker run it: the server
(``server/server.py``) with its management plane (``management/``) plugged in.

This is the one place that knows both: the server stands below the management plane and
only holds a factory for it (and for its part in a cluster, ``cluster/node.py``).
Imported by ``cli/main.py`` and ``testing/embedded.py``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from leveret.server.server import Server

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from leveret.config import Settings
    from leveret.server.server import ClusterPart, ManagementPlane, Plugin


def _management(server: Server) -> ManagementPlane:
    # Imported when the plane starts: a broker run with --no-management never loads aiohttp.
    from leveret.management import ManagementServer

    return ManagementServer(server)


def _cluster(server: Server) -> ClusterPart:
    # Imported only by a node given --etcd: a single node never loads the cluster package.
    from leveret.cluster.node import ClusterNode

    return ClusterNode(server)


def _links(server: Server) -> Plugin:
    from leveret.links.supervisor import Links

    return Links(server)


def build_server(settings: Settings) -> Server:
    """A server, not started, with the management plane it starts when settings ask and
    its part in a cluster when ``settings.etcd`` names one, and the links (shovels,
    federation) it runs."""
    return Server(settings, management=_management, cluster=_cluster, plugins=(_links,))


def serve(settings: Settings) -> None:
    """Run the broker until a signal stops it; uses uvloop when installed."""
    run: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    # Run outside the ``except``: an exception raised by the broker would otherwise carry
    # the ImportError above as its context, in every traceback the broker ever logs.
    run(build_server(settings).run())
