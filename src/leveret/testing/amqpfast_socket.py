"""``FastClient`` over a blocking socket: the project's AMQP/Fast client against a running
broker, for tests (no other AMQP/Fast client exists any more).

    with FastSocket.connect("127.0.0.1", port, client_name="app") as fast:
        fast.client.open_channel(1)
        fast.client.open_handle(1, 1, dest_name="q", consumer=True)
        fast.client.consume(1, prefetch=10)
        fast.flush()
        delivered = fast.wait(Delivered)

Calls on ``client`` only queue octets; :meth:`FastSocket.flush` sends them and
:meth:`FastSocket.wait` reads until an event of the asked type arrives (keeping the others
in ``events``, oldest first).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.testing.amqpfast_client import ClientEvent, Connected, FastClient, Replied

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["FastSocket"]

E = TypeVar("E", bound=ClientEvent)


class FastSocket:
    """One AMQP/Fast connection over TCP, driven by a :class:`FastClient`."""

    def __init__(self, sock: socket.socket, client: FastClient) -> None:
        self.sock = sock
        self.client = client
        self.events: deque[ClientEvent] = deque()
        self.closed = False

    @classmethod
    def connect(
        cls, host: str, port: int, *, timeout: float = 5.0, **client_args: Any
    ) -> FastSocket:
        """Connect, send the initiation and log in; returns once the connection is open (the
        ``Connected`` event and CONNECTION OPEN's reply are taken from ``events``)."""
        sock = socket.create_connection((host, port), timeout=timeout)
        fast = cls(sock, FastClient(**client_args))
        fast.client.initiate()
        fast.flush()
        fast.wait(Connected, timeout=timeout)
        if fast.client.open_confirm_tag:
            fast.wait(Replied, timeout=timeout)  # CONNECTION OPEN's
        return fast

    def flush(self) -> None:
        data = self.client.data_to_send()
        if data:
            self.sock.sendall(data)

    def _read(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        if not data:
            self.closed = True
            return False
        self.events.extend(self.client.receive_data(data))
        self.flush()  # answers the client made (CONNECTION TUNE/OPEN, pongs)
        return True

    def wait(self, kind: type[E], *, timeout: float = 5.0) -> E:
        """The first event of ``kind`` (removed from ``events``); AssertionError on time-out."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if isinstance(event, kind):
                    self.events.remove(event)
                    return event
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                raise AssertionError(f"no {kind.__name__} within {timeout} s: {list(self.events)}")
            self._read(min(left, 0.5))

    def drain(self, seconds: float = 0.2) -> list[ClientEvent]:
        """Everything that arrives within ``seconds`` of quiet, with what was kept."""
        while self._read(seconds):
            pass
        out = list(self.events)
        self.events.clear()
        return out

    def close(self) -> None:
        if not self.closed:
            try:
                self.client.close()
                self.flush()
                self.drain(0.2)
            except OSError:
                pass
        self.sock.close()
        self.closed = True

    def __enter__(self) -> FastSocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
