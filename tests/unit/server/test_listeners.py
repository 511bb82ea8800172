"""TLS contexts from the settings, reload, and the user name a verified client certificate
gives for EXTERNAL: real handshakes on 127.0.0.1 port 0 with a CA made by trustme."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import ssl
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import trustme

from leveret.cluster.link_tls import LinkTls, LinkTlsError
from leveret.config import Settings
from leveret.protocol.cluster import codec as c
from leveret.server.listeners import (
    TlsContexts,
    TlsError,
    certificate_identity,
    format_subject,
    link_contexts,
    make_context,
)
from leveret.server.server import StartupError
from tests.crl_support import revocation_list


def _files(tmp_path: Path, ca: trustme.CA, name: str = "server") -> tuple[Path, Path, Path]:
    cert = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    certfile, keyfile, cafile = (tmp_path / f"{name}.{x}" for x in ("crt", "key", "ca"))
    cert.private_key_pem.write_to_path(str(keyfile))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    ca.cert_pem.write_to_path(str(cafile))
    return certfile, keyfile, cafile


def _settings(tmp_path: Path, ca: trustme.CA, **extra: Any) -> Settings:
    certfile, keyfile, cafile = _files(tmp_path, ca)
    return Settings(
        tls_certfile=str(certfile),
        tls_keyfile=str(keyfile),
        tls_cacertfile=str(cafile),
        **extra,
    )


class _Peer(asyncio.Protocol):
    seen: list[object] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.seen.append(transport.get_extra_info("peercert"))
        transport.close()


async def _handshake(
    contexts: TlsContexts, trust: trustme.CA, client_cert: trustme.LeafCert | None
) -> tuple[dict[str, Any], object]:
    """Connect once; the server certificate the client saw and the peercert the server saw."""
    _Peer.seen = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Peer, "127.0.0.1", 0, ssl=contexts.listening)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context()
    trust.configure_trust(client)
    if client_cert is not None:
        client_cert.configure_cert(client)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        seen = writer.get_extra_info("peercert")
        await reader.read()
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    return seen, _Peer.seen[0]


def test_client_certificate_identity(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = _settings(tmp_path, ca, tls_verify_peer=True, tls_fail_if_no_peer_cert=True)
    client_cert = ca.issue_cert("client@example", common_name="app-client")
    _, peercert = asyncio.run(_handshake(TlsContexts(settings), ca, client_cert))
    dn = certificate_identity(peercert, "distinguished_name")
    assert dn is not None
    # RabbitMQ's format: the certificate's last RDN first, short names, comma-separated.
    assert dn.startswith("CN=app-client,OU=Testing cert #")
    assert dn.endswith(",O=trustme v" + version("trustme"))
    assert certificate_identity(peercert, "common_name") == "app-client"


def test_no_client_certificate_means_no_identity(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = _settings(tmp_path, ca, tls_verify_peer=True)  # asked for, not required
    _, peercert = asyncio.run(_handshake(TlsContexts(settings), ca, None))
    assert certificate_identity(peercert, "distinguished_name") is None
    assert certificate_identity(None, "common_name") is None


def test_required_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = _settings(tmp_path, ca, tls_verify_peer=True, tls_fail_if_no_peer_cert=True)
    # The server refuses the handshake; under TLS 1.3 the client learns it on its first
    # read (an alert or the end of the stream), and the server never sees a connection.
    with pytest.raises((ssl.SSLError, ConnectionError, IndexError)):
        asyncio.run(_handshake(TlsContexts(settings), ca, None))
    assert _Peer.seen == []


def test_reload_serves_the_new_certificate(tmp_path: Path) -> None:
    ca, other_ca = trustme.CA(), trustme.CA()
    settings = _settings(tmp_path, ca)
    contexts = TlsContexts(settings)
    first, _ = asyncio.run(_handshake(contexts, ca, None))
    # Rotate the files in place (same paths), as an operator renewing a certificate does.
    rotated = other_ca.issue_cert("127.0.0.1", common_name="rotated")
    rotated.private_key_pem.write_to_path(settings.tls_keyfile)
    rotated.cert_chain_pems[0].write_to_path(settings.tls_certfile)
    # Until the reload, the old certificate is served.
    again, _ = asyncio.run(_handshake(contexts, ca, None))
    assert again["subject"] == first["subject"]
    assert contexts.reload().reloads == 1
    new, _ = asyncio.run(_handshake(contexts, other_ca, None))
    assert ("commonName", "rotated") in [pair for rdn in new["subject"] for pair in rdn]
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_handshake(contexts, ca, None))


def test_a_bad_reload_keeps_the_old_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    settings = _settings(tmp_path, ca)
    contexts = TlsContexts(settings)
    Path(settings.tls_keyfile).write_text("not a key")
    with pytest.raises(TlsError, match="TLS settings cannot be used"):
        contexts.reload()
    asyncio.run(_handshake(contexts, ca, None))


def test_minimum_version_and_ciphers(tmp_path: Path) -> None:
    ca = trustme.CA()
    context = make_context(_settings(tmp_path, ca, tls_min_version="1.3"))
    assert context.minimum_version is ssl.TLSVersion.TLSv1_3
    with pytest.raises(TlsError):
        make_context(_settings(tmp_path, ca, tls_ciphers="NO-SUCH-CIPHER"))
    with pytest.raises(TlsError, match=r"nothing\.pem"):
        make_context(Settings(tls_certfile="nothing.pem", tls_keyfile="nothing.key"))


@pytest.mark.parametrize(
    ("subject", "dn"),
    [
        (((("countryName", "US"),), (("commonName", "guest"),)), "CN=guest,C=US"),
        (((("organizationName", "A, B"),), (("commonName", "x+y"),)), "CN=x\\+y,O=A\\, B"),
        (((("commonName", "#lead"),),), "CN=\\#lead"),
        (((("commonName", " pad "),),), "CN=\\ pad\\ "),
        (((("domainComponent", "com"), ("userId", "u")),), "DC=com+UID=u"),
        (((("1.2.3.4", "v"),),), "1.2.3.4=v"),
    ],
)
def test_subject_format(subject: Any, dn: str) -> None:
    assert format_subject(subject) == dn


def _link_settings(
    tmp_path: Path, name: str, signer: trustme.CA, trusted: trustme.CA, **extra: Any
) -> Settings:
    """A node's cluster TLS settings: its certificate from ``signer``, trusting ``trusted``."""
    certfile, keyfile, _ = _files(tmp_path, signer, name)
    cafile = tmp_path / f"{name}.trusted"
    trusted.cert_pem.write_to_path(str(cafile))
    return Settings(
        cluster_tls_certfile=str(certfile),
        cluster_tls_keyfile=str(keyfile),
        cluster_tls_cacertfile=str(cafile),
        **extra,
    )


