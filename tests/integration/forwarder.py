"""A TCP forwarder on a thread of its own: the address a node advertises behind a NAT or a
container's published port, in front of where the node really listens. It counts the
connections it accepted, so a test can tell that a client (or a peer node) dialled the
advertised address rather than the listener."""

from __future__ import annotations

import contextlib
import socket
import threading


class Forwarder:
    """Listens on ``host`` (a free port, ``port``); each connection is piped both ways to
    ``upstream``, which may be set after the start (the node's port is known once it runs)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.listener = socket.create_server((host, 0))
        self.host = host
        self.port: int = self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.accepted = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self.accepted += 1
            if self.upstream is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
