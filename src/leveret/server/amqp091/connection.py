"""The broker's AMQP 0-9-1 front end: the protocol's connection machine
(``protocol/amqp091/connection.py``) given its meaning in the broker core — who may log in
(``auth.authn``) and open which vhost within its limits (``Access.open``),
what the user may do there (``server/guard.py``, checked by the handlers and on publish),
channels with their ``Session`` (counted against the user's channel limit), the method
handlers (``handlers.py``), where a completed publish goes, confirms flushed once per turn,
and the pacing of publishers whose queues' consumers fall behind.

Sans-IO like the machine it extends: ``server/connection.py`` is its asyncio adapter.
"""

from __future__ import annotations

import platform
import socket
from typing import TYPE_CHECKING, Final, cast

from leveret import __version__
from leveret.auth import authn
from leveret.auth.access import Access
from leveret.convert.amqp091 import delivery_mode, wire_message
from leveret.errors import CommandInvalid, NotAllowed, PreconditionFailed
from leveret.model.message import HINT_PERSISTENT
from leveret.protocol.amqp091.connection import DEFAULT_LIMITS, Limits, ServerConnection
from leveret.server.amqp091.channel import Channel
from leveret.server.amqp091.handlers import HANDLERS
from leveret.server.guard import Guard

if TYPE_CHECKING:
    from leveret.auth.users import User, UserStore
    from leveret.model.broker import Broker, Client
    from leveret.protocol.amqp091._generated import methods as m
    from leveret.protocol.amqp091.channel import ChannelState, PendingPublish
    from leveret.protocol.amqp091.connection import LoginOutcome
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.server.amqp091.session import Session

__all__ = ["AMQP091Connection", "Limits"]

# The user-id property's bit in the low octet of the property flags (spec order: 11th of 14),
# and the delivery-mode's in the high octet (4th).
_USER_ID_FLAG: Final = 0x10
_DELIVERY_MODE_FLAG: Final = 0x10


