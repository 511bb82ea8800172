"""What one connection may do in its virtual host, asked before the core acts: the
connection's ``Access`` (``auth/access.py``: RabbitMQ's check points, codes and texts) given
the facts each check needs from the vhost — whether the resource exists, an exchange's
type, how many queues there are — so that every protocol front end makes the same checks,
in RabbitMQ's order, with one call per operation.

Imported by the protocol front ends under ``server/``. How a front end uses it:

1. connection.start offers ``auth.authn.mechanisms(users, certificate_identity=...)``;
   start-ok is decided by ``auth.authn.login(...)`` (refused: answer after ``login.delay``);
2. connection.open: ``access = Access.open(users, user, vhost, peer=...)`` (the vhost's
   existence and access, the connection limits), then ``Guard(access, model_vhost)``;
   ``access.close()`` when the connection is released;
3. ``access.open_channel()`` / ``access.close_channel()`` around each channel (or session);
4. the method of this class named for each operation, before the model call that does it
   (``publish`` wraps the core's own target check, to keep RabbitMQ's order).

Names are the ones the model sees: the front end resolves protocol shortcuts first (0-9-1's
empty queue name meaning the channel's last queue, an empty binding key meaning it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from leveret.model.exchanges import make_exchange_type
from leveret.model.vhost import new_queue_name

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.auth.access import Access
    from leveret.model.publisher import Publisher
    from leveret.model.vhost import VirtualHost

__all__ = ["Guard"]

TOPIC: Final = "topic"


def _text(value: object) -> str | None:
    """A resource name from an argument (a field-table long string is str or bytes); None
    for any other type, which the model refuses or ignores as RabbitMQ does."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


class Guard:
    """One connection's access checks in its vhost."""

    __slots__ = (
        "_exchanges",
        "_generation",
        "_publishable",
        "_store",
        "_topic_checked",
        "access",
        "vhost",
    )

    def __init__(self, access: Access, vhost: VirtualHost) -> None:
        self.access = access
        self.vhost = vhost
        # What publish reads of them once per message, held here: each is an attribute
        # of an interpreted object (a generic lookup in the compiled build), and neither
        # is replaced (the vhost's exchanges are one dict, the access's store one store).
        self._exchanges = vhost.exchanges
        self._store = access.store
        # publish's own cache, valid while the registry's generation is unchanged: the
        # existing exchanges the user may write to, and whether each has topic permissions.
        self._generation = -1
        self._publishable: set[str] = set()
        self._topic_checked: dict[str, bool] = {}

    def _exchange_type(self, name: str) -> str | None:
        exchange = self.vhost.exchanges.get(name)
        return exchange.type_name if exchange is not None else None

    # -- exchanges -----------------------------------------------------------------------

    def exchange_declare(
        self, name: str, type_name: str, *, passive: bool, arguments: Mapping[str, object] | None
    ) -> None:
        if not passive:
            # RabbitMQ refuses an unknown type (503) before any permission is looked at.
            make_exchange_type(type_name)
        self.access.exchange_declare(
            name,
            passive=passive,
            exists=name in self.vhost.exchanges,
            alternate_exchange=_text((arguments or {}).get("alternate-exchange")),
        )

    def exchange_delete(self, name: str) -> None:
        self.access.exchange_delete(name)

    def exchange_bind(self, destination: str, source: str, routing_key: str) -> None:
        self.access.exchange_bind(
            destination, source, routing_key, source_type=self._exchange_type(source)
        )

    def exchange_unbind(self, destination: str, source: str, routing_key: str) -> None:
        self.access.exchange_unbind(
            destination, source, routing_key, source_type=self._exchange_type(source)
        )

    # -- queues --------------------------------------------------------------------------

    def queue_declare(
        self, name: str, *, passive: bool, arguments: Mapping[str, object] | None
    ) -> str:
        """A declaration of ``name``; returns the name to declare: for a server-named queue
        (``name`` "", not passive) the generated name that was checked, to be passed to
        ``VirtualHost.declare_queue(generated_name=)``."""
        server_named = not name and not passive
        if server_named:
            name = new_queue_name()
        vhost = self.vhost
        self.access.queue_declare(
            name,
            passive=passive,
            server_named=server_named,
            exists=vhost.find_queue(name) is not None,
            dead_letter_exchange=_text((arguments or {}).get("x-dead-letter-exchange")),
            queue_count=len(vhost.queues),
        )
        return name

    def queue_delete(self, name: str) -> None:
        self.access.queue_delete(name)

    def queue_purge(self, name: str) -> None:
        self.access.queue_purge(name)

    def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        self.access.queue_bind(
            queue, exchange, routing_key, exchange_type=self._exchange_type(exchange)
        )

    def queue_unbind(self, queue: str, exchange: str, routing_key: str) -> None:
        self.access.queue_unbind(
            queue, exchange, routing_key, exchange_type=self._exchange_type(exchange)
        )

    # -- messages ------------------------------------------------------------------------

    def consume(self, queue: str) -> None:
        self.access.basic_consume(queue)

    def get(self, queue: str) -> None:
        self.access.basic_get(queue)

    def publish(self, exchange: str, routing_key: str, publisher: Publisher) -> None:
        """A publish to ``exchange``, in RabbitMQ's order: write permission (before the
        exchange is looked up), the core's target check (it exists, is not internal),
        then a topic exchange's topic permission on ``routing_key``.

        Once per message, so the common case (a writable, existing, plain exchange seen
        before) costs a generation test, a set lookup and a dictionary lookup."""
        access = self.access
        generation = self._store.generation
        if generation != self._generation:
            self._generation = generation
            self._publishable.clear()
            self._topic_checked.clear()
        known = exchange in self._publishable
        if not known:
            access.write_exchange(exchange)
        target = self._exchanges.get(exchange)
        if target is None or target.internal:
            publisher.check(exchange)  # the core's refusal (404, internal), as it words it
            return
        if target.type_name == TOPIC:
            checked = self._topic_checked.get(exchange)
            if checked is None:
                found = access.store.topic_permission(access.username, access.vhost, exchange)
                checked = self._topic_checked[exchange] = found is not None
            if checked:
                access.topic_write(exchange, routing_key)
        if not known:
            self._publishable.add(exchange)

    def check_user_id(self, user_id: str | None) -> None:
        """A published message's ``user_id`` property (None: not set)."""
        self.access.check_user_id(user_id)
