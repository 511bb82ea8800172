"""TLS on the inter-node link (``cluster_tls_*``; docs/cluster.md, "The inter-node link").

With ``cluster_tls_certfile`` set, the link's listener accepts only TLS and the dialer
(``cluster/link.py``'s ``Peer``) dials with TLS; the HMAC handshake runs on top, unchanged.
The contexts are ``server/listeners.py``'s (``link_contexts``): mutual, each side presenting
the node's certificate and requiring the other's, signed by ``cluster_tls_cacertfile``.

A refused peer is logged on both sides. The listener (:class:`TlsListener`) accepts and
does each handshake itself (``loop.connect_accepted_socket``) rather than giving
``create_server`` the context, because asyncio and uvloop end a failed server-side
handshake without a word (only in debug mode): here a peer whose certificate the CA did
not sign, or a plain peer's Hello, is logged with OpenSSL's reason, at most once a minute
per address and reason. A TLS ClientHello at a plain port is refused by the plain
listener's front end, which says so. A dialer logs each trouble once, until it changes or
the link comes up (a peer that keeps failing redials every second).

A CRL reloaded (SIGHUP, ``leveret ctl reload_tls``) also ends the links already up with a
node it now revokes (:meth:`LinkTls.after_reload`): OpenSSL consults the CRL only in a
handshake, so the peers' certificates of the live links are looked up in it here
(``cluster/revocation.py``), and the redial meets the new contexts.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from leveret.cluster.revocation import CrlError, Revocations, issuer_and_serial, read_crls
from leveret.server.listeners import TlsError, TlsState, link_contexts
from leveret.server.server import StartupError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from leveret.config import Settings

log = logging.getLogger("leveret.cluster")

# Seconds a link connection has to finish its TLS handshake (either side).
TLS_HANDSHAKE_TIMEOUT: Final = 5.0
# Seconds the listener stays quiet about an address that keeps failing the same way.
REFUSAL_QUIET: Final = 60.0
# Connections waiting to be accepted (asyncio's create_server default).
BACKLOG: Final = 100

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


# OpenSSL's verify codes (X509_V_ERR_*) that are not about the CA.
_REVOKED: Final = 23
_NO_CRL: Final = 3
_CRL_OUT_OF_DATE: Final = frozenset((11, 12))  # CRL not yet valid, CRL has expired
_NAME_MISMATCH: Final = frozenset((62, 64))  # host name, IP address


def _hint(exc: BaseException, *, listener: bool = False) -> str:
    reason = _reason(exc)
    code = exc.verify_code if isinstance(exc, ssl.SSLCertVerificationError) else None
    if code == _REVOKED:
        return "its certificate is revoked by this node's cluster_tls_crlfile"
    if code == _NO_CRL:
        return "this node's cluster_tls_crlfile has no CRL of the CA that signed it"
    if code in _CRL_OUT_OF_DATE:
        return "this node's cluster_tls_crlfile is out of date: install the CA's new CRL"
    if code in _NAME_MISMATCH:
        return "its certificate does not name the host dialled (cluster_tls_server_name_check)"
    if reason in _NOT_TLS:
        return "the peer does not speak TLS: is cluster TLS off on its node?"
    if reason in _UNTRUSTED_PEER:
        return "its certificate is not signed by this node's cluster_tls_cacertfile CA"
    if reason.startswith(("TLSV1_ALERT_", "SSLV3_ALERT_")):
        return "the peer refused this node's certificate (not signed by its CA?)"
    if not listener and isinstance(exc, ssl.SSLEOFError | ConnectionResetError):
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


class LiveLink(NamedTuple):
    """A link connection that is up (or in its handshake), as ``cluster/link.py`` lists
    them for :meth:`LinkTls.after_reload`."""

    # "to" (this node dialled it) or "from" (the listener accepted it).
    direction: str
    # The peer node's name (None while its Hello has not come), and its address.
    node: str | None
    address: str
    transport: asyncio.Transport

    def named(self) -> str:
        return f"node '{self.node}'" if self.node is not None else self.address


class LinkTls:
    """The link's TLS contexts and what the listener and the dialer pass asyncio.

    Reload (SIGHUP, ``leveret ctl reload_tls``) as the amqps listener's: the listening
    context only chooses, by its SNI callback (run on every ClientHello), the server
    context loaded last; a dial takes the client context loaded last. A reload builds both
    first and keeps the old ones if anything is wrong (:class:`TlsError`); links already up
    keep their sessions unless the CRL reloaded revokes their peer (:meth:`after_reload`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        try:
            self.server, self.client = link_contexts(settings)
            self.listening, _ = link_contexts(settings)
        except TlsError as exc:
            raise LinkTlsError(str(exc)) from None
        self.listening.sni_callback = self._choose
        self.state = TlsState(settings.cluster_tls_certfile, time.time())
        self._refusals: dict[tuple[str, str], float] = {}
        # What the CRL file read by the last reload revokes (None: not read, or not
        # readable here though OpenSSL took it).
        self.revoked: Revocations | None = None
        # The link connections up, listed by ``cluster/link.py`` (set by ``Links``).
        self.live: Callable[[], Iterable[LiveLink]] | None = None

    def _choose(
        self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        if sslobj.context is not self.server:
            sslobj.context = self.server

    def reload(self) -> TlsState:
        """Read the certificate, key, CA and CRL files again (same paths); may run in a
        thread (``leveret ctl reload_tls``): :meth:`after_reload` acts on the loop."""
        server, client = link_contexts(self.settings)
        revoked = self._read_revoked()
        self.server, self.client, self.revoked = server, client, revoked
        self.state = TlsState(self.state.certfile, time.time(), self.state.reloads + 1)
        log.info("cluster link TLS certificates reloaded from %s", self.state.certfile)
        return self.state

    def _read_revoked(self) -> Revocations | None:
        path, cas = self.settings.cluster_tls_crlfile, self.settings.cluster_tls_cacertfile
        if not path or not cas:
            return None
        try:
            revoked, unsigned = read_crls(Path(path).read_bytes(), Path(cas).read_bytes())
        except (OSError, CrlError) as exc:
            # OpenSSL loaded it into the new contexts a moment ago: new links are checked.
            log.warning(
                "cluster_tls_crlfile %s: the links already up are not checked against it: %s",
                path,
                exc,
            )
            return None
        if unsigned:
            log.warning(
                "cluster_tls_crlfile %s: %d CRL(s) not signed by a cluster_tls_cacertfile CA "
                "are not used to check the links already up",
                path,
                unsigned,
            )
        return revoked

    def after_reload(self) -> list[str]:
        """On the loop, after a reload: close the links up with a node whose certificate
        the CRL reloaded revokes (OpenSSL looks at a CRL only in a handshake, so these
        would go on); their redial meets the new contexts. The nodes whose links closed."""
        revoked, live = self.revoked, self.live
        if not revoked or live is None:
            return []
        closed: list[str] = []
        for link in list(live()):
            sslobj = link.transport.get_extra_info("ssl_object")
            der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
            if not der:
                continue
            try:
                revoked_here = issuer_and_serial(der) in revoked
            except CrlError:  # OpenSSL verified it: not expected
                continue
            if revoked_here:
                log.warning(
                    "inter-node link %s %s closed: its certificate is revoked by the "
                    "cluster_tls_crlfile reloaded",
                    link.direction,
                    link.named(),
                )
                link.transport.abort()
                peer = link.node or link.address
                if peer not in closed:
                    closed.append(peer)
        return closed

    def dial_options(self, host: str) -> dict[str, Any]:
        """``create_connection``'s TLS arguments to dial ``host``: with
        ``cluster_tls_server_name_check`` the peer's certificate must name it (a DNS name,
        or an IP address as a SAN IP entry), else no name is sent or checked (see
        ``link_contexts``)."""
        return {
            "ssl": self.client,
            "server_hostname": host if self.settings.cluster_tls_server_name_check else "",
            "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT,
        }

    def dial_failed(self, exc: OSError) -> str:
        """What to log for a dial whose TLS handshake failed ("" for what failed before:
        an unreachable address is the dialer's to retry quietly, as without TLS)."""
        if not isinstance(exc, ssl.SSLError | ConnectionResetError | ConnectionAbortedError):
            return ""
        return "TLS handshake: " + _describe(exc, _hint(exc))

    async def listen(
        self, factory: Callable[[], asyncio.Protocol], host: str, port: int
    ) -> TlsListener:
        """The link's listener on ``host:port`` (a socket per address, as
        ``create_server``'s), each accepted connection ``factory``'s once its handshake
        is done."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                except OSError as exc:
                    raise OSError(
                        exc.errno,
                        f"error while attempting to bind on address {address!r}: {exc.strerror}",
                    ) from None
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return TlsListener(self, factory, sockets)

    def refused(self, peer: object, exc: BaseException) -> None:
        """A handshake the listener refused: logged, once a minute per address and why."""
        host = peer[0] if isinstance(peer, tuple) and peer else peer
        key = (str(host), _reason(exc) or type(exc).__name__)
        now = time.monotonic()
        if now - self._refusals.get(key, -REFUSAL_QUIET) < REFUSAL_QUIET:
            return
        self._refusals[key] = now
        shown = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) > 1 else peer
        log.warning(
            "inter-node link from %s refused: TLS handshake: %s",
            shown,
            _describe(exc, _hint(exc, listener=True)),
        )


class TlsListener:
    """The link's listening sockets with TLS: accepts, and logs the handshakes it refuses
    (the module docstring). What ``cluster/link.py`` uses of an ``asyncio.Server``."""

    def __init__(
        self, tls: LinkTls, factory: Callable[[], asyncio.Protocol], sockets: list[socket.socket]
    ) -> None:
        self.tls = tls
        self.factory = factory
        self.sockets = sockets
        self._tasks: set[asyncio.Task[None]] = set()
        for sock in sockets:
            self._spawn(self._accept(sock))

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:  # out of file descriptors, ...: as asyncio, a pause
                log.warning("inter-node link listener: accept failed: %s", exc)
                await asyncio.sleep(1.0)
                continue
            self._spawn(self._handshake(conn, peer))

    async def _handshake(self, conn: socket.socket, peer: object) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(
                self.factory,
                conn,
                ssl=self.tls.listening,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT,
            )
        except OSError as exc:  # ssl.SSLError, a reset, the handshake's timeout
            self.tls.refused(peer, exc)
            conn.close()

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()