class AMQP091Connection(ServerConnection):
    """One client connection speaking AMQP 0-9-1 to the broker, without I/O."""

    def __init__(
        self,
        broker: Broker,
        users: UserStore,
        *,
        peer: str,
        loopback: bool,
        limits: Limits = DEFAULT_LIMITS,
        now: float = 0.0,
        certificate_identity: str | None = None,
    ) -> None:
        super().__init__(peer=peer, limits=limits, now=now)
        self.broker = broker
        self.users = users
        self.loopback = loopback
        # The user name the client's verified TLS certificate gives (SASL EXTERNAL).
        self.certificate_identity = certificate_identity
        self.client: Client | None = None
        self.user: User | None = None
        # Set at connection.open: what the user may do in the vhost, until released.
        self.access: Access | None = None
        self.guard: Guard | None = None
        self._confirming: set[Session] = set()

    # -- hooks of the machine ------------------------------------------------------------

    def _clock(self, now: float) -> None:
        self.broker.timers.now = now

    def _turn_done(self) -> None:
        for session in self._confirming:
            session.flush_confirms()
        self._confirming.clear()
        paced = False
        if self.published:
            for state in self.channels.values():
                publisher = cast("Channel", state).session.publisher
                if publisher.feeds_backlog:
                    publisher.feeds_backlog = False
                    paced = True
        self.paced = paced

    def _writable_changed(self, writable: bool) -> None:
        client = self.client
        if client is not None and client.writable != writable:
            client.set_writable(writable)

    def _server_properties(self) -> FieldTable:
        # The RabbitMQ extensions this broker speaks, as clients look for them.
        capabilities: FieldTable = {
            "publisher_confirms": True,
            "exchange_exchange_bindings": True,
            "basic.nack": True,
            "consumer_cancel_notify": True,
            "connection.blocked": True,
            "authentication_failure_close": True,
            "per_consumer_qos": True,
            "consumer_priorities": True,
            "direct_reply_to": True,
        }
        return {
            "product": "Leveret",
            "version": __version__,
            "platform": f"Python {platform.python_version()}",
            "copyright": "Copyright the Leveret authors",
            "information": "Licensed under the Apache License 2.0",
            "cluster_name": self.broker.cluster_name or f"leveret@{socket.gethostname()}",
            "capabilities": capabilities,
        }

    def _mechanisms(self) -> list[str]:
        return authn.mechanisms(self.users, certificate_identity=self.certificate_identity)

    def _login(self, mechanism: str, response: bytes) -> LoginOutcome:
        login = authn.login(
            self.users,
            mechanism,
            response,
            loopback=self.loopback,
            peer=self.peer,
            certificate_identity=self.certificate_identity,
        )
        self.user = login.user
        return login

    def _open_vhost(self, name: str) -> None:
        assert self.user is not None
        # RabbitMQ's checks in its order (the vhost, access to it, the connection limits),
        # all 530; the connection counts against the limits from here until released.
        access = Access.open(self.users, self.user, name, peer=self.peer)
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            access.close()
            raise NotAllowed(f"vhost {name} not found")
        self.access = access
        self.guard = Guard(access, vhost)
        product = self.client_properties.get("product", "")
        self.client = self.broker.connect(vhost, self.user.name, f"{self.peer} ({product!s})")
        self.client.writable = self.writable

    def _new_channel(self, channel_id: int) -> ChannelState:
        assert self.client is not None
        assert self.access is not None
        assert self.guard is not None
        self.access.open_channel()
        return Channel(self, channel_id, self.client, self.broker.consumer_timeout, self.guard)

    def _channel_closed(self, channel: ChannelState) -> None:
        session = cast("Channel", channel).session
        if not session.closed and self.access is not None:
            self.access.close_channel()
        session.close()
        self._confirming.discard(session)
        if self.client is not None:
            self.client.close_session(channel.id)

    def _method(self, channel: ChannelState, method: m.Method) -> None:
        handler = HANDLERS.get(method.INDEX)
        if handler is None:
            raise CommandInvalid(f"method {method.NAME} is not allowed from a client")
        handler(cast("Channel", channel), method)

    def _check_publish(self, channel: ChannelState, exchange: str, routing_key: str) -> None:
        channel = cast("Channel", channel)
        channel.guard.publish(exchange, routing_key, channel.session.publisher)

    def _content(
        self, channel: ChannelState, publish: PendingPublish, raw_properties: bytes, body: bytes
    ) -> None:
        message = wire_message(publish.exchange, publish.routing_key, raw_properties, body)
        if (
            raw_properties
            and raw_properties[0] & _DELIVERY_MODE_FLAG
            and not message.hints & HINT_PERSISTENT  # 2 was read already: only 1 is left
        ):
            mode = delivery_mode(raw_properties)
            if mode != 1:
                # RabbitMQ 3.10.8 refuses any other delivery mode (1 and 2 are the spec's).
                raise PreconditionFailed(f"invalid message: {{delivery_mode_unknown,{mode}}}")
        if len(raw_properties) > 1 and raw_properties[1] & _USER_ID_FLAG:
            # Only then are the properties decoded: the user's own name, or an impersonator.
            cast("Channel", channel).guard.check_user_id(message.properties.user_id)
        session = cast("Channel", channel).session
        # Straight to the core's publisher (Session.publish only renames the flags): once
        # per message.
        publisher = session.publisher
        publisher.publish(
            publish.exchange,
            publish.routing_key,
            message,
            report_unroutable=publish.mandatory,
            require_consumer=publish.immediate,
        )
        if publisher.confirms is not None:
            self._confirming.add(session)

    def _ack(self, channel: ChannelState, delivery_tag: int, multiple: bool) -> None:
        cast("Channel", channel).session.ack(delivery_tag, multiple=multiple)

    def _release(self) -> None:
        """Give back everything the connection held in the broker, and its place in the
        connection and channel limits."""
        client = self.client
        self.client = None
        super()._release()
        if client is not None:
            client.close()
        access = self.access
        if access is not None:
            self.access = None
            access.close()
