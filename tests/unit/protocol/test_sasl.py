"""SASL responses: each mechanism's syntax, and every malformed form refused with a reason
(never another exception)."""

from __future__ import annotations

import pytest

from leveret.protocol import sasl
from leveret.protocol.sasl import Credentials, MalformedResponse, UnknownMechanism

# Left out of the compiled pass (scripts/test): the SASL codec is not compiled.
pytestmark = pytest.mark.pure_only


def test_plain_as_pika_sends_it() -> None:
    assert sasl.parse_response("PLAIN", b"\x00guest\x00guest") == Credentials(
        "PLAIN", "guest", "guest"
    )


def test_plain_with_own_authzid() -> None:
    creds = sasl.parse_response("PLAIN", b"bob\x00bob\x00pw")
    assert (creds.username, creds.password) == ("bob", "pw")


def test_amqplain_as_py_amqp_sends_it() -> None:
    # py-amqp/kombu: the table's body, LOGIN then PASSWORD, without the length prefix.
    response = b"\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x05guest"
    assert sasl.parse_response("AMQPLAIN", response) == Credentials("AMQPLAIN", "guest", "guest")
    assert sasl.amqplain_response("guest", "guest") == response


def test_external_and_anonymous() -> None:
    assert sasl.parse_response("EXTERNAL", b"") == Credentials("EXTERNAL")
    assert sasl.parse_response("EXTERNAL", b"me").extra == "me"
    assert sasl.parse_response("ANONYMOUS", b"trace@example") == Credentials(
        "ANONYMOUS", extra="trace@example"
    )


def test_password_is_not_in_repr() -> None:
    assert "hunter2" not in repr(sasl.parse_response("PLAIN", b"\x00u\x00hunter2"))


@pytest.mark.parametrize(
    ("mechanism", "response", "reason"),
    [
        ("PLAIN", b"", "NUL authcid NUL passwd"),
        ("PLAIN", b"user\x00pass", "NUL authcid NUL passwd"),
        ("PLAIN", b"\x00u\x00p\x00", "NUL authcid NUL passwd"),
        ("PLAIN", b"\x00\x00pw", "without a user name"),
        ("PLAIN", b"alice\x00bob\x00pw", "authorization identity 'alice'"),
        ("PLAIN", b"\x00\xff\x00pw", "user name is not UTF-8"),
        ("PLAIN", b"\x00u\x00\xc3", "password is not UTF-8"),
        ("AMQPLAIN", b"\x05LOG", "not a field table"),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01u", "without LOGIN and PASSWORD"),
        ("AMQPLAIN", b"\x05LOGINI\x00\x00\x00\x01\x08PASSWORDS\x00\x00\x00\x00", "strings"),
        ("AMQPLAIN", sasl.amqplain_response("", "pw"), "without a user name"),
        ("EXTERNAL", b"\xff", "not UTF-8"),
        ("ANONYMOUS", b"x" * 256, "over 255 characters"),
    ],
)
def test_malformed(mechanism: str, response: bytes, reason: str) -> None:
    with pytest.raises(MalformedResponse, match=reason) as info:
        sasl.parse_response(mechanism, response)
    assert info.value.reason == str(info.value)


def test_unknown_mechanism() -> None:
    with pytest.raises(UnknownMechanism, match="unknown authentication mechanism 'CRAM-MD5'"):
        sasl.parse_response("CRAM-MD5", b"")
