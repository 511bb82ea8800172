"""The broker's AMQP 0-9-1 front end: the protocol's connection machine
(``protocol/amqp091/connection.py``) given its meaning in the broker core — logins and the
vhost's open through the connection's shell (``server/shell/``: ``auth.authn``,
``Access.open``, the ``Guard`` the handlers and publishes ask, the refusal's delay),
channels with their ``Session`` (counted against the user's channel limit), the method
handlers (``handlers.py``), and where a completed publish goes (the shell flushes its
confirms at the turn's end and paces publishers whose queues' consumers fall behind).

Sans-IO like the machine it extends; the shell drives it (``contract.FrontEnd``).
"""

from __future__ import annotations

import platform
import socket
from typing import TYPE_CHECKING, Final, TypeVar, cast

from leveret import __version__
from leveret.auth import authn
from leveret.convert.amqp091 import delivery_mode, wire_message
from leveret.convert.amqp091_headers import headers_hint
from leveret.errors import AMQPError, CommandInvalid, PreconditionFailed
from leveret.model.completion import Completion, every
from leveret.model.message import HINT_PERSISTENT
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.connection import (
    OUTPUT_HIGH_WATER,
    PACED_TURN_FRAMES,
    TURN_FRAMES,
    Limits,
    ServerConnection,
)
from leveret.server.amqp091.channel import Channel
from leveret.server.amqp091.handlers import HANDLERS
from leveret.server.shell.info import ChannelInfo

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker, Client
    from leveret.protocol.amqp091.channel import ChannelState, PendingPublish
    from leveret.protocol.amqp091.connection import LoginOutcome
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.server.guard import Guard
    from leveret.server.shell.shell import Shell

__all__ = ["AMQP091Connection", "Limits"]

# The user-id property's bit in the low octet of the property flags (spec order: 11th of 14),
# and the delivery-mode's in the high octet (4th).
_USER_ID_FLAG: Final = 0x10
_DELIVERY_MODE_FLAG: Final = 0x10
_HEADERS_FLAG: Final = 0x20


