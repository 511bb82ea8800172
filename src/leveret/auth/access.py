"""What one user may do in one virtual host: RabbitMQ's access checks, named for its check
points, raising ``leveret.errors`` with RabbitMQ 3.10's codes and texts.

Every front end holds one :class:`Access` per connection (``Access.open`` at
connection.open) and calls, before the model acts:

- the single check points, as RabbitMQ names them: ``configure_queue``,
  ``configure_exchange``, ``write_exchange``, ``write_queue``, ``read_queue``,
  ``read_exchange``, ``topic_write``, ``topic_read``;
- or one method per AMQP operation (``exchange_declare``, ``queue_bind``,
  ``basic_publish``, ...) that makes RabbitMQ's checks in RabbitMQ's order, including the
  name checks that come between them (the default exchange, ``amq.`` names), so the first
  refusal a client sees is the one RabbitMQ would send.

Checks read the store live; results are cached per connection until the store changes
(``UserStore.generation``), so a publish costs one dictionary lookup. The resource
names in texts are RabbitMQ's: the default exchange is ``amq.default``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from leveret.auth import limits as limit_texts
from leveret.auth.limits import MAX_CHANNELS, MAX_CONNECTIONS, MAX_QUEUES
from leveret.auth.permissions import topic_variables
from leveret.errors import AccessRefused, NotAllowed, PreconditionFailed

if TYPE_CHECKING:
    from leveret.auth.permissions import Kind
    from leveret.auth.users import User, UserStore

log = logging.getLogger("leveret.auth")

DEFAULT_EXCHANGE = "amq.default"
TOPIC = "topic"
# Direct reply-to: declaring or consuming it is never checked (RabbitMQ).
REPLY_TO = "amq.rabbitmq.reply-to"


class OpenRefused(NotAllowed):
    """connection.open refused (530, RabbitMQ's text), with ``why`` for the protocols that
    have a code of their own for each reason: ``"not_found"`` (no such vhost), ``"access"``
    (the user has no permissions there) or ``"limit"`` (a connection limit)."""

    def __init__(self, why: str, refusal: NotAllowed) -> None:
        super().__init__(refusal.reply_text, hard=True)
        self.why = why


def _default_exchange_refused() -> AccessRefused:
    return AccessRefused("operation not permitted on the default exchange")


class Access:
    """One user's rights in one vhost, for one connection."""

    def __init__(self, store: UserStore, user: User, vhost: str) -> None:
        self.store = store
        self.user = user
        self.username = user.name
        self.vhost = vhost
        self._variables = topic_variables(user.name, vhost)
        self._generation = -1
        self._cache: dict[tuple[Kind, str, str], bool] = {}
        self.counted = False
        self.channels = 0

    def __repr__(self) -> str:
        return f"Access({self.username!r}, {self.vhost!r})"

    # -- connection.open / close, channel.open / close --------------------------------------

    @classmethod
    def open(cls, store: UserStore, user: User, vhost: str, *, peer: str = "") -> Access:
        """connection.open: RabbitMQ's checks in its order (node connection limit, vhost
        exists, vhost access, vhost connection limit, user connection limit), then the
        connection is counted until :meth:`close`. Raises ``OpenRefused``."""
        tracker = store.tracker
        if store.connection_max is not None and tracker.total >= store.connection_max:
            raise OpenRefused("limit", limit_texts.node_connection_limit(store.connection_max))
        info = store.vhosts.get(vhost)
        if info is None:
            raise OpenRefused("not_found", NotAllowed(f"vhost {vhost} not found"))
        if (user.name, vhost) not in store.permissions:
            log.warning(
                "connection %s: user '%s' refused: no access to vhost '%s'",
                peer or "?",
                user.name,
                vhost,
            )
            raise OpenRefused(
                "access", NotAllowed(f"access to vhost '{vhost}' refused for user '{user.name}'")
            )
        limit = info.limits.get(MAX_CONNECTIONS)
        if limit is not None and tracker.by_vhost[vhost] >= limit:
            raise OpenRefused("limit", limit_texts.vhost_connection_limit(vhost, user.name, limit))
        limit = user.limits.get(MAX_CONNECTIONS)
        if limit is not None and tracker.by_user[user.name] >= limit:
            raise OpenRefused("limit", limit_texts.user_connection_limit(user.name, limit))
        access = cls(store, user, vhost)
        tracker.connection_opened(user.name, vhost)
        access.counted = True
        return access

    def close(self) -> None:
        """The connection is gone: it and its channels no longer count. Idempotent."""
        tracker = self.store.tracker
        while self.channels:
            self.close_channel()
        if self.counted:
            self.counted = False
            tracker.connection_closed(self.username, self.vhost)

    def open_channel(self) -> None:
        """channel.open: the user's ``max-channels`` (all of the user's connections)."""
        limit = self.user.limits.get(MAX_CHANNELS)
        if limit is not None and self.store.tracker.channels_by_user[self.username] >= limit:
            raise limit_texts.user_channel_limit(self.username, limit)
        self.store.tracker.channel_opened(self.username)
        self.channels += 1

    def close_channel(self) -> None:
        if self.channels:
            self.channels -= 1
            self.store.tracker.channel_closed(self.username)

    # -- the check points ------------------------------------------------------------------------

    def allowed(self, kind: Kind, resource: str, name: str) -> bool:
        """Whether the user's ``kind`` pattern in this vhost matches ``name``; ``resource``
        ("queue" or "exchange") only keys the cache."""
        if self._generation != self.store.generation:
            self._cache.clear()
            self._generation = self.store.generation
        key = (kind, resource, name)
        result = self._cache.get(key)
        if result is None:
            permission = self.store.permissions.get((self.username, self.vhost))
            result = permission is not None and permission.allows(kind, name)
            self._cache[key] = result
        return result

    def _check(self, kind: Kind, resource: str, name: str) -> None:
        if resource == "exchange" and not name:
            name = DEFAULT_EXCHANGE
        if not self.allowed(kind, resource, name):
            raise AccessRefused(
                f"access to {resource} '{name}' in vhost '{self.vhost}' refused for user "
                f"'{self.username}'"
            )

    def configure_queue(self, name: str) -> None:
        self._check("configure", "queue", name)

    def configure_exchange(self, name: str) -> None:
        self._check("configure", "exchange", name)

    def write_exchange(self, name: str) -> None:
        self._check("write", "exchange", name)

    def write_queue(self, name: str) -> None:
        self._check("write", "queue", name)

    def read_queue(self, name: str) -> None:
        self._check("read", "queue", name)

    def read_exchange(self, name: str) -> None:
        self._check("read", "exchange", name)

    def _topic(self, kind: Kind, exchange: str, routing_key: str) -> None:
        permission = self.store.topic_permission(self.username, self.vhost, exchange)
        if permission is None:
            return  # no topic permissions on this exchange: every routing key is allowed
        assert kind != "configure"
        if not permission.allows(kind, routing_key, self._variables):
            raise AccessRefused(
                f"access to topic '{routing_key}' in exchange '{exchange}' in vhost "
                f"'{self.vhost}' refused for user '{self.username}'"
            )

    def topic_write(self, exchange: str, routing_key: str) -> None:
        """A publish with ``routing_key`` to the topic exchange ``exchange``."""
        self._topic("write", exchange, routing_key)

    def topic_read(self, exchange: str, routing_key: str) -> None:
        """A binding with ``routing_key`` from the topic exchange ``exchange``."""
        self._topic("read", exchange, routing_key)

    # -- one method per operation, in RabbitMQ's order -------------------------------------------

    def exchange_declare(
        self,
        name: str,
        *,
        passive: bool = False,
        exists: bool = False,
        alternate_exchange: str | None = None,
    ) -> None:
        """exchange.declare. ``exists``: the exchange exists already (then its arguments
        are not looked at); ``alternate_exchange``: the ``alternate-exchange`` argument."""
        if not name:
            raise _default_exchange_refused()
        if passive:
            return
        self.configure_exchange(name)
        if exists:
            return
        if name.startswith("amq."):
            raise AccessRefused(f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if alternate_exchange is not None:
            self.read_exchange(name)
            self.write_exchange(alternate_exchange)

    def exchange_delete(self, name: str) -> None:
        if not name:
            raise _default_exchange_refused()
        if name.startswith("amq."):
            raise AccessRefused(
                f"deletion of system exchange '{name}' in vhost '{self.vhost}' not allowed"
            )
        self.configure_exchange(name)

    def queue_declare(
        self,
        name: str,
        *,
        passive: bool = False,
        server_named: bool = False,
        exists: bool = False,
        dead_letter_exchange: str | None = None,
        queue_count: int = 0,
    ) -> None:
        """queue.declare. ``name`` is the queue's real name (``server_named``: the client
        sent "" and ``name`` is the generated ``amq.gen-...``); ``exists``: a queue of that
        name exists already;
        ``dead_letter_exchange``: the ``x-dead-letter-exchange`` argument;
        ``queue_count``: the queues in the vhost now (its ``max-queues`` limit)."""
        if passive or name.startswith(REPLY_TO):
            return
        if name.startswith("amq.") and not server_named:
            raise AccessRefused(f"queue name '{name}' contains reserved prefix 'amq.*'")
        self.configure_queue(name)
        if exists:
            return
        if dead_letter_exchange is not None:
            self.read_queue(name)
            self.write_exchange(dead_letter_exchange)
        self.check_queue_limit(name, queue_count)

    def check_queue_limit(self, name: str, queue_count: int) -> None:
        """A new queue in this vhost: its ``max-queues``."""
        info = self.store.vhosts.get(self.vhost)
        limit = info.limits.get(MAX_QUEUES) if info is not None else None
        if limit is not None and queue_count >= limit:
            raise limit_texts.vhost_queue_limit(name, self.vhost, limit)

    def queue_delete(self, name: str) -> None:
        self.configure_queue(name)

    def queue_purge(self, name: str) -> None:
        self.read_queue(name)

    def _binding(
        self,
        destination_kind: str,
        destination: str,
        source: str,
        routing_key: str,
        source_type: str | None,
    ) -> None:
        # RabbitMQ: write on the destination, then neither end may be the default
        # exchange, then read on the source, then (topic sources) the routing key.
        self._check("write", destination_kind, destination)
        if not source or (destination_kind == "exchange" and not destination):
            raise _default_exchange_refused()
        self.read_exchange(source)
        if source_type == TOPIC:
            self.topic_read(source, routing_key)

    def queue_bind(
        self, queue: str, exchange: str, routing_key: str, *, exchange_type: str | None
    ) -> None:
        """queue.bind; ``exchange_type`` is None when the exchange does not exist."""
        self._binding("queue", queue, exchange, routing_key, exchange_type)

    def queue_unbind(
        self, queue: str, exchange: str, routing_key: str, *, exchange_type: str | None
    ) -> None:
        self._binding("queue", queue, exchange, routing_key, exchange_type)

    def exchange_bind(
        self, destination: str, source: str, routing_key: str, *, source_type: str | None
    ) -> None:
        self._binding("exchange", destination, source, routing_key, source_type)

    def exchange_unbind(
        self, destination: str, source: str, routing_key: str, *, source_type: str | None
    ) -> None:
        self._binding("exchange", destination, source, routing_key, source_type)

    def basic_publish(self, exchange: str, routing_key: str, *, exchange_type: str | None) -> None:
        """basic.publish: write on the exchange (before it is looked up), and for a topic
        exchange the routing key. ``exchange_type`` is None when it does not exist."""
        self._check("write", "exchange", exchange)
        if exchange_type == TOPIC:
            self.topic_write(exchange, routing_key)

    def basic_consume(self, queue: str) -> None:
        if queue != REPLY_TO:
            self.read_queue(queue)

    def basic_get(self, queue: str) -> None:
        self.read_queue(queue)

    def check_user_id(self, user_id: str | None) -> None:
        """A published message's user_id must be the user's own unless the user has the
        ``impersonator`` tag."""
        if user_id is None or user_id == self.username or "impersonator" in self.user.tags:
            return
        raise PreconditionFailed(
            f"user_id property set to '{user_id}' but authenticated user was '{self.username}'"
        )