async def _link_handshake(listener: Settings, dialer: Settings) -> object:
    """One link connection from ``dialer``'s node to ``listener``'s: the certificate the
    listener saw (the dialer's), or the handshake's error."""
    _Peer.seen = []
    server_context, _ = link_contexts(listener)
    _, client_context = link_contexts(dialer)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Peer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname=""
        )
        writer.write(b"\0")
        await reader.read()  # TLS 1.3: a refused client certificate is learnt here
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    return _Peer.seen[0]


def _subject_cn(peercert: object) -> str:
    assert isinstance(peercert, dict)
    return str(next(v for rdn in peercert["subject"] for k, v in rdn if k == "commonName"))


def test_link_tls_is_mutual_and_each_side_verifies_the_other(tmp_path: Path) -> None:
    ca, stranger = trustme.CA(), trustme.CA()
    a = _link_settings(tmp_path, "a", ca, ca)
    b = _link_settings(tmp_path, "b", ca, ca)
    # Both signed by the cluster's CA: the listener sees the dialer's certificate (no
    # name is checked: peers are dialled at addresses, the HMAC says which node it is).
    assert _subject_cn(asyncio.run(_link_handshake(a, b))) == "b"
    # A dialer whose certificate another CA signed is refused by the listener...
    outsider = _link_settings(tmp_path, "outsider", stranger, ca)
    with pytest.raises((ssl.SSLError, ConnectionError, IndexError)):
        asyncio.run(_link_handshake(a, outsider))
    assert _Peer.seen == []
    # ... and it refuses to link to a listener its own CA did not sign, either way round.
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_link_handshake(_link_settings(tmp_path, "c", stranger, stranger), a))


