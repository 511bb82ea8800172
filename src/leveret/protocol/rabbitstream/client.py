"""The client role of RabbitMQ's stream protocol as a sans-IO machine: bytes in, commands out.

Every client-side user of the stream protocol (the Spark connector's blocking client, tests,
benchmarks) drives this one machine and keeps only its own I/O. Anyone may import it; it
imports only the codec beside it.

Theory of operation (PROTOCOL.adoc, "Connection set up"; the h11 contract):

- ``receive_data(data, now)`` takes whatever the socket returned and gives back the commands
  the caller has to see, in order; ``data_to_send()`` gives back every byte the machine wants
  written. No sockets, no clock: ``now`` is monotonic seconds, passed in.
- Handshake, run by the machine from the constructor on: peer-properties → sasl-handshake →
  sasl-authenticate (PLAIN) → the server's tune is answered with ours (frame_max and
  heartbeat the lower non-zero of both offers) → open (the vhost). Frames from the server
  are accepted up to ``receive_max``, not the negotiated frame_max: a deliver carries one
  whole chunk, which RabbitMQ 3.10 and Leveret send whatever its size (a chunk is cut by
  the writer's batching, not by any reader's frame_max). The handshake's commands
  are not returned; :attr:`ClientConnection.state` is ``OPEN`` once open is answered OK.
  A refusal (any code but OK) ends in ``CLOSED`` with :attr:`ClientConnection.refused` set
  to ``(what, code)``.
- Requests: :meth:`ClientConnection.request` gives the next correlation id to a command
  built by the caller and queues it; the response comes back from ``receive_data`` (its
  ``correlation_id`` says which). Commands without one (publish, credit, store offset) go
  through :meth:`ClientConnection.send`.
- The server's close is answered (close response OK) and returned; the state is then
  ``CLOSED``. :meth:`ClientConnection.close` sends ours; its response also ends in ``CLOSED``.
- Heartbeats: ``tick(now)`` queues one when nothing was written for half the interval and
  returns False once the server has been silent for two intervals.
- The server breaking the protocol (a frame the codec refuses) raises the codec's
  :class:`~leveret.protocol.rabbitstream.errors.StreamProtocolError`, after queueing a close
  with its code; the machine is then ``CLOSED``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.codec import Role, StreamCodec
from leveret.protocol.rabbitstream.constants import Code, Key
from leveret.protocol.rabbitstream.errors import StreamProtocolError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ClientConnection", "ClientState"]


class ClientState(enum.Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSING = "closing"  # we sent close: waiting for its response
    CLOSED = "closed"


# Handshake steps by the key of the response that ends them (the tune is not a response).
_PEER_PROPERTIES = 1
_SASL_HANDSHAKE = 2
_SASL_AUTHENTICATE = 3
_OPEN = 4


# Largest frame taken from the server (0 = any): far above any chunk a writer batches, low
# enough that a corrupt size field cannot make the client buffer gigabytes.
RECEIVE_MAX = 64 << 20


def _negotiate(ours: int, theirs: int) -> int:
    """The lower non-zero of two limits (0 = none)."""
    if not ours:
        return theirs
    if not theirs:
        return ours
    return min(ours, theirs)


class ClientConnection:
    """One client-side stream-protocol connection; see the module docstring."""

    def __init__(
        self,
        username: str,
        password: str,
        vhost: str = "/",
        *,
        properties: dict[str, str] | None = None,
        frame_max: int = 1 << 20,
        heartbeat: int = 0,
        receive_max: int = RECEIVE_MAX,
    ) -> None:
        self.username = username
        self.password = password
        self.vhost = vhost
        self.codec = StreamCodec(Role.CLIENT)
        self.state = ClientState.HANDSHAKE
        self.frame_max = frame_max
        self.receive_max = receive_max
        self.heartbeat = heartbeat
        self.server_properties: dict[str, str] = {}
        self.open_properties: dict[str, str] = {}
        self.refused: tuple[str, int] | None = None
        self.close_code = 0
        self.close_reason = ""
        self._out: list[bytes] = []
        self._correlation = 0
        self._step: dict[int, int] = {}  # handshake correlation id -> step
        self._last_sent = 0.0
        self._last_received = 0.0
        self._handshake(_PEER_PROPERTIES, lambda cid: c.PeerProperties(cid, dict(properties or {})))

    @property
    def closed(self) -> bool:
        return self.state is ClientState.CLOSED

    # -- output ------------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Everything queued since the last call (``b""`` when nothing)."""
        if not self._out:
            return b""
        out, self._out = self._out, []
        return out[0] if len(out) == 1 else b"".join(out)

    @property
    def output_size(self) -> int:
        return sum(len(piece) for piece in self._out)

    def send(self, command: c.Command) -> None:
        """Queue a command that has no correlation id (publish, credit, store offset...)."""
        self._out.append(self.codec.send(command))

    def send_raw(self, frame: bytes) -> None:
        """Queue a frame the caller encoded itself (a publish built in one piece)."""
        self._out.append(frame)

    def request(self, make: Callable[[int], c.Command]) -> int:
        """Queue ``make(correlation_id)``; returns the id its response will carry."""
        if self.state is not ClientState.OPEN:
            raise RuntimeError(f"request on a connection that is {self.state.value}")
        self._correlation += 1
        self._out.append(self.codec.send(make(self._correlation)))
        return self._correlation

    def close(self, reason: str = "bye") -> None:
        """Send close; the state is CLOSING until the server answers."""
        if self.state is ClientState.OPEN:
            self._correlation += 1
            self._out.append(self.codec.send(c.Close(self._correlation, Code.OK, reason)))
            self.state = ClientState.CLOSING
        elif self.state is ClientState.HANDSHAKE:
            self.state = ClientState.CLOSED

    def tick(self, now: float) -> bool:
        """Heartbeats: queue one when due; False when the server has gone silent."""
        if not self.heartbeat or self.state is not ClientState.OPEN:
            return True
        if now - self._last_received > 2 * self.heartbeat:
            return False
        if now - self._last_sent >= self.heartbeat / 2:
            self._out.append(c.Heartbeat().encode())
            self._last_sent = now
        return True

    def sent(self, now: float) -> None:
        """The caller wrote our output at ``now`` (heartbeats are due from there)."""
        self._last_sent = now

    # -- input -------------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> list[c.Command]:
        """The commands completed by ``data`` that the caller must see, in order."""
        self._last_received = now
        try:
            commands = self.codec.receive(data)
        except StreamProtocolError as exc:
            if self.state is ClientState.OPEN:
                self._correlation += 1
                self._out.append(c.Close(self._correlation, exc.code, str(exc)).encode())
            self.state = ClientState.CLOSED
            raise
        if self.state is ClientState.OPEN:
            # The common case: nothing of the handshake or close is in the way.
            for command in commands:
                if type(command) is c.Close or type(command) is c.Heartbeat:
                    return self._filter(commands)
            return commands
        return self._filter(commands)

    def _filter(self, commands: list[c.Command]) -> list[c.Command]:
        out: list[c.Command] = []
        for command in commands:
            t = type(command)
            if t is c.Heartbeat:
                continue
            if t is c.Close:
                assert isinstance(command, c.Close)
                self._out.append(c.Response(Key.CLOSE, command.correlation_id, Code.OK).encode())
                self.close_code, self.close_reason = command.code, command.reason
                self.state = ClientState.CLOSED
                out.append(command)
                continue
            if self.state is ClientState.HANDSHAKE:
                self._handshake_step(command)
                continue
            if self.state is ClientState.CLOSING:
                if isinstance(command, c.Response) and command.key == Key.CLOSE:
                    self.state = ClientState.CLOSED
                continue  # after our close, only its response counts
            if self.state is ClientState.CLOSED:
                continue
            out.append(command)
        return out

    # -- the handshake -------------------------------------------------------------------------

    def _handshake(self, step: int, make: Callable[[int], c.Command]) -> None:
        self._correlation += 1
        self._step[self._correlation] = step
        self._out.append(self.codec.send(make(self._correlation)))

    def _refuse(self, what: str, code: int) -> None:
        self.refused = (what, code)
        self.state = ClientState.CLOSED

    def _handshake_step(self, command: c.Command) -> None:
        if isinstance(command, c.Tune):
            self.frame_max = _negotiate(self.frame_max, command.frame_max)
            self.heartbeat = _negotiate(self.heartbeat, command.heartbeat)
            self.codec.frame_max = max(self.receive_max, self.frame_max) if self.receive_max else 0
            self._out.append(self.codec.send(c.Tune(self.frame_max, self.heartbeat)))
            self._handshake(_OPEN, lambda cid: c.Open(cid, self.vhost))
            return
        step = self._step.pop(getattr(command, "correlation_id", -1), None)
        code = getattr(command, "code", Code.OK)
        if step is None:
            return  # nothing of ours: ignored until open
        if step == _PEER_PROPERTIES:
            assert isinstance(command, c.PeerPropertiesResponse)
            if code != Code.OK:
                self._refuse("peer properties", code)
                return
            self.server_properties = dict(command.properties)
            self._handshake(_SASL_HANDSHAKE, c.SaslHandshake)
        elif step == _SASL_HANDSHAKE:
            assert isinstance(command, c.SaslHandshakeResponse)
            if code != Code.OK or "PLAIN" not in command.mechanisms:
                self._refuse("sasl handshake", code if code != Code.OK else 0x07)
                return
            token = b"\x00" + self.username.encode() + b"\x00" + self.password.encode()
            self._handshake(_SASL_AUTHENTICATE, lambda cid: c.SaslAuthenticate(cid, "PLAIN", token))
        elif step == _SASL_AUTHENTICATE:
            if code != Code.OK:
                self._refuse("authentication", code)
            # OK: the server's tune comes next.
        elif step == _OPEN:
            assert isinstance(command, c.OpenResponse)
            if code != Code.OK:
                self._refuse("open", code)
                return
            self.open_properties = dict(command.properties)
            self.state = ClientState.OPEN
