"""The login decision: a SASL mechanism and response (``connection.start-ok``) in, a user or
a refusal with its reason out. Every front end calls :func:`login` (the 0-9-1 one does);
:func:`authenticate` checks a name and password outside any protocol.

A refusal is logged once, with the peer, the user name and why (unknown user, bad
password, blank password, no password set, not allowed from this address, no certificate,
unknown mechanism, malformed response); a password never reaches the log. What the client
is told is RabbitMQ's: with the ``authentication_failure_close`` capability, 403
"Login was refused using authentication mechanism X. For details see the broker
logfile." (``Login.close_text``); without it, or for an unknown mechanism or a malformed
response (``close_text`` None), nothing: the socket is closed.

The delay (:data:`FAILURE_DELAY`, RabbitMQ's 3 s for any error before a connection is
open): RabbitMQ sends the 403 at once and holds the socket 3 s only if the client does not
close it, so a client that closes on the 403 can guess again at once. Leveret sends the
refusal itself (close method or dropped socket) only after the delay, for every client,
so that every guess costs 3 s (docs/compatibility.md).

Which mechanisms a connection is offered (:func:`mechanisms`): PLAIN and AMQPLAIN always,
EXTERNAL when the client presented a verified certificate (RabbitMQ offers it only then),
ANONYMOUS when ``UserStore.anonymous_user`` names a user.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.protocol import sasl

if TYPE_CHECKING:
    from leveret.auth.users import User, UserStore

log = logging.getLogger("leveret.auth")

# RabbitMQ's ?SILENT_CLOSE_DELAY (rabbit_reader): seconds a failed handshake keeps the
# client waiting before the socket is closed.
FAILURE_DELAY = 3.0


class Refusal(enum.Enum):
    """Why a login was refused (for the log; the client is never told)."""

    # These are log texts, not passwords (ruff S105 reads "PASSWORD" as one).

    UNKNOWN_USER = "unknown user"
    BAD_PASSWORD = "bad password"  # noqa: S105
    BLANK_PASSWORD = "blank password"  # noqa: S105
    NO_PASSWORD = "the user has no password (certificate login only)"  # noqa: S105
    LOOPBACK_ONLY = "not allowed from this address (loopback_users)"
    NO_CERTIFICATE = "no verified client certificate"
    ANONYMOUS_OFF = "anonymous login is not enabled"
    UNKNOWN_MECHANISM = "unknown mechanism"
    MALFORMED = "malformed response"


# Refusals RabbitMQ answers without a close method (protocol errors, not auth failures).
_SILENT = frozenset(
    (Refusal.UNKNOWN_MECHANISM, Refusal.MALFORMED, Refusal.NO_CERTIFICATE, Refusal.ANONYMOUS_OFF)
)


def refusal_text(mechanism: str) -> str:
    """RabbitMQ's reply-text for 403 on a refused login (with authentication_failure_close)."""
    return (
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )


@dataclass(frozen=True)
class Login:
    """A login attempt's outcome."""

    mechanism: str
    username: str
    user: User | None
    refusal: Refusal | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.user is not None

    @property
    def close_text(self) -> str | None:
        """The 403 reply-text for a client with ``authentication_failure_close``; None when
        the connection is dropped without a close method."""
        if self.refusal is None or self.refusal in _SILENT:
            return None
        return refusal_text(self.mechanism)

    @property
    def delay(self) -> float:
        """Seconds to wait before answering a refused login (sending ``close_text`` or
        dropping the socket); nothing more is read from the client meanwhile."""
        return 0.0 if self.ok else FAILURE_DELAY


def mechanisms(store: UserStore, *, certificate_identity: str | None = None) -> list[str]:
    """The mechanisms to offer in connection.start, in preference order."""
    offered = [sasl.PLAIN, sasl.AMQPLAIN]
    if certificate_identity is not None:
        offered.append(sasl.EXTERNAL)
    if store.anonymous_user:
        offered.append(sasl.ANONYMOUS)
    return offered


def _refused(mechanism: str, username: str, refusal: Refusal, peer: str, detail: str = "") -> Login:
    log.warning(
        "connection %s: %s login refused for user '%s': %s%s",
        peer or "?",
        mechanism,
        username,
        refusal.value,
        f" ({detail})" if detail else "",
    )
    return Login(mechanism, username, None, refusal, detail)


def _admit(mechanism: str, user: User, *, loopback: bool, peer: str) -> Login:
    if user.loopback_only and not loopback:
        return _refused(mechanism, user.name, Refusal.LOOPBACK_ONLY, peer)
    return Login(mechanism, user.name, user)


def password_login(
    store: UserStore,
    username: str,
    password: str,
    *,
    loopback: bool,
    peer: str,
    mechanism: str = sasl.PLAIN,
) -> Login:
    """A user name and password (PLAIN, AMQPLAIN) against the store."""
    user = store.users.get(username)
    if user is None:
        return _refused(mechanism, username, Refusal.UNKNOWN_USER, peer)
    if not password:
        return _refused(mechanism, username, Refusal.BLANK_PASSWORD, peer)
    if not user.has_password:
        return _refused(mechanism, username, Refusal.NO_PASSWORD, peer)
    if not user.check_password(password):
        return _refused(mechanism, username, Refusal.BAD_PASSWORD, peer)
    return _admit(mechanism, user, loopback=loopback, peer=peer)


def authenticate(store: UserStore, name: str, password: str, *, loopback: bool) -> User | None:
    """The user if the credentials are right and the user may connect from there (the
    reason of a refusal is logged, never the password)."""
    return password_login(store, name, password, loopback=loopback, peer="").user


def login(
    store: UserStore,
    mechanism: str,
    response: bytes | bytearray | memoryview,
    *,
    loopback: bool,
    peer: str,
    certificate_identity: str | None = None,
) -> Login:
    """The outcome of ``connection.start-ok``. ``certificate_identity``: the user name the
    client's verified TLS certificate gives (``server.listeners.certificate_identity``),
    None without TLS or without a verified certificate."""
    if mechanism not in mechanisms(store, certificate_identity=certificate_identity):
        refusal = {sasl.EXTERNAL: Refusal.NO_CERTIFICATE, sasl.ANONYMOUS: Refusal.ANONYMOUS_OFF}
        return _refused(mechanism, "", refusal.get(mechanism, Refusal.UNKNOWN_MECHANISM), peer)
    try:
        credentials = sasl.parse_response(mechanism, response)
    except sasl.SaslError as exc:
        return _refused(mechanism, "", Refusal.MALFORMED, peer, exc.reason)
    if credentials.password is not None:
        return password_login(
            store,
            credentials.username,
            credentials.password,
            loopback=loopback,
            peer=peer,
            mechanism=mechanism,
        )
    if mechanism == sasl.EXTERNAL:
        # mechanisms() offered EXTERNAL only with a certificate identity.
        assert certificate_identity is not None
        user = store.users.get(certificate_identity)
        if user is None:
            return _refused(mechanism, certificate_identity, Refusal.UNKNOWN_USER, peer)
        return _admit(mechanism, user, loopback=loopback, peer=peer)
    # ANONYMOUS: offered only when anonymous_user is set.
    user = store.users.get(store.anonymous_user)
    if user is None:
        return _refused(mechanism, store.anonymous_user, Refusal.UNKNOWN_USER, peer)
    return _admit(mechanism, user, loopback=loopback, peer=peer)
