"""The ``tunnel`` class (110) of AMQP 0-8 and 0-9: another protocol's frames carried in
``tunnel.request`` contents, with the tunnel's headers.

The reading taken: the broker is the peer at the far end of the tunnel. The tunnelled bytes
are a connection of any protocol the broker speaks, chosen from its first octets as the
listener chooses (``server/frontend.py``'s ``choose``, which the carrying connection is
built with: 0-9-1, 1.0, 0-10, 0-9, 0-8, AMQP/Fast), and run by that protocol's front end on
the same core, as if they had come over a socket of their own (their own login, vhost,
permissions and limits). A tunnel is named by the request's ``proxy-name`` property within
its channel: every ``tunnel.request`` with that name feeds the same connection, and
everything that connection sends comes back in ``tunnel.request``s with the same properties
(``headers``, ``proxy-name``, ``data-name``, ``durable``, ``broadcast``, echoed as the
client sent them last) and ``meta-data``. When the tunnelled connection ends (its own close
handshake, a timeout) the name is free again; closing the channel drops the connection as a
lost socket would. ``durable`` and ``broadcast`` have no meaning for a point-to-point tunnel
and are only echoed.

Sans-IO: the tunnelled front end's output is taken when the carrying connection's is
(``LegacyConnection.take_output``), and its timers tick with the carrying connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.server.frontend_contract import FrontEndContext, earliest, tick_schedule
from leveret.server.legacy.handlers import methods_of, properties_of, register

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.server.frontend_contract import FrontEnd
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["CLASS_ID", "Tunnel", "TunnelChannel"]

CLASS_ID = 110


class Tunnel:
    """One tunnelled connection: its front end (once its first octets chose one)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.head = b""
        self.front_end: FrontEnd | None = None
        self.properties: Any = None
        self.meta_data: FieldTable = {}


class TunnelChannel:
    """The tunnels of one channel, by proxy name."""

    def __init__(self, channel: LegacyChannel) -> None:
        self.channel = channel
        self.tunnels: dict[str, Tunnel] = {}

    def received(self, properties: Any, meta_data: FieldTable, body: bytes) -> None:
        name = properties.proxy_name or ""
        tunnel = self.tunnels.get(name)
        if tunnel is None:
            tunnel = self.tunnels[name] = Tunnel(name)
        tunnel.properties = properties
        tunnel.meta_data = meta_data
        legacy = self.channel.legacy
        now = legacy.broker.timers.now
        front_end = tunnel.front_end
        if front_end is None:
            tunnel.head += body
            factory = legacy.choose(tunnel.head)
            if factory is None:
                return
            front_end = tunnel.front_end = factory(
                FrontEndContext(
                    broker=legacy.broker,
                    users=legacy.users,
                    limits=legacy.limits,
                    peer=f"{legacy.peer} (tunnel '{name}')",
                    loopback=legacy.loopback,
                    now=now,
                )
            )
            front_end.on_output = legacy._wrote
            body, tunnel.head = tunnel.head, b""
        front_end.data_received(body, now)
        while front_end.pending:
            front_end.run_turn()
        self.flush(now)

    def flush(self, now: float) -> None:
        """Send what the tunnelled connections wrote, in tunnel.requests."""
        channel = self.channel
        if channel.closing:
            return
        for name, tunnel in list(self.tunnels.items()):
            front_end = tunnel.front_end
            if front_end is None:
                continue
            out = front_end.take_output(now)
            if out:
                method = methods_of(channel).TunnelRequest(meta_data=tunnel.meta_data)
                channel.legacy.send_legacy_content(
                    channel.id,
                    method.encode(),
                    CLASS_ID,
                    tunnel.properties.encode(),
                    b"".join(out),
                )
            if front_end.should_close_transport:
                front_end.connection_lost()
                del self.tunnels[name]

    def next_tick(self, now: float) -> float | None:
        """The earliest deadline of the tunnelled connections' timers."""
        due: float | None = None
        for tunnel in self.tunnels.values():
            if tunnel.front_end is not None:
                due = earliest(due, tick_schedule(tunnel.front_end)(now))
        return due

    def tick(self, now: float) -> None:
        for tunnel in list(self.tunnels.values()):
            if tunnel.front_end is not None:
                tunnel.front_end.tick(now)
        self.flush(now)

    def close(self) -> None:
        tunnels = list(self.tunnels.values())
        self.tunnels.clear()
        for tunnel in tunnels:
            if tunnel.front_end is not None:
                tunnel.front_end.connection_lost()


def tunnel_channel(channel: LegacyChannel) -> TunnelChannel:
    extra = channel.extras.get("tunnel")
    if extra is None:
        extra = channel.extras["tunnel"] = TunnelChannel(channel)
    assert isinstance(extra, TunnelChannel)
    return extra


@register(m08.TunnelRequest, m09.TunnelRequest)
def tunnel_request(channel: LegacyChannel, method: Any) -> None:
    props_cls = properties_of(channel).TunnelProperties

    def done(raw: bytes, body: bytes) -> None:
        tunnel_channel(channel).received(props_cls.decode(raw), method.meta_data, body)

    channel.start_assembly(CLASS_ID, method.METHOD_ID, done)
