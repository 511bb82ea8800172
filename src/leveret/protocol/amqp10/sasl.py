"""SASL responses of AMQP 1.0's security layer (spec part 5.3): PLAIN, ANONYMOUS, EXTERNAL.

The connection machine parses the client's ``sasl-init``/``sasl-response`` bytes with
:func:`parse_response`; the broker decides. Only ``leveret.protocol.amqp10`` imports it.
"""

from __future__ import annotations

__all__ = ["SUPPORTED", "SaslResponseError", "parse_response", "plain_response"]

SUPPORTED = ("PLAIN", "ANONYMOUS", "EXTERNAL")
_MAX_RESPONSE = 65535


class SaslResponseError(ValueError):
    """A response that does not parse for its mechanism (the outcome is ``auth``)."""


def parse_response(mechanism: str, response: bytes | None) -> dict[str, str | None]:
    """The fields of ``response``: PLAIN (RFC 4616) ``authzid NUL authcid NUL passwd``;
    ANONYMOUS (RFC 4505) an optional trace; EXTERNAL (RFC 4422) an optional authzid."""
    data = response or b""
    if len(data) > _MAX_RESPONSE:
        raise SaslResponseError(f"{mechanism} response of {len(data)} bytes")
    try:
        if mechanism == "PLAIN":
            parts = data.split(b"\x00")
            if len(parts) != 3 or not parts[1]:
                raise SaslResponseError("PLAIN response is not authzid NUL authcid NUL passwd")
            authzid, username, password = (p.decode() for p in parts)
            return {"authzid": authzid or None, "username": username, "password": password}
        if mechanism == "ANONYMOUS":
            return {"trace": data.decode() or None}
        if mechanism == "EXTERNAL":
            return {"authzid": data.decode() or None}
    except UnicodeDecodeError as exc:
        raise SaslResponseError(f"{mechanism} response is not UTF-8") from exc
    raise SaslResponseError(f"unsupported mechanism {mechanism!r}")


def plain_response(username: str, password: str, authzid: str = "") -> bytes:
    """The client's PLAIN initial response."""
    return b"\x00".join((authzid.encode(), username.encode(), password.encode()))
