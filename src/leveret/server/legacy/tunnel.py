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

Each tunnelled connection has a shell of its own (``server/shell/``: its handshake
deadline, login, turns, deferrals), driven by the carrying channel as the asyncio adapter
drives a socket's. Sans-IO: the tunnelled connection's output is taken when the carrying
connection's is (``LegacyConnection.take_output``), and its timers tick with the carrying
connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.server.legacy.handlers import methods_of, properties_of, register
from leveret.server.shell.contract import ShellContext
from leveret.server.shell.shell import Shell

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.server.legacy.channel import LegacyChannel

__all__ = ["CLASS_ID", "Tunnel", "TunnelChannel"]

CLASS_ID = 110
# Turns run in a row for one tunnel's input or timers: plenty for what one request brings.
MAX_TURNS = 1000


class Tunnel:
    """One tunnelled connection: its shell, and its front end once its first octets chose
    one."""

    def __init__(self, name: str, shell: Shell) -> None:
        self.name = name
        self.head = b""
        self.shell = shell
        self.properties: Any = None
        self.meta_data: FieldTable = {}

    def run_turns(self, now: float) -> None:
        shell = self.shell
        for _ in range(MAX_TURNS):
            if not shell.wants_turn:
                return
            shell.run_turn(now)


class TunnelChannel:
    """The tunnels of one channel, by proxy name."""

    def __init__(self, channel: LegacyChannel) -> None:
        self.channel = channel
        self.tunnels: dict[str, Tunnel] = {}

    def received(self, properties: Any, meta_data: FieldTable, body: bytes) -> None:
        name = properties.proxy_name or ""
        legacy = self.channel.legacy
        now = legacy.broker.timers.now
        tunnel = self.tunnels.get(name)
        if tunnel is None:
            shell = Shell(
                ShellContext(
                    broker=legacy.broker,
                    users=legacy.users,
                    limits=legacy.limits,
                    peer=f"{legacy.peer} (tunnel '{name}')",
                    loopback=legacy.shell.loopback,
                    now=now,
                )
            )
            # Its output goes out with the carrying connection's, which is told of it.
            shell.on_output = shell.on_ready = legacy.shell.wrote
            tunnel = self.tunnels[name] = Tunnel(name, shell)
        tunnel.properties = properties
        tunnel.meta_data = meta_data
        shell = tunnel.shell
        if shell.front is None:
            tunnel.head += body
            factory = legacy.choose(tunnel.head)
            if factory is None:
                return
            shell.attach(factory)
            body, tunnel.head = tunnel.head, b""
        shell.data_received(body, now)
        tunnel.run_turns(now)
        self.flush(now)

    def flush(self, now: float) -> None:
        """Send what the tunnelled connections wrote, in tunnel.requests."""
        channel = self.channel
        if channel.closing:
            return
        for name, tunnel in list(self.tunnels.items()):
            shell = tunnel.shell
            tunnel.run_turns(now)
            out = shell.take_output(now)
            if out:
                method = methods_of(channel).TunnelRequest(meta_data=tunnel.meta_data)
                channel.legacy.send_legacy_content(
                    channel.id,
                    method.encode(),
                    CLASS_ID,
                    tunnel.properties.encode(),
                    b"".join(out),
                )
            if shell.should_close_transport:
                shell.connection_lost()
                del self.tunnels[name]

    def next_tick(self, now: float) -> float | None:
        """The earliest deadline of the tunnelled connections' timers."""
        due: float | None = None
        for tunnel in self.tunnels.values():
            when = tunnel.shell.next_deadline(now)
            if when is not None and (due is None or when < due):
                due = when
        return due

    def tick(self, now: float) -> None:
        for tunnel in list(self.tunnels.values()):
            tunnel.shell.tick(now)
        self.flush(now)

    def close(self) -> None:
        tunnels = list(self.tunnels.values())
        self.tunnels.clear()
        for tunnel in tunnels:
            tunnel.shell.connection_lost()


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
