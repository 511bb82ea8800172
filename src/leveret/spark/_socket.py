"""The blocking socket lifecycle both connector clients share (``_client.py`` over 0-9-1,
``_stream_client.py`` over the stream protocol): the socket slot, dropping it, and the
context-manager protocol around each client's own ``close``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    import socket

__all__ = ["SocketClient"]


class SocketClient:
    """Holds the client's socket; a subclass connects it and says how to close politely."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None

    def close(self) -> None:
        """Say goodbye to the broker, then drop the socket (each protocol its own way)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Close the socket now."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