def test_link_tls_without_verification_encrypts_only(tmp_path: Path) -> None:
    ca, stranger = trustme.CA(), trustme.CA()
    a = _link_settings(tmp_path, "a", ca, ca, cluster_tls_verify_peer=False)
    b = _link_settings(tmp_path, "b", stranger, stranger, cluster_tls_verify_peer=False)
    asyncio.run(_link_handshake(a, b))
    asyncio.run(_link_handshake(b, a))


def test_link_tls_files_that_cannot_be_used_stop_the_node_with_a_clear_error(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    missing = dataclasses.replace(
        _link_settings(tmp_path, "a", ca, ca), cluster_tls_cacertfile=str(tmp_path / "none.pem")
    )
    with pytest.raises(TlsError, match="cluster TLS settings cannot be used: cannot read"):
        link_contexts(missing)
    with pytest.raises(StartupError, match="cannot read"):
        LinkTls(missing)
    wrong_key = dataclasses.replace(
        _link_settings(tmp_path, "b", ca, ca), cluster_tls_keyfile=str(_files(tmp_path, ca, "k")[1])
    )
    with pytest.raises(LinkTlsError, match="cluster TLS settings cannot be used"):
        LinkTls(wrong_key)


async def _served(listener: LinkTls, dialer: Settings) -> dict[str, Any]:
    """The certificate a dialer with ``dialer``'s settings is shown by ``listener``."""
    _, client_context = link_contexts(dialer)
    server = await listener.listen(_Peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname=""
        )
        seen: dict[str, Any] = writer.get_extra_info("peercert")
        await reader.read()
        writer.close()
    finally:
        server.close()
    return seen


def test_link_tls_reload_serves_the_new_certificate_and_keeps_the_old_if_bad(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    a = _link_settings(tmp_path, "a", ca, ca)
    b = _link_settings(tmp_path, "b", ca, ca)
    tls = LinkTls(a)
    assert _subject_cn(asyncio.run(_served(tls, b))) == "a"
    # Renewed in place (same paths): served once reloaded, by the same listening context.
    renewed = ca.issue_cert("127.0.0.1", common_name="a-renewed")
    renewed.private_key_pem.write_to_path(a.cluster_tls_keyfile)
    renewed.cert_chain_pems[0].write_to_path(a.cluster_tls_certfile)
    assert _subject_cn(asyncio.run(_served(tls, b))) == "a"
    dialing = tls.client
    assert tls.reload().reloads == 1
    assert tls.client is not dialing  # the next dial presents the new certificate too
    assert _subject_cn(asyncio.run(_served(tls, b))) == "a-renewed"
    Path(a.cluster_tls_keyfile).write_text("not a key")
    with pytest.raises(TlsError, match="cluster TLS settings cannot be used"):
        tls.reload()
    assert tls.state.reloads == 1
    assert _subject_cn(asyncio.run(_served(tls, b))) == "a-renewed"


def test_the_link_listener_logs_the_handshakes_it_refuses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca, stranger = trustme.CA(), trustme.CA()
    listener = LinkTls(_link_settings(tmp_path, "a", ca, ca))
    _, outsider = link_contexts(_link_settings(tmp_path, "outsider", stranger, ca))
    hello = c.encode(c.Hello("plain", 1, b"n" * 16, c.cluster_tag("secret")))

    def said(part: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if part in r.getMessage()]

    async def attempts() -> None:
        _Peer.seen = []
        server = await listener.listen(_Peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            for _ in range(2):  # a peer redialling: the same refusal is logged once
                with contextlib.suppress(ssl.SSLError, ConnectionError):
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", port, ssl=outsider, server_hostname=""
                    )
                    writer.write(b"\0")
                    await reader.read()
                    writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(hello)  # a node without link TLS
            await reader.read()
            writer.close()
            for _ in range(100):
                if said("does not speak TLS"):
                    break
                await asyncio.sleep(0.02)
        finally:
            server.close()

    with caplog.at_level(logging.WARNING, logger="leveret.cluster"):
        asyncio.run(attempts())
    untrusted = said("not signed by this node's cluster_tls_cacertfile CA")
    assert len(untrusted) == 1
    assert untrusted[0].startswith("inter-node link from 127.0.0.1:")
    assert "refused: TLS handshake: [SSL: CERTIFICATE_VERIFY_FAILED]" in untrusted[0]
    assert len(said("does not speak TLS")) == 1
    assert _Peer.seen == []  # no connection reached the link's front end


def _revoking(
    tmp_path: Path, settings: Settings, ca: trustme.CA, *revoked: Path, **kw: Any
) -> Settings:
    """``settings`` with a ``cluster_tls_crlfile`` of ``ca`` listing the certificates in
    the files ``revoked``."""
    crlfile = tmp_path / f"{len(list(tmp_path.glob('*.crl')))}.crl"  # a new file each time
    crlfile.write_bytes(revocation_list(ca, *(path.read_bytes() for path in revoked), **kw))
    return dataclasses.replace(settings, cluster_tls_crlfile=str(crlfile))


async def _dial(listener: LinkTls, dialer: Settings, host: str) -> object:
    """One dial of ``dialer``'s node to ``listener``'s at ``host``, with the options the
    link's dialer uses: the listener's view of it, or the handshake's error."""
    _Peer.seen = []
    server = await listener.listen(_Peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, **LinkTls(dialer).dial_options(host)
        )
        writer.write(b"\0")
        await reader.read()  # TLS 1.3: a refused client certificate is learnt here
        writer.close()
    except OSError as exc:
        return exc
    finally:
        server.close()
    return _Peer.seen[0] if _Peer.seen else None


def test_a_revoked_peer_is_refused_both_ways_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    plain_a = _link_settings(tmp_path, "a", ca, ca)
    b = _link_settings(tmp_path, "b", ca, ca)
    c = _link_settings(tmp_path, "c", ca, ca)
    a = _revoking(tmp_path, plain_a, ca, Path(c.cluster_tls_certfile))
    with caplog.at_level(logging.WARNING, logger="leveret.cluster"):
        # a's listener refuses c's dial, and says why.
        assert _dial_result_is_refusal(asyncio.run(_dial(LinkTls(a), c, "127.0.0.1")))
        assert _Peer.seen == []
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1
    assert "certificate revoked" in refusals[0]
    assert "revoked by this node's cluster_tls_crlfile" in refusals[0]
    # a's dialer refuses c's listener.
    failed = asyncio.run(_dial(LinkTls(c), a, "127.0.0.1"))
    assert isinstance(failed, ssl.SSLCertVerificationError)
    assert failed.verify_message == "certificate revoked"
    told = LinkTls(a).dial_failed(failed)
    assert "revoked by this node's cluster_tls_crlfile" in told
    # b, not listed, links to a both ways; without the CRL a takes c's link.
    assert _subject_cn(asyncio.run(_dial(LinkTls(a), b, "127.0.0.1"))) == "b"
    assert _subject_cn(asyncio.run(_dial(LinkTls(b), a, "127.0.0.1"))) == "a"
    assert _subject_cn(asyncio.run(_dial(LinkTls(plain_a), c, "127.0.0.1"))) == "c"
    # A new CRL is read on reload (same path), as the certificates: new dials see it.
    listening = LinkTls(_revoking(tmp_path, plain_a, ca))
    assert _subject_cn(asyncio.run(_dial(listening, c, "127.0.0.1"))) == "c"
    Path(listening.settings.cluster_tls_crlfile).write_bytes(
        Path(a.cluster_tls_crlfile).read_bytes()
    )
    listening.reload()
    assert _dial_result_is_refusal(asyncio.run(_dial(listening, c, "127.0.0.1")))
    assert _Peer.seen == []
    # A CRL out of date refuses every peer, with a hint to install the new one.
    stale = _revoking(tmp_path, plain_a, ca, valid_for=-datetime.timedelta(minutes=1))
    failed = asyncio.run(_dial(LinkTls(b), stale, "127.0.0.1"))
    assert isinstance(failed, ssl.SSLCertVerificationError)
    assert "cluster_tls_crlfile is out of date" in LinkTls(stale).dial_failed(failed)


def _dial_result_is_refusal(result: object) -> bool:
    """A dial the listener refused: the dialer saw an error or the connection end first."""
    return isinstance(result, OSError) or result is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"not a CRL\n", "must hold PEM certificate revocation lists only"),
        (b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n", "is not a valid CRL"),
        ("certificate", "must hold PEM certificate revocation lists only"),
    ],
)
def test_a_crl_file_that_cannot_be_used_stops_the_node_with_a_clear_error(
    tmp_path: Path, content: bytes | str | None, message: str
) -> None:
    ca = trustme.CA()
    crlfile = tmp_path / "cluster.crl"
    if content == "certificate":
        # A CA's certificate where the CRL goes would be trusted, not a revocation.
        crlfile.write_bytes(revocation_list(ca) + trustme.CA().cert_pem.bytes())
    elif isinstance(content, bytes):
        crlfile.write_bytes(content)
    settings = dataclasses.replace(
        _link_settings(tmp_path, "a", ca, ca), cluster_tls_crlfile=str(crlfile)
    )
    with pytest.raises(LinkTlsError, match=f"cluster_tls_crlfile cannot be used: .*{message}"):
        LinkTls(settings)


