"""The management HTTP server: an aiohttp application on the broker's event loop.

aiohttp was chosen because its server is an ``asyncio.Protocol`` like the broker's own
connections (it runs on the same loop, uvloop included, with no thread and no second
loop), and it is the most used asyncio HTTP server with a long record; what it costs the
AMQP hot path while polled is measured in ``docs/benchmarks.md`` ("The management plane's
cost").

Errors are RabbitMQ's: ``{"error": ..., "reason": ...}`` with 400 (``bad_request``), 401
(``not_authorized``, with ``WWW-Authenticate``), 404 (``Object Not Found``) and 405; the
endpoints raise ``errors.HttpError`` or the core's and admin's own errors, which the
middleware here answers. The endpoints themselves are in ``api.py`` (they see this server
as a ``plane.Plane``); the static web UI under ``static/``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import ssl
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from leveret.auth.users import AdminError, NoSuchUser, NoSuchVhost
from leveret.errors import AMQPError, NotFound
from leveret.management import api
from leveret.management.authz import Authenticator, Forbidden, Unauthorized
from leveret.management.errors import HttpError
from leveret.management.peers import Peers
from leveret.management.query import BadQuery
from leveret.management.stats import Sampler

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.management.authz import Principal
    from leveret.management.plane import ManagementHost

log = logging.getLogger("leveret.management")

REALM = 'Basic realm="RabbitMQ Management"'


def _error(status: int, error: str, reason: str, *, challenge: bool = True) -> web.Response:
    response = web.json_response({"error": error, "reason": reason}, status=status)
    if status == 401 and challenge:
        response.headers["WWW-Authenticate"] = REALM
    return response


def _loopback(request: web.Request) -> bool:
    peer = request.remote or ""
    return peer.startswith("127.") or peer in ("::1", "localhost") or peer.startswith("::ffff:127.")


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except HttpError as exc:
        return _error(exc.status, exc.error, exc.reason)
    except Unauthorized as exc:
        # The web UI's own requests get no challenge (no browser login dialog).
        xhr = request.headers.get("X-Requested-With") == "XMLHttpRequest"
        return _error(401, "not_authorized", str(exc), challenge=not xhr)
    except Forbidden as exc:
        return _error(401, "not_authorised", str(exc))
    except (NoSuchVhost, NoSuchUser):
        return _error(404, "Object Not Found", "Not Found")
    except NotFound:
        return _error(404, "Object Not Found", "Not Found")
    except AMQPError as exc:
        return _error(400, "bad_request", exc.reply_text)
    except AdminError as exc:
        # 503 when the cluster's metadata store (etcd) did not answer (cluster/metadata.py).
        status = getattr(exc, "http_status", 400)
        return _error(status, "bad_request" if status == 400 else "service_unavailable", str(exc))
    except BadQuery as exc:
        return _error(400, "bad_request", str(exc))
    except json.JSONDecodeError:
        return _error(400, "bad_request", "failed to decode JSON")


class ManagementServer:
    """The HTTP API + web UI listener, the Prometheus listener and the sampling timer: the
    ``Plane`` (``plane.py``) its endpoints are bound to."""

    def __init__(self, host: ManagementHost) -> None:
        self.host = host
        admin_host = host.admin_host
        self.settings = admin_host.settings
        self.sampler = Sampler()
        self.auth = Authenticator(admin_host.users)
        self.runners: list[web.AppRunner] = []
        self.urls: list[str] = []
        # The API's URLs that reach this node and no other (what other nodes of a cluster
        # ask): the management URLs, or with a shared port (--workers) a private listener.
        self.node_urls: list[str] = []
        self.prometheus_urls: list[str] = []
        # The other nodes of a cluster, asked for the cluster-wide views (peers.py).
        self.peers = Peers()
        self._timer: asyncio.TimerHandle | None = None
        self.interval = self.settings.collect_statistics_interval / 1000

    # -- the request's user ------------------------------------------------------------

    def principal(self, request: web.Request) -> Principal:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic" or not value:
            raise Unauthorized("Login failed")
        try:
            name, sep, password = base64.b64decode(value).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized("Login failed") from None
        if not sep:
            raise Unauthorized("Login failed")
        return self.auth.login(name, password, loopback=_loopback(request))

    # -- lifecycle -------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        # RabbitMQ answers paths with a trailing slash too (amqpstorm asks
        # healthchecks/node/): such requests are redirected to the path without it.
        app = web.Application(
            middlewares=[
                web.normalize_path_middleware(append_slash=False, remove_slash=True),
                _errors,
            ],
            client_max_size=64 << 20,
        )
        api.add_routes(app, self)
        static = resources.files("leveret.management") / "static"
        index = str(static / "index.html")

        async def home(_request: web.Request) -> web.StreamResponse:
            return web.FileResponse(index)

        app.router.add_get("/", home)
        app.router.add_static("/static/", str(static), show_index=False)
        return app

    async def start(self) -> None:
        settings = self.settings
        loop = asyncio.get_running_loop()
        self._schedule(loop)
        context = None
        if settings.management_tls_certfile:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(
                settings.management_tls_certfile, settings.management_tls_keyfile
            )
        scheme = "https" if context else "http"
        urls = await self._listen(
            self.make_app(),
            settings.management_host,
            settings.management_port,
            scheme,
            "management API and web UI",
            context,
            # The workers of --workers share the port: a request reaches any of them.
            private=settings.reuse_port,
        )
        self.node_urls = urls
        if settings.prometheus:
            from leveret.management.prometheus import make_app

            self.prometheus_urls = await self._listen(
                make_app(self),
                settings.prometheus_host or settings.management_host,
                settings.prometheus_port,
                "http",
                "Prometheus metrics",
                None,
            )

    async def _listen(
        self,
        app: web.Application,
        host: str,
        port: int,
        scheme: str,
        what: str,
        context: ssl.SSLContext | None,
        *,
        private: bool = False,
    ) -> list[str]:
        """Serve ``app`` on ``host:port`` (shared with the other workers when
        ``reuse_port``); with ``private``, also on a port of this process's own. Returns
        the URLs that reach this process only."""
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        reuse_port = self.settings.reuse_port or None
        site = web.TCPSite(
            runner, host, port, ssl_context=context, reuse_address=True, reuse_port=reuse_port
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            log.warning("%s not started: cannot listen on %s:%d: %s", what, host, port, exc)
            return []
        self.runners.append(runner)
        urls = self._site_urls(site, scheme, what)
        self.urls += urls
        if not private:
            return urls
        own = web.TCPSite(runner, host, 0, ssl_context=context, reuse_address=True)
        try:
            await own.start()
        except OSError as exc:
            log.warning("%s: no listener of this node's own on %s: %s", what, host, exc)
            return []
        return self._site_urls(own, scheme, f"{what} (this node only)")

    @staticmethod
    def _site_urls(site: web.TCPSite, scheme: str, what: str) -> list[str]:
        urls = []
        server = site._server  # aiohttp does not expose the bound port otherwise
        for sock in getattr(server, "sockets", None) or []:
            bound_host, bound_port = sock.getsockname()[:2]
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            url = f"{scheme}://{shown}:{bound_port}"
            urls.append(url)
            log.info("%s listening on %s", what, url)
        return urls

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(self.interval, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sample()
        self._schedule(loop)

    def sample(self) -> None:
        host = self.host.admin_host
        try:
            self.sampler.sample(host.broker, list(host.connections))
        except Exception:  # a bad sample must never stop the broker or the timer
            log.exception("statistics sample failed")

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for runner in self.runners:
            await runner.cleanup()
        self.runners.clear()
        await self.peers.close()
