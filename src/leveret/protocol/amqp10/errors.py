"""AMQP 1.0 errors: an error condition (a spec symbol) and the scope it ends.

::

    leveret.errors.BrokerError
    └── AMQP10Error                condition, description, scope (connection/session/link)
        └── DecodeError            amqp:decode-error, ends the connection

The codec raises only :class:`DecodeError` on bad input (never ``struct.error``,
``IndexError`` or ``UnicodeDecodeError``); the connection machine raises
:class:`AMQP10Error` internally and turns it into ``close``, ``end`` or ``detach`` carrying
the condition. Misuse of the machine's API by its caller is :class:`LocalProtocolError`
(a bug in the caller, never sent to the peer: h11's local/remote split).

Any layer may import this module.
"""

from __future__ import annotations

import enum

from leveret.errors import BrokerError

__all__ = ["AMQP10Error", "DecodeError", "LocalProtocolError", "Scope"]


class Scope(enum.IntEnum):
    """What an error ends: the link (detach), its session (end) or the connection (close)."""

    LINK = 0
    SESSION = 1
    CONNECTION = 2


class AMQP10Error(BrokerError):
    """A peer broke the rules; ``condition`` is the spec's error symbol sent back to it."""

    def __init__(
        self, condition: str, description: str = "", scope: Scope = Scope.CONNECTION
    ) -> None:
        super().__init__(f"{condition}: {description}" if description else condition)
        self.condition = condition
        self.description = description
        self.scope = scope

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.condition!r}, {self.description!r}, {self.scope!r})"


class DecodeError(AMQP10Error):
    """Bytes that are not a valid AMQP 1.0 encoding (``amqp:decode-error``)."""

    def __init__(self, description: str = "") -> None:
        super().__init__("amqp:decode-error", description, Scope.CONNECTION)


class LocalProtocolError(RuntimeError):
    """The caller used the connection machine wrongly (a bug on our side, never a close)."""
