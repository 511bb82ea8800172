"""The amqps listener of a broker process, through pika: beside the plain listener, mutual
TLS, certificate reload on SIGHUP and by ``leveret ctl reload_tls``, and EXTERNAL. The CA
and certificates are made at test time (trustme)."""

from __future__ import annotations

import re
import signal
import ssl
import time
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions
import pytest
import trustme
from cryptography import x509

from tests.integration.ctl_support import ctl, new_data_dir, ok, start
from tests.integration.pika_support import connection_parameters

if TYPE_CHECKING:
    from pathlib import Path

    from tests.integration.conftest import Broker

# Left out of the compiled pass (scripts/test): the TLS listeners are not compiled.
pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.pure_only]

_AMQPS = re.compile(r"listening on amqps://127\.0\.0\.1:(\d+)")
# pika raises the ssl module's error when it rejects the broker's certificate, its own when
# the broker rejects the client's.
HANDSHAKE_FAILED = (pika.exceptions.AMQPConnectionError, ssl.SSLError, ConnectionError)
# verify_peer and fail_if_no_peer_cert through LEVERET_* variables, as an operator would.
MUTUAL = {"LEVERET_TLS_VERIFY_PEER": "true", "LEVERET_TLS_FAIL_IF_NO_PEER_CERT": "true"}


def _write(cert: trustme.LeafCert, certfile: Path, keyfile: Path) -> None:
    cert.private_key_pem.write_to_path(str(keyfile))
    cert.cert_chain_pems[0].write_to_path(str(certfile))


