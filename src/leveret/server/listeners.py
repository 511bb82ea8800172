"""TLS for the ``amqps`` listener: the server's ``ssl.SSLContext`` from the settings,
certificate reload without a restart, and the user name a client certificate gives for
SASL EXTERNAL; and the inter-node link's contexts (``cluster/link_tls.py``).
``server/server.py`` starts the listener and reloads on SIGHUP;
``server/ctl/admin.py`` reloads on ``leveret ctl reload_tls``.

Reload: the listening socket keeps one context for its whole life (asyncio has no way to
swap it), so that context only chooses: its SNI callback, which OpenSSL runs on every
ClientHello (with or without a server name), hands each new handshake the context
loaded last. A reload builds the new context completely first (certificate, key, CA,
ciphers); if anything is wrong it raises :class:`TlsError` and the old one stays.
Connections already open keep the session they negotiated.

Only Python's ``ssl`` module: no crypto of our own.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.config import Settings

log = logging.getLogger("leveret.server")

_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}

# RabbitMQ's attribute names in a formatted subject (rabbit_ssl); Python's ssl module gives
# OpenSSL's long names.
_SHORT_NAMES = {
    "commonName": "CN",
    "surname": "SN",
    "givenName": "GIVENNAME",
    "initials": "INITIALS",
    "generationQualifier": "GENERATIONQUALIFIER",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "title": "TITLE",
    "countryName": "C",
    "serialNumber": "SERIALNUMBER",
    "pseudonym": "PSEUDONYM",
    "domainComponent": "DC",
    "emailAddress": "EMAILADDRESS",
    "streetAddress": "STREET",
    "userId": "UID",
}
_ESCAPED = frozenset(',+"\\<>;')


class TlsError(Exception):
    """The TLS settings cannot be used (unreadable files, a key that does not match...)."""


def _context(
    purpose: ssl._SSLMethod,
    settings: Settings,
    certfile: str,
    keyfile: str,
    cafile: str,
    what: str = "TLS settings",
) -> ssl.SSLContext:
    """A context with this certificate and CA, ``tls_min_version`` and ``tls_ciphers``."""
    for path in (certfile, keyfile, cafile):
        if path and not os.access(path, os.R_OK):
            raise TlsError(f"{what} cannot be used: cannot read {path}")
    context = ssl.SSLContext(purpose)
    context.minimum_version = _VERSIONS[settings.tls_min_version]
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        context.load_cert_chain(certfile, keyfile)
        if cafile:
            context.load_verify_locations(cafile=cafile)
        if settings.tls_ciphers:
            context.set_ciphers(settings.tls_ciphers)
    except ssl.SSLError as exc:
        # set_ciphers raises an SSLError without a reason attribute.
        reason = getattr(exc, "reason", None) or exc
        raise TlsError(f"{what} cannot be used: {reason}") from None
    except OSError as exc:
        raise TlsError(f"{what} cannot be used: {exc.strerror}") from None
    return context


def make_context(settings: Settings) -> ssl.SSLContext:
    """The server context the settings describe."""
    context = _context(
        ssl.PROTOCOL_TLS_SERVER,
        settings,
        settings.tls_certfile,
        settings.tls_keyfile,
        settings.tls_cacertfile,
    )
    if settings.tls_verify_peer:
        # fail_if_no_peer_cert: a client without a certificate fails the handshake;
        # otherwise a certificate is asked for, verified if sent, and not required.
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.tls_fail_if_no_peer_cert else ssl.CERT_OPTIONAL
        )
    return context


def link_contexts(settings: Settings) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The inter-node link's contexts (``cluster_tls_*``): the listener's and the dialer's.

    Mutual, as RabbitMQ's inter-node TLS: each side presents the node's certificate, and
    with ``cluster_tls_verify_peer`` (the default) each requires the other's, signed by
    the CA, and not listed in ``cluster_tls_crlfile`` when it is set. Names are checked
    only with ``cluster_tls_server_name_check``, by the dialer (``LinkTls.dial_options``
    gives the host it dials): by default peers are dialled at addresses (records,
    overrides, the fault harness's proxies) no certificate need name, the CA is the
    cluster's and the HMAC handshake on top says which node answered."""
    made = []
    for purpose in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        context = _context(
            purpose,
            settings,
            settings.cluster_tls_certfile,
            settings.cluster_tls_keyfile,
            settings.cluster_tls_cacertfile,
            "cluster TLS settings",
        )
        context.check_hostname = False
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.cluster_tls_verify_peer else ssl.CERT_NONE
        )
        if settings.cluster_tls_crlfile:
            _load_crls(context, settings.cluster_tls_crlfile)
        if purpose == ssl.PROTOCOL_TLS_CLIENT and settings.cluster_tls_server_name_check:
            context.check_hostname = True
        made.append(context)
    return made[0], made[1]


