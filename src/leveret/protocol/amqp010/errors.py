"""Errors of the AMQP 0-10 codec and machines; the amqp010 package and its front end import it.

::

    BrokerError (leveret.errors)
    └── Amqp010Error
        ├── DecodeError          malformed bytes (a frame, control, command, struct or value)
        ├── EncodeError          a value that cannot be encoded (also a ValueError: our misuse)
        ├── ProtocolViolation    the peer broke a connection-level rule; carries close_code
        └── ExecutionError       a command failed; carries the execution.exception error_code

The machines never let a :class:`DecodeError` escape: a malformed frame or control closes the
connection with ``framing-error`` (501), a malformed command is answered with an
``execution.exception`` ``command-invalid`` (503, "The command segments could not be
decoded").  :class:`LocalProtocolError` is a ``RuntimeError``: the caller misused the API
(h11's local/remote split), never something the peer did.
"""

from __future__ import annotations

from typing import ClassVar

from leveret.errors import AMQPError, BrokerError

__all__ = [
    "Amqp010Error",
    "DecodeError",
    "EncodeError",
    "ExecutionError",
    "LocalProtocolError",
    "ProtocolViolation",
    "error_code_for",
]

# connection.close-code and execution.error-code values used here; the full enums are in
# _generated/constants.py (this module must not import the generated code, which imports it).
_FRAMING_ERROR = 501
_INTERNAL_ERROR = 541


class Amqp010Error(BrokerError):
    """Root of the errors of the AMQP 0-10 protocol layer."""


class DecodeError(Amqp010Error):
    """The bytes received do not decode (truncated, overlong, unknown code, bad text)."""


class EncodeError(Amqp010Error, ValueError):
    """A value given to an encoder is out of its type's range or of the wrong type."""


class ProtocolViolation(Amqp010Error):
    """The peer broke a rule of the connection or framing layer."""

    def __init__(self, text: str, close_code: int = _FRAMING_ERROR) -> None:
        super().__init__(text)
        self.text = text
        self.close_code = close_code


class ExecutionError(Amqp010Error):
    """A command failed; the session answers it with ``execution.exception``."""

    error_code: ClassVar[int] = _INTERNAL_ERROR

    def __init__(
        self,
        description: str = "",
        *,
        error_code: int | None = None,
        field_index: int | None = None,
        error_info: dict[str, object] | None = None,
    ) -> None:
        super().__init__(description)
        self.description = description
        if error_code is not None:
            self.error_code = error_code  # type: ignore[misc]  # instance override
        self.field_index = field_index
        self.error_info = error_info


class LocalProtocolError(RuntimeError):
    """The caller used a machine in a way its state does not allow (a bug, not the peer)."""


# Leveret's core raises errors with 0-9-1 reply codes (leveret.errors); 0-10 reports a failed
# command with execution.error-code.  Most numbers coincide; these are the ones that do not,
# and every code 0-10 lacks falls back to internal-error.
_FROM_REPLY_CODE = {
    311: 506,  # content-too-large -> resource-limit-exceeded
    313: 506,  # no-consumers (immediate) -> resource-limit-exceeded
    402: 404,  # invalid-path -> not-found
    403: 403,  # access-refused -> unauthorized-access
    404: 404,
    405: 405,
    406: 406,
    502: 531,  # syntax-error -> illegal-argument
    503: 503,
    504: 409,  # channel-error -> illegal-state
    505: 409,  # unexpected-frame -> illegal-state
    506: 506,  # resource-error -> resource-limit-exceeded
    530: 530,
    540: 540,
    541: 541,
}


def error_code_for(exc: AMQPError) -> int:
    """The ``execution.error-code`` that reports the core's error ``exc`` to a 0-10 peer."""
    return _FROM_REPLY_CODE.get(exc.reply_code, _INTERNAL_ERROR)
