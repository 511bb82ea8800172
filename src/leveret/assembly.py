"""The whole broker as ``leveret serve`` and the embedded broker run it: the server
(``server/lifecycle.py``) with its management plane (``management/``) plugged in.

This is the one place that knows both: the server stands below the management plane and
only holds a factory for it. Imported by ``cli/main.py`` and ``testing/embedded.py``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from leveret.server.lifecycle import Server

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from leveret.config import Settings
    from leveret.server.lifecycle import ManagementPlane


def _management(server: Server) -> ManagementPlane:
    # Imported when the plane starts: a broker run with --no-management never loads aiohttp.
    from leveret.management import ManagementServer

    return ManagementServer(server)


def build_server(settings: Settings) -> Server:
    """A server, not started, with the management plane it starts when settings ask."""
    return Server(settings, management=_management)


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
