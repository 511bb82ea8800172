"""Leveret's own endpoints (RabbitMQ has none of them): the pending messages of a delayed
exchange (list, cancel, reschedule) and a queue's messages looked at, searched, moved,
copied and replayed without consuming them. The operations are ``server/message_ops.py``'s
(``leveret ctl`` runs the same); this maps them onto HTTP.

::

    GET    /api/exchanges/{vhost}/{name}/delayed              ?count&skip&preview&message_id&...
    DELETE /api/exchanges/{vhost}/{name}/delayed/{id}
    POST   /api/exchanges/{vhost}/{name}/delayed/cancel       {ids|message_id|...|all}
    POST   /api/exchanges/{vhost}/{name}/delayed/reschedule   {selector, delay|due}
    POST   /api/queues/{vhost}/{name}/browse                  {offset, count, filter, scan, ...}
    POST   /api/queues/{vhost}/{name}/move                    {to_queue|to_exchange, filter,
                                                               limit, copy}
    POST   /api/queues/{vhost}/{name}/replay                  {filter, limit}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.management.api_base import ApiBase, json_reply, no_content, read_body
from leveret.management.errors import HttpError, bad_request, not_found
from leveret.server import message_ops as tools

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aiohttp import web

    from leveret.model.delayed import DelayQueue
    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost


def _fail(exc: tools.ToolError) -> HttpError:
    if exc.status == 404:
        return not_found()
    if exc.status >= 500:
        return HttpError(exc.status, "internal_error", str(exc))
    return bad_request(str(exc))


async def _run(work: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await work()
    except tools.ToolError as exc:
        raise _fail(exc) from None


class MessagesApi(ApiBase):
    """The endpoints above."""

    def _vhost_for(self, request: web.Request, *, change: bool) -> VirtualHost:
        who = self.who(request)
        vname = request.match_info["vhost"]
        if change or not who.is_monitor:
            who.require_vhost(vname)
        return self.vhost(vname)

    def _store(self, request: web.Request, *, change: bool = False) -> DelayQueue:
        vhost = self._vhost_for(request, change=change)
        try:
            return tools.delay_store(vhost, request.match_info["name"])
        except tools.ToolError as exc:
            raise _fail(exc) from None

    def _queue(self, request: web.Request, *, change: bool) -> tuple[VirtualHost, Queue]:
        vhost = self._vhost_for(request, change=change)
        queue = vhost.queues.get(request.match_info["name"])
        if queue is None:
            raise not_found()
        return vhost, queue

    # -- delayed exchanges ---------------------------------------------------------------------

    async def list_delayed(self, request: web.Request) -> web.Response:
        store = self._store(request)
        body: dict[str, Any] = dict(request.query)
        if "ids" in body:
            body["ids"] = [int(i) for i in str(body["ids"]).split(",") if i.strip().isdigit()]

        async def work() -> Any:
            return tools.pending(store, body)

        return json_reply(await _run(work))

    async def delete_delayed(self, request: web.Request) -> web.Response:
        store = self._store(request, change=True)
        ident = request.match_info["id"]
        if not ident.isdigit():
            raise not_found()

        async def work() -> Any:
            return tools.cancel(store, {"ids": [int(ident)]})

        if (await _run(work))["cancelled"] == 0:
            raise not_found()
        return no_content()

    async def cancel_delayed(self, request: web.Request) -> web.Response:
        store = self._store(request, change=True)
        body = await read_body(request)

        async def work() -> Any:
            return tools.cancel(store, body)

        return json_reply(await _run(work))

    async def reschedule_delayed(self, request: web.Request) -> web.Response:
        store = self._store(request, change=True)
        body = await read_body(request)

        async def work() -> Any:
            return tools.reschedule(store, body)

        return json_reply(await _run(work))

    # -- browse, move, replay --------------------------------------------------------------

    async def browse_queue(self, request: web.Request) -> web.Response:
        _vhost, queue = self._queue(request, change=False)
        body = await read_body(request)
        return json_reply(await _run(lambda: tools.browse(queue, body)))

    async def move_messages(self, request: web.Request) -> web.Response:
        vhost, queue = self._queue(request, change=True)
        body = await read_body(request)
        return json_reply(await _run(lambda: tools.move(vhost, queue, body)))

    async def replay_messages(self, request: web.Request) -> web.Response:
        vhost, queue = self._queue(request, change=True)
        body = await read_body(request)
        return json_reply(await _run(lambda: tools.replay(vhost, queue, body)))


def add_message_routes(app: web.Application, api: MessagesApi) -> None:
    r = app.router
    delayed = "/api/exchanges/{vhost}/{name}/delayed"
    r.add_get(delayed, api.list_delayed)
    r.add_post(delayed + "/cancel", api.cancel_delayed)
    r.add_post(delayed + "/reschedule", api.reschedule_delayed)
    r.add_delete(delayed + "/{id}", api.delete_delayed)
    queue = "/api/queues/{vhost}/{name}"
    r.add_post(queue + "/browse", api.browse_queue)
    r.add_post(queue + "/move", api.move_messages)
    r.add_post(queue + "/replay", api.replay_messages)