def _named(tmp_path: Path, settings: Settings, ca: trustme.CA, *names: str) -> Settings:
    """``settings`` with a certificate from ``ca`` naming ``names`` only."""
    cert = ca.issue_cert(*names, common_name="named")
    cert.cert_chain_pems[0].write_to_path(settings.cluster_tls_certfile)
    cert.private_key_pem.write_to_path(settings.cluster_tls_keyfile)
    return settings


def test_the_dialer_checks_the_name_of_the_host_it_dials_when_told(tmp_path: Path) -> None:
    ca = trustme.CA()
    a = _link_settings(tmp_path, "a", ca, ca, cluster_tls_server_name_check=True)
    ip = LinkTls(_named(tmp_path, _link_settings(tmp_path, "b", ca, ca), ca, "127.0.0.1"))
    dns = LinkTls(_named(tmp_path, _link_settings(tmp_path, "c", ca, ca), ca, "localhost"))
    other = LinkTls(_named(tmp_path, _link_settings(tmp_path, "d", ca, ca), ca, "other.test"))
    # The host dialled, an address or a name, is what the certificate must name.
    assert _subject_cn(asyncio.run(_dial(ip, a, "127.0.0.1"))) == "a"
    assert _subject_cn(asyncio.run(_dial(dns, a, "localhost"))) == "a"
    for listener, host in ((other, "127.0.0.1"), (dns, "127.0.0.1"), (ip, "localhost")):
        failed = asyncio.run(_dial(listener, a, host))
        assert isinstance(failed, ssl.SSLCertVerificationError), (host, failed)
        assert "does not name the host dialled" in LinkTls(a).dial_failed(failed)
    # Off (the default): no name is sent or checked.
    unchecked = dataclasses.replace(a, cluster_tls_server_name_check=False)
    assert LinkTls(unchecked).dial_options("127.0.0.1")["server_hostname"] == ""
    assert _subject_cn(asyncio.run(_dial(other, unchecked, "127.0.0.1"))) == "a"
