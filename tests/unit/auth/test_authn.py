"""The login decision for every mechanism and refusal, and what is logged (never a
password). RabbitMQ 3.10.8's answers, recorded with raw sockets against the RabbitMQ next to
the project: a refused PLAIN login with authentication_failure_close gets connection.close
403 "Login was refused using authentication mechanism PLAIN. For details see the broker
logfile." at once and the socket is closed 3.00 s later; without the capability, and for
an unknown mechanism or a malformed response, nothing is sent and the socket is closed
after 3.00 s."""

from __future__ import annotations

import logging

import pytest

from leveret.auth import authn
from leveret.auth.authn import FAILURE_DELAY, Refusal
from leveret.auth.users import UserStore
from leveret.protocol import sasl

# Left out of the compiled pass (scripts/test): auth/ is not compiled.
pytestmark = pytest.mark.pure_only

SECRET = "s3cret-never-logged"


def _store() -> UserStore:
    store = UserStore.with_default_user()
    store.add_user("app", SECRET)
    store.add_user("certonly", None)
    store.add_user("CN=client,O=Leveret tests", None)
    return store


def _login(
    mechanism: str, response: bytes, *, loopback: bool = True, identity: str | None = None
) -> authn.Login:
    return authn.login(
        _store(),
        mechanism,
        response,
        loopback=loopback,
        peer="192.0.2.1:5000",
        certificate_identity=identity,
    )


def test_plain_and_amqplain() -> None:
    assert _login("PLAIN", sasl.plain_response("app", SECRET)).user is not None
    login = _login("AMQPLAIN", sasl.amqplain_response("app", SECRET))
    assert login.ok
    assert login.username == "app"
    assert login.delay == 0


@pytest.mark.parametrize(
    ("mechanism", "response", "identity", "loopback", "refusal", "close"),
    [
        ("PLAIN", sasl.plain_response("nobody", SECRET), None, True, Refusal.UNKNOWN_USER, True),
        ("PLAIN", sasl.plain_response("app", "wrong"), None, True, Refusal.BAD_PASSWORD, True),
        ("AMQPLAIN", sasl.amqplain_response("app", "x"), None, True, Refusal.BAD_PASSWORD, True),
        ("PLAIN", sasl.plain_response("app", ""), None, True, Refusal.BLANK_PASSWORD, True),
        ("PLAIN", sasl.plain_response("certonly", "x"), None, True, Refusal.NO_PASSWORD, True),
        ("PLAIN", sasl.plain_response("guest", "guest"), None, False, Refusal.LOOPBACK_ONLY, True),
        ("FOO", b"x", None, True, Refusal.UNKNOWN_MECHANISM, False),
        ("PLAIN", b"nonul", None, True, Refusal.MALFORMED, False),
        ("PLAIN", b"\x00app\x00" + SECRET.encode() + b"\x00", None, True, Refusal.MALFORMED, False),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x03abc", None, True, Refusal.MALFORMED, False),
        ("EXTERNAL", b"", None, True, Refusal.NO_CERTIFICATE, False),
        ("EXTERNAL", b"", "CN=stranger", True, Refusal.UNKNOWN_USER, True),
        ("ANONYMOUS", b"", None, True, Refusal.ANONYMOUS_OFF, False),
    ],
)
def test_refusals(
    caplog: pytest.LogCaptureFixture,
    mechanism: str,
    response: bytes,
    identity: str | None,
    loopback: bool,
    refusal: Refusal,
    close: bool,
) -> None:
    with caplog.at_level(logging.WARNING, "leveret.auth"):
        login = _login(mechanism, response, loopback=loopback, identity=identity)
    assert login.user is None
    assert login.refusal is refusal
    assert login.delay == FAILURE_DELAY == 3.0
    if close:
        assert login.close_text == (
            f"Login was refused using authentication mechanism {mechanism}. "
            "For details see the broker logfile."
        )
    else:
        assert login.close_text is None
    assert refusal.value in caplog.text
    assert "192.0.2.1:5000" in caplog.text
    assert SECRET not in caplog.text
    assert "guest login" not in caplog.text


def test_external_maps_the_certificate_identity() -> None:
    login = _login("EXTERNAL", b"", identity="CN=client,O=Leveret tests")
    assert login.ok
    assert login.username == "CN=client,O=Leveret tests"
    assert _login("EXTERNAL", b"", identity="certonly").ok


def test_external_respects_loopback_users() -> None:
    login = _login("EXTERNAL", b"", identity="guest", loopback=False)
    assert login.refusal is Refusal.LOOPBACK_ONLY


def test_anonymous_when_enabled() -> None:
    store = _store()
    store.anonymous_user = "app"
    assert authn.mechanisms(store) == ["PLAIN", "AMQPLAIN", "ANONYMOUS"]
    login = authn.login(store, "ANONYMOUS", b"trace", loopback=False, peer="p")
    assert login.ok
    assert login.username == "app"


def test_anonymous_is_subject_to_loopback_users() -> None:
    # RabbitMQ 4: ANONYMOUS logs in as anonymous_login_user, a login like any other as
    # that user, so guest (loopback-only) is refused from elsewhere.
    store = _store()
    store.anonymous_user = "guest"
    assert authn.login(store, "ANONYMOUS", b"", loopback=True, peer="p").username == "guest"
    remote = authn.login(store, "ANONYMOUS", b"", loopback=False, peer="p")
    assert remote.refusal is Refusal.LOOPBACK_ONLY
    assert remote.close_text == authn.refusal_text("ANONYMOUS")


def test_mechanisms_offered() -> None:
    store = _store()
    assert authn.mechanisms(store) == ["PLAIN", "AMQPLAIN"]
    assert authn.mechanisms(store, certificate_identity="x") == ["PLAIN", "AMQPLAIN", "EXTERNAL"]


def test_legacy_authenticate_keeps_its_contract(caplog: pytest.LogCaptureFixture) -> None:
    store = _store()
    assert authn.authenticate(store, "app", SECRET, loopback=False) is store.users["app"]
    with caplog.at_level(logging.WARNING, "leveret.auth"):
        assert authn.authenticate(store, "app", "nope", loopback=True) is None
        assert authn.authenticate(store, "guest", "guest", loopback=False) is None
    assert "bad password" in caplog.text
    assert "loopback_users" in caplog.text
    assert "nope" not in caplog.text
    assert authn.authenticate(store, "guest", "guest", loopback=True) is store.users["guest"]


def test_legacy_add_grants_the_default_vhost() -> None:
    store = UserStore.with_default_user()
    user = store.add("app", "pw", loopback_only=True)
    assert "/" in user.vhosts
    assert list(user.vhosts) == ["/"]
    assert len(user.vhosts) == 1
    assert user.loopback_only
    assert authn.authenticate(store, "app", "pw", loopback=False) is None
