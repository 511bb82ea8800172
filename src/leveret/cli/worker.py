"""One worker of ``leveret serve --workers N``: a cluster node run by the supervisor
(``cli/supervisor.py``), as ``python -m leveret.cli.worker``.

The supervisor talks to it over one stream socket it inherits (its descriptor in
``LEVERET_WORKER_FD``): first the worker reads its settings (one line of JSON,
``config.to_document``), then it serves; once every listener is up it writes
``ready``. When the supervisor goes away without stopping it (``kill -9``), the socket
reads end-of-file and the worker stops as on SIGTERM, so no worker outlives its
supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys

from leveret.assembly import build_server
from leveret.config import ConfigError, Settings, from_document
from leveret.server.server import Server, StoreError

FD_VARIABLE = "LEVERET_WORKER_FD"
READY = b"ready\n"
# Longest settings line read from the supervisor.
MAX_SETTINGS = 1 << 20

log = logging.getLogger("leveret.worker")


def read_settings(channel: socket.socket) -> Settings:
    """The settings line the supervisor sends first."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = channel.recv(65536)
        if not chunk or len(data) > MAX_SETTINGS:
            raise ConfigError("the supervisor sent no settings")
        data += chunk
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ConfigError("the supervisor's settings are not an object")
    return from_document(doc)


async def serve(settings: Settings, channel: socket.socket) -> None:
    """Run the node until a signal, or the supervisor's end of ``channel`` closing,
    stops it; tell the supervisor once it is ready."""
    server = build_server(settings)
    loop = asyncio.get_running_loop()
    running = asyncio.ensure_future(server.run())
    ready = asyncio.ensure_future(server.ready.wait())
    await asyncio.wait({running, ready}, return_when=asyncio.FIRST_COMPLETED)
    if ready.done() and not running.done():
        channel.setblocking(False)
        await loop.sock_sendall(channel, READY)
        loop.add_reader(channel.fileno(), _supervisor_spoke, channel, server, loop)
    ready.cancel()
    try:
        await running
    finally:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(channel.fileno())


def _supervisor_spoke(
    channel: socket.socket, server: Server, loop: asyncio.AbstractEventLoop
) -> None:
    try:
        data = channel.recv(4096)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if data:
        return  # nothing else is said on it today
    loop.remove_reader(channel.fileno())
    log.warning("the supervisor is gone: stopping")
    server.stopping.set()


def main() -> int:
    try:
        fd = int(os.environ[FD_VARIABLE])
    except (KeyError, ValueError):
        print(
            f"leveret: this is a worker of 'leveret serve --workers' ({FD_VARIABLE} is not set)",
            file=sys.stderr,
        )
        return 2
    channel = socket.socket(fileno=fd)
    try:
        settings = read_settings(channel)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"leveret worker: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        # The workers share the supervisor's standard error: each line names its node.
        format=f"%(asctime)s %(levelname)s [{settings.node_name}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(settings, channel))
    except StoreError as exc:
        print(f"leveret [{settings.node_name}]: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"leveret [{settings.node_name}]: cannot listen: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