class AMQP091Connection(ServerConnection):
    """One client connection speaking AMQP 0-9-1 to the broker, without I/O."""

    protocol = "AMQP 0-9-1"
    turn_budget = TURN_FRAMES
    paced_turn_budget = PACED_TURN_FRAMES
    output_high_water = OUTPUT_HIGH_WATER
    reads_when_blocked = False
    # Its turns write only to the shell's Output, and ``next_tick`` moves earlier only with
    # a write (the connection opening, a close): the shell may skip the adapter's flush
    # and deadline after a turn that wrote nothing (``Shell.idle_turn``).
    quiet_turns = True

    def __init__(self, shell: Shell) -> None:
        super().__init__(
            peer=shell.peer,
            limits=shell.limits,
            now=shell.created,
            output=shell.output,
            heartbeat_phase=shell.heartbeat_phase,
        )
        self.shell = shell
        self.broker: Broker = shell.broker
        self.users: UserStore = shell.users
        # What connection.close's close-ok waits for (``_release``).
        self._withdrawn: Completion[None] | None = None

    # What the channels and handlers ask of their connection: the shell's, once open.

    @property
    def client(self) -> Client | None:
        return self.shell.client

    @property
    def guard(self) -> Guard | None:
        return self.shell.guard

    # -- FrontEnd (server/shell/contract.py) ------------------------------------------------

    def hold_input(self, channel: int | None) -> bool:
        self.hold_channel(0 if channel is None else channel)
        return True

    def release_input(self, channel: int | None) -> None:
        self.release_channel(0 if channel is None else channel)

    def writable_changed(self, writable: bool) -> None:
        """The shell tells the model client; a channel has nothing of its own to do."""

    def defer(
        self,
        channel: ChannelState,
        completion: Completion[T],
        reply: Callable[[T], None],
        *,
        class_id: int = 0,
        method_id: int = 0,
    ) -> None:
        """A method of ``channel`` completes later (a declaration written to the cluster's
        metadata store, an operation on a queue led by another node): the channel's
        further frames wait (the connection's others go on) until ``completion`` is done;
        then ``reply(value)`` sends the answer, or the error it failed with closes the
        channel (or the connection, for a hard one) as the method's own error would,
        named ``class_id``/``method_id``."""

        def then(done: Completion[T]) -> None:
            if self.finished or self.channels.get(channel.id) is not channel or channel.closing:
                return  # the channel (or the connection) went while it waited
            try:
                reply(done.result())
            except AMQPError as exc:
                if not exc.class_id:
                    exc.class_id, exc.method_id = class_id, method_id
                self.fail_channel(channel, exc)

        self.shell.defer(completion, then, channel=channel.id)

    def channel_infos(self) -> list[ChannelInfo]:
        out = []
        for number, state in sorted(self.channels.items()):
            session = cast("Channel", state).session
            publisher = session.publisher
            tx = publisher.tx
            out.append(
                ChannelInfo(
                    number,
                    session,
                    session.consumers,
                    unacked=len(session.unacked),
                    uncommitted=len(tx.publishes) if tx is not None else 0,
                    prefetch_count=session.prefetch_count,
                    global_prefetch_count=session.global_prefetch_count,
                    confirm=publisher.confirms is not None,
                    transactional=tx is not None,
                    counters=(
                        publisher.n_publish,
                        publisher.n_confirm,
                        publisher.n_return_unroutable,
                        publisher.n_drop_unroutable,
                        session.n_deliver,
                        session.n_deliver_no_ack,
                        session.n_get,
                        session.n_get_no_ack,
                        session.n_ack,
                        session.n_redeliver,
                        session.n_get_empty,
                    ),
                )
            )
        return out

    # -- hooks of the machine ------------------------------------------------------------

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
        return authn.mechanisms(self.users, certificate_identity=self.shell.certificate_identity)

    def _login(self, mechanism: str, response: bytes) -> LoginOutcome:
        outcome = self.shell.login(mechanism, response)
        if outcome.ok:
            info = self.shell.info
            info.client_properties = self.client_properties
            info.channel_max = self.limits.channel_max
            info.frame_max = self.limits.frame_max
        return outcome

    def _delay_refusal(self, delay: float) -> None:
        shell = self.shell
        shell.refuse(delay, lambda: self.answer_refusal(shell.now))

    def _open_vhost(self, name: str) -> None:
        # RabbitMQ's checks in its order (the vhost, access to it, the connection limits),
        # all 530 (OpenRefused is a NotAllowed); the shell counts the connection from here.
        product = self.client_properties.get("product", "")
        info = self.shell.info
        info.channel_max, info.frame_max, info.timeout = (
            self.channel_max,
            self.frame_max,
            self.heartbeat,
        )
        self.shell.open_vhost(name, label=str(product))

    def _new_channel(self, channel_id: int) -> ChannelState:
        shell = self.shell
        client = shell.client
        guard = shell.guard
        assert client is not None
        assert guard is not None
        shell.open_channel()
        return Channel(self, channel_id, client, self.broker.consumer_timeout, guard)

    def _channel_closed(self, channel: ChannelState) -> None:
        session = cast("Channel", channel).session
        shell = self.shell
        if not session.closed:
            shell.close_channel()
        session.close()
        client = shell.client
        if client is not None:
            client.close_session(channel.id)

    def _channel_close_ok(self, channel: ChannelState, mark: int) -> None:
        # Consumers of queues led by other nodes are gone once those leaders let them go
        # (``Session.withdrawn``): close-ok then, as cancel-ok waits (``basic_cancel``),
        # so that a consume reaching such a leader another way is not refused for them.
        withdrawn = cast("Channel", channel).session.withdrawn
        if withdrawn is None or withdrawn.done:
            super()._channel_close_ok(channel, mark)
            return
        channel_id = channel.id

        def answer(_done: Completion[None]) -> None:
            if not self.finished:
                self.send_method(channel_id, m.ChannelCloseOk())

        # The channel's number holds its input (a client may not reuse it before close-ok).
        self.shell.defer(withdrawn, answer, channel=channel_id)

    def _connection_close_ok(self, mark: int) -> None:
        # As ``_channel_close_ok``, for the consumers of every channel the close released.
        withdrawn, self._withdrawn = self._withdrawn, None
        if withdrawn is None or withdrawn.done:
            super()._connection_close_ok(mark)
            return

        def answer(_done: Completion[None]) -> None:
            if not self.should_close_transport:  # closed meanwhile (its close deadline)
                self.send_method(0, m.ConnectionCloseOk())

        self.shell.defer(withdrawn, answer)

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
        if raw_properties and raw_properties[0] & _HEADERS_FLAG:
            # Read once here, so that neither the router (CC, BCC) nor a stream (its
            # de-duplication headers) decodes them.
            message.hints |= headers_hint(raw_properties)
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
        self.shell.published_by(publisher)

    def _ack(self, channel: ChannelState, delivery_tag: int, multiple: bool) -> None:
        cast("Channel", channel).session.ack(delivery_tag, multiple=multiple)

    def _release(self) -> None:
        """Give back everything the connection held in the broker, and its place in the
        connection and channel limits (the shell's); what its channels' consumers' queues
        let go of later is kept for close-ok (``_connection_close_ok``)."""
        sessions = [cast("Channel", channel).session for channel in self.channels.values()]
        super()._release()
        self.shell.release()
        self._withdrawn = every(session.withdrawn for session in sessions)
