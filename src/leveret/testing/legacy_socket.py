"""``LegacyClient`` over a blocking socket: the project's 0-8 / 0-9 client against a running
broker, for tests (the same codecs and methods as in memory).

    with LegacySocket.connect("127.0.0.1", port, AMQP09) as client:
        client.handshake()
        client.open_channel(1)
        client.send(1, m09.QueueDeclare(queue="q"))
        client.expect(1, m09.QueueDeclareOk)

``send`` writes at once; ``next``/``expect`` read until the server's next method (or
content) has arrived, failing after ``timeout`` seconds.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp08._generated import properties as p08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09._generated import properties as p09
from leveret.protocol.amqp091 import framing
from leveret.testing.legacy_client import LegacyClient, LegacyContent, LegacyMethod

if TYPE_CHECKING:
    from types import TracebackType

    from leveret.server.legacy.dialects import Dialect

__all__ = ["LegacySocket"]


class LegacySocket(LegacyClient):
    """One 0-8 or 0-9 connection over TCP."""

    def __init__(self, sock: socket.socket, dialect: Dialect, *, timeout: float = 5.0) -> None:
        # Not LegacyClient.__init__: there is no in-memory connection behind this one.
        self.sock = sock
        self.timeout = timeout
        self.dialect = dialect
        self.methods = m08 if dialect.name == "0-8" else m09
        self.properties = p08 if dialect.name == "0-8" else p09
        self.frame_max = 131072
        self._decoder = framing.FrameDecoder(frame_max=0)
        self._inbox: deque[LegacyMethod | LegacyContent] = deque()
        self._content = {}
        self._eof = False

    @classmethod
    def open(cls, host: str, port: int, dialect: Dialect, *, timeout: float = 5.0) -> LegacySocket:
        return cls(
            socket.create_connection((host, port), timeout=timeout), dialect, timeout=timeout
        )

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def take_bytes(self) -> bytes:
        """What arrived within a short wait (nothing if nothing came)."""
        self.sock.settimeout(0.05)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            return b""
        if not data:
            self._eof = True
        return data

    @property
    def closed(self) -> bool:
        return self._eof

    def next(self) -> LegacyMethod | LegacyContent:
        deadline = time.monotonic() + self.timeout
        while not self._inbox:
            if self._eof or time.monotonic() > deadline:
                raise AssertionError(f"nothing from the server within {self.timeout} s")
            self._pump()
        return self._inbox.popleft()

    def close(self) -> None:
        self.sock.close()
        self._eof = True

    def __enter__(self) -> LegacySocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