_CRL_BEGIN = b"-----BEGIN X509 CRL-----"


def _load_crls(context: ssl.SSLContext, path: str) -> None:
    """The CRLs of ``path`` into the context's verify store, and the peer's certificate
    looked up in them (OpenSSL's CRL_CHECK_LEAF: a CA of the chain is not). The file must
    hold CRLs only: OpenSSL would take a certificate there as one more trusted CA."""
    what = "cluster_tls_crlfile cannot be used"
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if pem.count(b"-----BEGIN ") == 0 or pem.count(b"-----BEGIN ") != pem.count(_CRL_BEGIN):
        raise TlsError(f"{what}: {path} must hold PEM certificate revocation lists only")
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TlsError(f"{what}: {path} is not a valid CRL ({reason})") from None
    except OSError as exc:
        raise TlsError(f"{what}: cannot read {path}: {exc.strerror}") from None
    context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


@dataclass
class TlsState:
    """What ``status`` reports about the TLS listener."""

    certfile: str
    loaded_at: float
    reloads: int = 0


class Reloadable(Protocol):
    """TLS files read again on SIGHUP and ``leveret ctl reload_tls`` (the amqps
    listener's ``TlsContexts``, the inter-node link's ``cluster/link_tls.py``)."""

    def reload(self) -> TlsState:
        """Read the files again (may run in a thread); raises :class:`TlsError` and keeps
        the files in use when the new ones cannot be used."""
        ...

    def after_reload(self) -> list[str]:
        """On the loop, after a reload: close the connections the new files refuse and
        that are already up (the link's with a peer the CRL reloaded revokes); their
        peers, named."""
        ...


class TlsContexts:
    """The listening context and the context new handshakes get."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.current = make_context(settings)
        self.listening = make_context(settings)
        self.listening.sni_callback = self._choose
        self.state = TlsState(settings.tls_certfile, time.time())

    def _choose(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        if sslobj.context is not self.current:
            sslobj.context = self.current

    def reload(self) -> TlsState:
        """Read the certificate, key and CA files again (same paths)."""
        self.current = make_context(self.settings)
        self.state = TlsState(self.settings.tls_certfile, time.time(), self.state.reloads + 1)
        log.info("TLS certificates reloaded from %s", self.settings.tls_certfile)
        return self.state

    def after_reload(self) -> list[str]:
        """Nothing: the amqps listener has no CRL, and its clients keep their sessions."""
        return []


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _ESCAPED else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


Subject = tuple[tuple[tuple[str, str], ...], ...]


def format_subject(subject: Subject) -> str:
    """A certificate subject as RabbitMQ formats it for EXTERNAL (rabbit_ssl): RFC 4514
    order (the last RDN of the certificate first), short attribute names, comma-separated,
    multi-valued RDNs joined with '+'."""
    return ",".join(
        "+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn)
        for rdn in reversed(subject)
    )


def certificate_identity(peercert: object, login_from: str) -> str | None:
    """The user name a verified client certificate stands for (``ssl_cert_login_from``:
    the subject DN or its CN); None without a verified certificate. ``peercert`` is
    ``transport.get_extra_info("peercert")``, which Python fills only after verifying it."""
    if not isinstance(peercert, dict):
        return None
    subject = peercert.get("subject")
    if not isinstance(subject, tuple) or not subject:
        return None
    if login_from == "common_name":
        for rdn in subject:
            for name, value in rdn:
                if name == "commonName":
                    return str(value)
        return None
    return format_subject(subject)
