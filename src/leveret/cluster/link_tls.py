"""TLS on the inter-node link (``cluster_tls_*``; docs/cluster.md, "The inter-node link").

With ``cluster_tls_certfile`` set, the link's listener accepts only TLS and the dialer
(``cluster/link.py``'s ``Peer``) dials with TLS; the HMAC handshake runs on top, unchanged.
The contexts are ``server/listeners.py``'s (``link_contexts``): mutual, each side presenting
the node's certificate and requiring the other's, signed by ``cluster_tls_cacertfile``.

A refused peer is logged by the dialing side of each pair (both nodes dial each other):
asyncio and uvloop end a failed server-side handshake without a word (only in debug mode),
so the listener says nothing of a peer whose certificate its CA did not sign; that peer's
own log says its certificate was refused, and this node's says the peer's was when it
dials it. A plain peer's Hello at a TLS port is such a failed handshake; a TLS
ClientHello at a plain port is refused by the plain listener's front end, which says so.
A dialer logs each trouble once, until it changes or the link comes up (a peer that keeps
failing redials every second).
"""

from __future__ import annotations

import logging
import ssl
import time
from typing import TYPE_CHECKING, Any, Final

from leveret.server.listeners import TlsError, TlsState, link_contexts
from leveret.server.server import StartupError

if TYPE_CHECKING:
    from leveret.config import Settings

log = logging.getLogger("leveret.cluster")

# Seconds a link connection has to finish its TLS handshake (either side).
TLS_HANDSHAKE_TIMEOUT: Final = 5.0

# OpenSSL's reasons, and what they mean on the link.
_NOT_TLS: Final = frozenset(
    ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE")
)
_UNTRUSTED_PEER: Final = frozenset(
    ("CERTIFICATE_VERIFY_FAILED", "PEER_DID_NOT_RETURN_A_CERTIFICATE", "NO_CERTIFICATE_RETURNED")
)


class LinkTlsError(StartupError):
    """The cluster TLS files cannot be used; the node does not start (the CLI prints it)."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = getattr(exc, "reason", None)
        if isinstance(reason, str):
            return reason
    return ""


def _hint(exc: BaseException) -> str:
    reason = _reason(exc)
    if reason in _NOT_TLS:
        return "the peer does not speak TLS: is cluster TLS off on its node?"
    if reason in _UNTRUSTED_PEER:
        return "its certificate is not signed by this node's cluster_tls_cacertfile CA"
    if reason.startswith(("TLSV1_ALERT_", "SSLV3_ALERT_")):
        return "the peer refused this node's certificate (not signed by its CA?)"
    if isinstance(exc, ssl.SSLEOFError | ConnectionResetError):
        return "closed during the TLS handshake: is cluster TLS off on that node?"
    return ""


def _describe(exc: BaseException, hint: str) -> str:
    text = str(exc) or type(exc).__name__
    return f"{text} ({hint})" if hint else text


class DialNotes:
    """What a dialer logs about a peer it cannot link to: each trouble once, again only
    once it changed or the link was up in between."""

    def __init__(self) -> None:
        self._told: dict[str, str] = {}

    def note(self, node: str, text: str) -> None:
        if text and self._told.get(node) != text:
            self._told[node] = text
            log.warning("inter-node link to node '%s' failed: %s", node, text)

    def clear(self, node: str) -> None:
        self._told.pop(node, None)

    def closed_early(self, node: str, *, tls: bool) -> None:
        """The peer closed a connection before the link's handshake was done."""
        hint = (
            "is this node's certificate refused there?"
            if tls
            else "its log says why: has that node cluster TLS on (cluster_tls_certfile) "
            "and this one not?"
        )
        self.note(node, f"closed by the peer before the handshake ({hint})")


class LinkTls:
    """The link's TLS contexts and what the listener and the dialer pass asyncio.

    Reload (SIGHUP, ``leveret ctl reload_tls``) as the amqps listener's: the listening
    context only chooses, by its SNI callback (run on every ClientHello), the server
    context loaded last; a dial takes the client context loaded last. A reload builds both
    first and keeps the old ones if anything is wrong (:class:`TlsError`); links already up
    keep their sessions."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        try:
            self.server, self.client = link_contexts(settings)
            self.listening, _ = link_contexts(settings)
        except TlsError as exc:
            raise LinkTlsError(str(exc)) from None
        self.listening.sni_callback = self._choose
        self.state = TlsState(settings.cluster_tls_certfile, time.time())

    def _choose(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        if sslobj.context is not self.server:
            sslobj.context = self.server

    def reload(self) -> TlsState:
        """Read the certificate, key and CA files again (same paths)."""
        self.server, self.client = link_contexts(self.settings)
        self.state = TlsState(self.state.certfile, time.time(), self.state.reloads + 1)
        log.info("cluster link TLS certificates reloaded from %s", self.state.certfile)
        return self.state

    def dial_options(self) -> dict[str, Any]:
        """``create_connection``'s TLS arguments (no name sent or checked: see
        ``link_contexts``)."""
        return {
            "ssl": self.client,
            "server_hostname": "",
            "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT,
        }

    def dial_failed(self, exc: OSError) -> str:
        """What to log for a dial whose TLS handshake failed ("" for what failed before:
        an unreachable address is the dialer's to retry quietly, as without TLS)."""
        if not isinstance(exc, ssl.SSLError | ConnectionResetError | ConnectionAbortedError):
            return ""
        return "TLS handshake: " + _describe(exc, _hint(exc))

    def listen_options(self) -> dict[str, Any]:
        """``create_server``'s TLS arguments for the link's listener."""
        return {"ssl": self.listening, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT}
