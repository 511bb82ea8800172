"""The one error hierarchy of Leveret; every layer may import it.

::

    BrokerError
    └── AMQPError                  carries reply_code, reply_text, class_id, method_id
        ├── SoftError              closes the channel
        │   ├── ContentTooLarge        311
        │   ├── NoRoute                312  (basic.return only, never a close)
        │   ├── NoConsumers            313
        │   ├── AccessRefused          403
        │   ├── NotFound               404
        │   ├── ResourceLocked         405
        │   └── PreconditionFailed     406
        └── HardError              closes the connection
            ├── ConnectionForced       320
            ├── InvalidPath            402
            ├── FrameError             501  (alias FramingError: malformed bytes)
            ├── SyntaxError_           502
            ├── CommandInvalid         503
            ├── ChannelError           504
            ├── UnexpectedFrame        505
            ├── ResourceError          506
            ├── NotAllowed             530
            ├── NotImplemented_        540
            └── InternalError          541

The scope (channel or connection) comes from the class, as the 0-9-1 spec's
``<constant class="soft-error|hard-error">`` says; a raiser may override it with
``hard=True`` where RabbitMQ closes the connection with a soft code (403 on a
failed login, 404/403 on connection.open of an unknown or forbidden vhost).
"""

from __future__ import annotations

from typing import ClassVar


class BrokerError(Exception):
    """Root of every error Leveret raises on purpose."""


class AMQPError(BrokerError):
    """An error with an AMQP reply code; the server turns it into a close method."""

    reply_code: ClassVar[int] = 541
    hard_by_default: ClassVar[bool] = True

    def __init__(
        self,
        reply_text: str = "",
        *,
        class_id: int = 0,
        method_id: int = 0,
        hard: bool | None = None,
    ) -> None:
        super().__init__(reply_text)
        self.reply_text = reply_text
        self.class_id = class_id
        self.method_id = method_id
        self.hard = self.hard_by_default if hard is None else hard

    @property
    def reply_name(self) -> str:
        return _NAMES.get(self.reply_code, "INTERNAL_ERROR")

    def full_text(self) -> str:
        """The reply-text RabbitMQ-style: ``NAME - detail`` (clients show this to users)."""
        text = f"{self.reply_name} - {self.reply_text}" if self.reply_text else self.reply_name
        # reply-text is a shortstr on the wire.
        return text.encode()[:255].decode(errors="ignore")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reply_code}, {self.reply_text!r})"


class SoftError(AMQPError):
    """Closes the channel it happened on."""

    hard_by_default = False


class HardError(AMQPError):
    """Closes the whole connection."""

    hard_by_default = True


class ContentTooLarge(SoftError):
    reply_code = 311


class NoRoute(SoftError):
    reply_code = 312


class NoConsumers(SoftError):
    reply_code = 313


class AccessRefused(SoftError):
    reply_code = 403


class NotFound(SoftError):
    reply_code = 404


class ResourceLocked(SoftError):
    reply_code = 405


class PreconditionFailed(SoftError):
    reply_code = 406


class ConnectionForced(HardError):
    reply_code = 320


class InvalidPath(HardError):
    reply_code = 402


class FrameError(HardError):
    reply_code = 501


FramingError = FrameError
"""Malformed bytes on the wire; the codecs raise this (or another HardError) only."""


class SyntaxError_(HardError):
    reply_code = 502


class CommandInvalid(HardError):
    reply_code = 503


class ChannelError(HardError):
    reply_code = 504


class UnexpectedFrame(HardError):
    reply_code = 505


class ResourceError(HardError):
    reply_code = 506


class NotAllowed(HardError):
    reply_code = 530


class NotImplemented_(HardError):
    reply_code = 540


class InternalError(HardError):
    reply_code = 541


_NAMES: dict[int, str] = {
    311: "CONTENT_TOO_LARGE",
    312: "NO_ROUTE",
    313: "NO_CONSUMERS",
    320: "CONNECTION_FORCED",
    402: "INVALID_PATH",
    403: "ACCESS_REFUSED",
    404: "NOT_FOUND",
    405: "RESOURCE_LOCKED",
    406: "PRECONDITION_FAILED",
    501: "FRAME_ERROR",
    502: "SYNTAX_ERROR",
    503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR",
    505: "UNEXPECTED_FRAME",
    506: "RESOURCE_ERROR",
    530: "NOT_ALLOWED",
    540: "NOT_IMPLEMENTED",
    541: "INTERNAL_ERROR",
}

BY_CODE: dict[int, type[AMQPError]] = {
    cls.reply_code: cls
    for cls in (
        ContentTooLarge,
        NoRoute,
        NoConsumers,
        AccessRefused,
        NotFound,
        ResourceLocked,
        PreconditionFailed,
        ConnectionForced,
        InvalidPath,
        FrameError,
        SyntaxError_,
        CommandInvalid,
        ChannelError,
        UnexpectedFrame,
        ResourceError,
        NotAllowed,
        NotImplemented_,
        InternalError,
    )
}