def _start_tls(
    tmp: Path, ca: trustme.CA, env: dict[str, str] | None = None
) -> tuple[Broker, int, Path]:
    data = new_data_dir()
    certfile, keyfile, cafile = tmp / "server.crt", tmp / "server.key", tmp / "ca.pem"
    _write(ca.issue_cert("127.0.0.1", common_name="broker"), certfile, keyfile)
    ca.cert_pem.write_to_path(str(cafile))
    broker = start(
        data,
        "--tls-port",
        "0",
        "--tls-certfile",
        str(certfile),
        "--tls-keyfile",
        str(keyfile),
        "--tls-cacertfile",
        str(cafile),
        env=env,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        match = _AMQPS.search(broker.log_text())
        if match:
            return broker, int(match.group(1)), data
        time.sleep(0.05)
    broker.stop()
    raise AssertionError("no amqps listener:\n" + broker.log_text())


def _client_context(ca: trustme.CA, cert: trustme.LeafCert | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if cert is not None:
        cert.configure_cert(context)
    return context


def _tls_connect(port: int, context: ssl.SSLContext, **params: Any) -> Any:
    return pika.BlockingConnection(
        connection_parameters(
            "127.0.0.1", port, ssl_options=pika.SSLOptions(context, "127.0.0.1"), **params
        )
    )


def _round_trip(conn: Any, name: str) -> None:
    ch = conn.channel()
    ch.queue_declare(name, exclusive=True)
    ch.basic_publish("", name, b"over tls")
    assert ch.basic_get(name, auto_ack=True)[2] == b"over tls"


def test_plain_and_tls_side_by_side(tmp_path: Path) -> None:
    ca = trustme.CA()
    broker, port, data = _start_tls(tmp_path, ca)
    try:
        tls = _tls_connect(port, _client_context(ca))
        _round_trip(tls, "via-tls")
        plain = pika.BlockingConnection(connection_parameters(broker.host, broker.port))
        _round_trip(plain, "via-plain")
        tls.close()
        plain.close()
        status = ok(data, "status")
        assert f"amqps://127.0.0.1:{port}" in status
        # A client that does not trust the broker's CA fails the handshake.
        with pytest.raises(HANDSHAKE_FAILED):
            _tls_connect(port, _client_context(trustme.CA()))
    finally:
        broker.stop()


def test_mutual_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    broker, port, _data = _start_tls(tmp_path, ca, MUTUAL)
    try:
        client = ca.issue_cert("client", common_name="app")
        conn = _tls_connect(port, _client_context(ca, client))
        _round_trip(conn, "mutual")
        conn.close()
        with pytest.raises(HANDSHAKE_FAILED):
            _tls_connect(port, _client_context(ca))  # no client certificate
        stranger = trustme.CA().issue_cert("client", common_name="stranger")
        with pytest.raises(HANDSHAKE_FAILED):
            _tls_connect(port, _client_context(ca, stranger))  # not signed by our CA
    finally:
        broker.stop()


def test_reload_on_sighup_and_by_ctl(tmp_path: Path) -> None:
    ca, renewed_ca = trustme.CA(), trustme.CA()
    broker, port, data = _start_tls(tmp_path, ca)
    try:
        before = _tls_connect(port, _client_context(ca))
        _write(
            renewed_ca.issue_cert("127.0.0.1", common_name="renewed"),
            tmp_path / "server.crt",
            tmp_path / "server.key",
        )
        assert broker.process is not None
        broker.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "TLS certificates reloaded" not in broker.log_text():
            assert time.monotonic() < deadline, broker.log_text()
            time.sleep(0.05)
        _tls_connect(port, _client_context(renewed_ca)).close()
        with pytest.raises(HANDSHAKE_FAILED):
            _tls_connect(port, _client_context(ca))
        _round_trip(before, "still-open")  # a connection made before the reload stays
        before.close()
        # And back, by ctl.
        _write(
            ca.issue_cert("127.0.0.1", common_name="again"),
            tmp_path / "server.crt",
            tmp_path / "server.key",
        )
        assert "reloads: 2" in ok(data, "reload_tls")
        _tls_connect(port, _client_context(ca)).close()
        # A broken file: the reload is refused and the certificate in use is kept.
        (tmp_path / "server.key").write_text("garbage")
        bad = ctl(data, "reload_tls")
        assert bad.returncode == 65
        assert "certificates in use are kept" in bad.stderr
        _tls_connect(port, _client_context(ca)).close()
    finally:
        broker.stop()


def test_external_login_from_the_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    env = {**MUTUAL, "LEVERET_SSL_CERT_LOGIN_FROM": "common_name"}
    broker, port, data = _start_tls(tmp_path, ca, env)
    try:
        ok(data, "add_user", "app-cert")  # no password: certificate login only
        ok(data, "set_permissions", "app-cert", ".*", ".*", ".*")
        client = ca.issue_cert("client", common_name="app-cert")
        conn = _tls_connect(
            port, _client_context(ca, client), credentials=pika.credentials.ExternalCredentials()
        )
        _round_trip(conn, "external")
        conn.close()
    finally:
        broker.stop()


def test_external_with_the_distinguished_name(tmp_path: Path) -> None:
    """The default ssl_cert_login_from: the user is named by the certificate's whole subject
    in RabbitMQ's format; a certificate whose user does not exist is refused (403, after the
    failed-login delay) and the log says why; the plain listener never offers EXTERNAL."""
    ca = trustme.CA()
    broker, port, data = _start_tls(tmp_path, ca, MUTUAL)
    try:
        client = ca.issue_cert("client", common_name="app-dn")
        dn = x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes()).subject
        name = dn.rfc4514_string()  # CN=app-dn,OU=...,O=trustme ...: last RDN first
        external = pika.credentials.ExternalCredentials()
        started = time.monotonic()
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
            _tls_connect(port, _client_context(ca, client), credentials=external)
        assert time.monotonic() - started >= 2.9
        assert "Login was refused using authentication mechanism EXTERNAL" in str(info.value)
        assert f"EXTERNAL login refused for user '{name}': unknown user" in broker.log_text()
        ok(data, "add_user", name)
        ok(data, "set_permissions", name, ".*", ".*", ".*")
        conn = _tls_connect(port, _client_context(ca, client), credentials=external)
        _round_trip(conn, "external-dn")
        conn.close()
        # Without TLS there is no certificate: EXTERNAL is not offered (pika gives up).
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(
                connection_parameters(broker.host, broker.port, credentials=external)
            )
    finally:
        broker.stop()
