"""The ``leveret ctl`` verbs of ``server/message_ops.py`` (Leveret's own, no rabbitmqctl
twin): ``list_delayed``, ``cancel_delayed``, ``reschedule_delayed`` (the pending messages
of a delayed exchange), ``browse_queue``, ``move_messages`` and ``replay_dead_letters``.
Arguments are the management API's JSON bodies plus ``vhost`` and the object's name;
``server/server.py`` registers these with ``server/ctl/admin.py``'s ``Admin``
(``message_verbs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.auth.users import AdminError
from leveret.server import message_ops as tools

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from leveret.model.queue import Queue
    from leveret.model.vhost import VirtualHost
    from leveret.server.ctl.admin import Admin


class _Failed(AdminError):
    def __init__(self, exc: tools.ToolError) -> None:
        super().__init__(str(exc))
        self.exit_code = exc.code  # type: ignore[misc]


def message_verbs(admin: Admin) -> dict[str, Callable[[dict[str, Any]], Awaitable[Any]]]:
    host = admin.host

    def vhost_of(args: dict[str, Any]) -> VirtualHost:
        name = args.get("vhost", "/")
        vhost = host.broker.vhosts.get(name) if isinstance(name, str) else None
        if vhost is None:
            raise AdminError(f"Virtual host '{name}' does not exist")
        return vhost

    def queue_of(args: dict[str, Any]) -> tuple[VirtualHost, Queue]:
        vhost = vhost_of(args)
        queue = vhost.queues.get(args.get("queue", ""))
        if queue is None:
            raise _Failed(
                tools.ToolError(f"no queue '{args.get('queue')}' in vhost '{vhost.name}'", 404, 69)
            )
        return vhost, queue

    def body_of(args: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in args.items() if k not in ("vhost", "queue", "exchange")}

    def guarded(
        work: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def run(args: dict[str, Any]) -> Any:
            try:
                return await work(args)
            except tools.ToolError as exc:
                raise _Failed(exc) from None

        return run

    async def list_delayed(args: dict[str, Any]) -> Any:
        store = tools.delay_store(vhost_of(args), str(args.get("exchange")))
        return tools.pending(store, body_of(args))

    async def cancel_delayed(args: dict[str, Any]) -> Any:
        store = tools.delay_store(vhost_of(args), str(args.get("exchange")))
        return tools.cancel(store, body_of(args))

    async def reschedule_delayed(args: dict[str, Any]) -> Any:
        store = tools.delay_store(vhost_of(args), str(args.get("exchange")))
        return tools.reschedule(store, body_of(args))

    async def browse_queue(args: dict[str, Any]) -> Any:
        _vhost, queue = queue_of(args)
        return await tools.browse(queue, body_of(args))

    async def move_messages(args: dict[str, Any]) -> Any:
        vhost, queue = queue_of(args)
        return await tools.move(vhost, queue, body_of(args))

    async def replay_dead_letters(args: dict[str, Any]) -> Any:
        vhost, queue = queue_of(args)
        return await tools.replay(vhost, queue, body_of(args))

    verbs = {
        "list_delayed": list_delayed,
        "cancel_delayed": cancel_delayed,
        "reschedule_delayed": reschedule_delayed,
        "browse_queue": browse_queue,
        "move_messages": move_messages,
        "replay_dead_letters": replay_dead_letters,
    }
    return {name: guarded(work) for name, work in verbs.items()}
