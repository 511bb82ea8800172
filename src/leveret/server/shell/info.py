"""What the management API, Prometheus and ``leveret ctl`` may know about a connection:
``ConnectionInfo`` (one per connection, kept up to date by its shell and front end) and
``ChannelInfo`` (one per channel or session, made when asked).

The field names are RabbitMQ's connection and channel info items (``rabbit_reader``,
``rabbit_amqp_reader``, ``rabbit_stream_reader``, ``rabbit_channel``), so the renderers copy
them without translating. ``protocol`` is RabbitMQ's name for the protocol and version:
``AMQP 0-9-1``, ``AMQP 0-9``, ``AMQP 0-8``, ``AMQP 1-0``, ``stream``; Leveret's others are
``AMQP 0-10`` and ``AMQP/Fast 0.8a2``. Nothing here is read on the per-message path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from leveret.model.consumer import Consumer

__all__ = ["CHANNEL_COUNTERS", "ChannelInfo", "ConnectionInfo"]

# The per-channel message counters, in the order ``ChannelInfo.counters`` holds them
# (RabbitMQ's channel message_stats names).
CHANNEL_COUNTERS = (
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "ack",
    "redeliver",
    "get_empty",
)
NO_COUNTS = (0,) * len(CHANNEL_COUNTERS)


@dataclass(slots=True)
class ConnectionInfo:
    """One connection as RabbitMQ's info items describe it."""

    protocol: str = ""
    peer_host: str = ""
    peer_port: int = 0
    host: str = ""  # the local address the client connected to
    port: int = 0
    # An in-process peer's name (leveret.links' connections), which is its whole name.
    label: str = ""
    ssl: bool = False
    ssl_protocol: str | None = None
    ssl_cipher: str | None = None
    # Wall-clock seconds of the accept.
    connected_at: float = 0.0
    # "starting" until the vhost is open, then "running" ("blocked" while the memory alarm
    # holds it), "closing" once a close is under way. Operators see it through
    # ``Shell.state``, which adds "flow" (a publisher held while its queue is far behind).
    state: str = "starting"
    auth_mechanism: str = ""  # the SASL mechanism the client logged in with
    user: str = ""
    vhost: str = ""
    # The client's own description: 0-9-1 start-ok's client-properties, 1.0 open's
    # properties, the stream protocol's peer properties, 0-10's start-ok properties.
    client_properties: Mapping[str, Any] = field(default_factory=dict)
    container_id: str | None = None  # AMQP 1.0's open
    channel_max: int = 0
    frame_max: int = 0
    timeout: int = 0  # the heartbeat (idle time-out) in seconds, 0 for none
    # Socket counters, as RabbitMQ's recv_oct / recv_cnt / send_oct / send_cnt.
    recv_oct: int = 0
    recv_cnt: int = 0
    send_oct: int = 0
    send_cnt: int = 0

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: ``peer -> local address``."""
        if self.label:
            return self.label
        peer = _address(self.peer_host, self.peer_port)
        if not self.host:
            return peer
        return f"{peer} -> {_address(self.host, self.port)}"

    @property
    def user_provided_name(self) -> str | None:
        """The name the client gave itself (0-9-1's ``connection_name`` property)."""
        provided = self.client_properties.get("connection_name")
        if isinstance(provided, bytes):
            return provided.decode(errors="replace")
        return provided if isinstance(provided, str) else None


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """One channel (0-9-1, 0-8/0-9, AMQP/Fast) or session (1.0, 0-10) of a connection."""

    number: int
    # The object that is this channel for as long as it lives (a sampler keys its series
    # by it, so that a reused number starts a new series).
    key: object
    consumers: Mapping[str, Consumer]
    unacked: int = 0
    uncommitted: int = 0  # messages published in the open transaction
    prefetch_count: int = 0
    global_prefetch_count: int = 0
    confirm: bool = False
    transactional: bool = False
    links: int = 0  # AMQP 1.0: the session's links
    counters: tuple[int, ...] = NO_COUNTS  # CHANNEL_COUNTERS, in that order
