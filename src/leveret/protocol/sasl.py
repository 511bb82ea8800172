"""SASL responses, sans-IO: the bytes of ``connection.start-ok``'s ``response`` in, the
credentials they carry out. Used by ``leveret.auth.authn`` (every front end's login) and by
client code (tests, tools) to build responses.

Mechanisms (the 0-9-1 spec section 1.4.2 and RabbitMQ's):

- ``PLAIN`` (RFC 4616): ``[authzid] NUL authcid NUL passwd``. An authorization identity
  other than the user's own is refused (no one may act as another user).
- ``AMQPLAIN``: a field table without its length prefix holding ``LOGIN`` and
  ``PASSWORD`` (RabbitMQ's legacy mechanism, still sent by some clients).
- ``EXTERNAL`` (RFC 4422 appendix A): the identity comes from outside the exchange (the
  client's TLS certificate); the response is an optional authorization identity.
- ``ANONYMOUS`` (RFC 4505): optional trace information, never an identity.

A response is complete in one frame, so there is no partial input; a malformed one raises
:class:`MalformedResponse` (the broker refuses the login), an unknown mechanism
:class:`UnknownMechanism`. No other exception leaves this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leveret.errors import BrokerError, SyntaxError_
from leveret.protocol.amqp091.fieldtable import decode_table, encode_table

PLAIN = "PLAIN"
AMQPLAIN = "AMQPLAIN"
EXTERNAL = "EXTERNAL"
ANONYMOUS = "ANONYMOUS"
MECHANISMS = (PLAIN, AMQPLAIN, EXTERNAL, ANONYMOUS)

# RFC 4505: trace information is at most 255 characters.
_TRACE_MAX = 255


class SaslError(BrokerError):
    """A response that cannot be used; ``reason`` is for the log (it never holds a
    password)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnknownMechanism(SaslError):
    """A mechanism this module does not know."""


class MalformedResponse(SaslError):
    """A response that does not follow its mechanism's syntax."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a response says. ``username`` is empty for EXTERNAL (the certificate names the
    user) and ANONYMOUS; ``password`` is None when the mechanism carries none."""

    mechanism: str
    username: str = ""
    password: str | None = field(default=None, repr=False)
    # EXTERNAL's authorization identity or ANONYMOUS's trace: informational only.
    extra: str = ""


def _text(raw: bytes, what: str, mechanism: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedResponse(f"{mechanism} {what} is not UTF-8") from None


_PLAIN_PARTS = ("authorization identity", "user name", "password")


def _plain(response: bytes) -> Credentials:
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise MalformedResponse("PLAIN response is not [authzid] NUL authcid NUL passwd")
    authzid, username, password = (
        _text(p, w, PLAIN) for p, w in zip(parts, _PLAIN_PARTS, strict=True)
    )
    if not username:
        raise MalformedResponse("PLAIN response without a user name")
    if authzid and authzid != username:
        raise MalformedResponse(f"PLAIN authorization identity '{authzid}' is not supported")
    return Credentials(PLAIN, username, password)


def _amqplain(response: bytes) -> Credentials:
    try:
        table, _ = decode_table(len(response).to_bytes(4, "big") + response, 0)
    except SyntaxError_ as exc:
        raise MalformedResponse(f"AMQPLAIN response is not a field table: {exc}") from None
    except OverflowError:
        raise MalformedResponse("AMQPLAIN response is too long") from None
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if not isinstance(login, str) or not isinstance(password, str):
        raise MalformedResponse("AMQPLAIN response without LOGIN and PASSWORD strings")
    if not login:
        raise MalformedResponse("AMQPLAIN response without a user name")
    return Credentials(AMQPLAIN, login, password)


def _external(response: bytes) -> Credentials:
    return Credentials(EXTERNAL, extra=_text(response, "authorization identity", EXTERNAL))


def _anonymous(response: bytes) -> Credentials:
    trace = _text(response, "trace information", ANONYMOUS)
    if len(trace) > _TRACE_MAX:
        raise MalformedResponse(f"ANONYMOUS trace information over {_TRACE_MAX} characters")
    return Credentials(ANONYMOUS, extra=trace)


_PARSERS = {PLAIN: _plain, AMQPLAIN: _amqplain, EXTERNAL: _external, ANONYMOUS: _anonymous}


def parse_response(mechanism: str, response: bytes | bytearray | memoryview) -> Credentials:
    """The credentials in ``response`` for ``mechanism``."""
    parser = _PARSERS.get(mechanism)
    if parser is None:
        raise UnknownMechanism(f"unknown authentication mechanism '{mechanism}'")
    return parser(bytes(response))


# -- the client side (tests, tools) -------------------------------------------------------


def plain_response(username: str, password: str, authzid: str = "") -> bytes:
    return b"\x00".join((authzid.encode(), username.encode(), password.encode()))


def amqplain_response(username: str, password: str) -> bytes:
    # The mechanism sends the table's contents without the table's own length prefix.
    return encode_table({"LOGIN": username, "PASSWORD": password})[4:]


def external_response(authzid: str = "") -> bytes:
    return authzid.encode()


def anonymous_response(trace: str = "") -> bytes:
    return trace.encode()
