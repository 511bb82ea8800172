"""TLS on the inter-node link (``cluster_tls_*``) through real nodes: two nodes whose
certificates one CA signed link over mutual TLS (pika publishes on one to a queue the other
leads and consumes it back); a node whose certificate that CA did not sign, and a node
without link TLS, are refused both ways, logged on both sides, their queues answering as a
down node's, and every node keeps running. Certificates are made at test time (trustme)."""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING, cast

import pika
import pika.exceptions
import pytest
import trustme

from tests.cluster import nodes
from tests.cluster.nodes import connect
from tests.cluster.test_cluster_link import consume, declare_on, publish_confirmed
from tests.crl_support import revocation_list
from tests.integration.ctl_support import ok

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]

_TLS_PORT = re.compile(r"inter-node link listening on [^ ]+:(\d+) \(TLS\)")


def _tls_env(
    directory: Path,
    name: str,
    signer: trustme.CA,
    trusted: trustme.CA,
    names: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> dict[str, str]:
    """The cluster TLS settings of a node whose certificate ``signer`` made (naming
    ``names``), trusting the peers ``trusted`` signed."""
    cert = signer.issue_cert(*names, common_name=name)
    certfile, keyfile, cafile = (directory / f"{name}.{x}" for x in ("crt", "key", "ca"))
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    trusted.cert_pem.write_to_path(str(cafile))
    return {
        "LEVERET_CLUSTER_TLS_CERTFILE": str(certfile),
        "LEVERET_CLUSTER_TLS_KEYFILE": str(keyfile),
        "LEVERET_CLUSTER_TLS_CACERTFILE": str(cafile),
    }


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a and b keep their certificates (``NAME.crt``, ``NAME.key``, ``NAME.ca``)."""
    return tmp_path_factory.mktemp("pki")


@pytest.fixture(scope="module")
def tls_nodes(etcd_server: EtcdServer, ca: trustme.CA, pki: Path) -> Iterator[list[Node]]:
    """Nodes a and b with link TLS, their certificates signed by ``ca``."""
    prefix = f"/leveret-test/linktls-{uuid.uuid4().hex[:8]}/"
    directory = pki
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test"):
            env = _tls_env(directory, name, ca, ca)
            started.append(nodes.start_node(etcd_server, prefix, name, env=env))
        yield started
    finally:
        for node in started:
            if node.broker.process is not None and node.broker.process.poll() is None:
                node.broker.stop()


def _refused_as_down(node: Node, queue: str, leader: str) -> bool:
    """Whether ``node`` answers for ``queue`` as for a queue whose leader is down."""
    conn = connect(node)
    try:
        conn.channel().queue_declare(queue, passive=True)
        return False
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code == 404 and f"home node '{leader}'" in exc.reply_text
    finally:
        if conn.is_open:
            conn.close()


def _in_log(node: Node, *parts: str) -> bool:
    return any(all(p in line for p in parts) for line in node.broker.log)


def _alive(*running: Node) -> None:
    for node in running:
        assert node.broker.process is not None
        assert node.broker.process.poll() is None


def _shown(port: int, ca: trustme.CA) -> str:
    """The common name of the certificate the link port at ``port`` presents to a client
    with a certificate ``ca`` signed."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    ca.configure_trust(client)
    ca.issue_cert("client").configure_cert(client)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        client.wrap_socket(raw) as tls,
    ):
        peercert = tls.getpeercert()
        assert peercert is not None
        subject = cast("tuple[tuple[tuple[str, str], ...], ...]", peercert["subject"])
        return next(value for rdn in subject for key, value in rdn if key == "commonName")


def test_two_nodes_link_over_mutual_tls(tls_nodes: list[Node], ca: trustme.CA, pki: Path) -> None:
    a, b = tls_nodes
    declare_on(b, "q.tls", a)
    bodies = [b"m%d" % i for i in range(200)]
    publish_confirmed(a, "q.tls", bodies)
    assert consume(a, "q.tls", len(bodies)) == bodies
    assert _in_log(a, "inter-node link to node 'b@test' is up")
    # b's link port speaks TLS only, to a client that presents a certificate its CA signed.
    match = _TLS_PORT.search(b.broker.log_text())
    assert match is not None
    port = int(match.group(1))
    assert _shown(port, ca) == "b@test"
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    ca.configure_trust(client)
    ca.issue_cert("client").configure_cert(client)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        client.wrap_socket(raw) as accepted,
    ):
        # Accepted: the link waits for the rest of a frame.
        accepted.settimeout(0.5)
        accepted.sendall(b"\0")
        with pytest.raises(TimeoutError):
            accepted.recv(1)
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.check_hostname = False
    ca.configure_trust(anonymous)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        anonymous.wrap_socket(raw) as tls,
    ):
        # TLS 1.3: the server's refusal of no certificate comes after the client's side
        # of the handshake, as an alert or the end of the connection (an accepted one
        # would wait for the rest of a frame: a timeout here).
        try:
            tls.sendall(b"\0")
            data = tls.recv(1)
        except (ssl.SSLError, ConnectionResetError):
            data = b""
        assert data == b""
    # Renewed certificates are read again on SIGHUP and by ctl reload_tls, as the amqps
    # listener's; the link goes on.
    renewed = ca.issue_cert("127.0.0.1", common_name="b-renewed")
    renewed.cert_chain_pems[0].write_to_path(str(pki / "b@test.crt"))
    renewed.private_key_pem.write_to_path(str(pki / "b@test.key"))
    assert b.broker.process is not None
    b.broker.process.send_signal(signal.SIGHUP)
    nodes.eventually(lambda: _in_log(b, "cluster link TLS certificates reloaded"))
    assert _shown(port, ca) == "b-renewed"
    assert "cluster_reloads: 2" in ok(b.data_dir, "reload_tls")
    publish_confirmed(a, "q.tls", [b"after"])
    assert consume(a, "q.tls", 1) == [b"after"]


def test_a_node_whose_certificate_the_ca_did_not_sign_is_not_linked(
    tls_nodes: list[Node], ca: trustme.CA, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    a, b = tls_nodes
    # c trusts the cluster's CA, but its own certificate comes from another.
    env = _tls_env(tmp_path, "c@test", trustme.CA(), ca)
    c = nodes.start_node(etcd_server, a.prefix, "c@test", env=env)
    try:
        conn = connect(c)
        conn.channel().queue_declare("q.stranger", durable=True)
        conn.close()
        nodes.eventually(lambda: _refused_as_down(a, "q.stranger", "c@test"))
        # Refused both ways, and said so on both sides.
        nodes.eventually(
            lambda: (
                _in_log(a, "link to node 'c@test' failed: TLS handshake", "not signed by")
                and _in_log(a, "link from 127.0.0.1:", "refused: TLS handshake", "not signed")
                and _in_log(c, "inter-node link to node 'a@test' failed")
            )
        )
        assert not _in_log(a, "inter-node link to node 'c@test' is up")
        assert _refused_as_down(b, "q.stranger", "c@test")
        _alive(a, b, c)
        # a and b still link.
        declare_on(b, "q.still", a)
        publish_confirmed(a, "q.still", [b"x"])
        assert consume(a, "q.still", 1) == [b"x"]
    finally:
        c.broker.stop()


def test_a_node_without_link_tls_is_not_linked(
    tls_nodes: list[Node], etcd_server: EtcdServer
) -> None:
    a, _b = tls_nodes
    d = nodes.start_node(etcd_server, a.prefix, "d@test")
    try:
        conn = connect(d)
        conn.channel().queue_declare("q.plain", durable=True)
        conn.close()
        nodes.eventually(lambda: _refused_as_down(a, "q.plain", "d@test"))
        nodes.eventually(
            lambda: (
                _in_log(a, "inter-node link to node 'd@test' failed", "TLS handshake")
                and _in_log(a, "refused: TLS handshake", "does not speak TLS")
                and _in_log(d, "refused: it speaks TLS")
                and _in_log(d, "inter-node link to node 'a@test' failed", "cluster TLS on")
            )
        )
        _alive(a, d)
    finally:
        d.broker.stop()


def _start(etcd: EtcdServer, prefix: str, name: str, env: dict[str, str]) -> Node:
    return nodes.start_node(etcd, prefix, name, env=env)


def _stop(*started: Node) -> None:
    for node in started:
        if node.broker.process is not None and node.broker.process.poll() is None:
            node.broker.stop()


def test_a_node_whose_certificate_is_revoked_is_not_linked(
    etcd_server: EtcdServer, ca: trustme.CA, tmp_path: Path
) -> None:
    prefix = f"/leveret-test/linkcrl-{uuid.uuid4().hex[:8]}/"
    # c's certificate is the cluster CA's, and the CA's CRL that a and b read lists it.
    c_env = _tls_env(tmp_path, "c@test", ca, ca)
    crlfile = tmp_path / "cluster.crl"
    crlfile.write_bytes(revocation_list(ca, (tmp_path / "c@test.crt").read_bytes()))
    revoking = {"LEVERET_CLUSTER_TLS_CRLFILE": str(crlfile)}
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test"):
            env = {**_tls_env(tmp_path, name, ca, ca), **revoking}
            started.append(_start(etcd_server, prefix, name, env))
        a, b = started
        c = _start(etcd_server, prefix, "c@test", c_env)
        started.append(c)
        conn = connect(c)
        conn.channel().queue_declare("q.revoked", durable=True)
        conn.close()
        nodes.eventually(lambda: _refused_as_down(a, "q.revoked", "c@test"))
        # Refused both ways, the reason in a's log; c's says a refused its certificate.
        nodes.eventually(
            lambda: (
                _in_log(a, "link to node 'c@test' failed: TLS handshake", "certificate revoked")
                and _in_log(a, "link from 127.0.0.1:", "refused: TLS handshake", "revoked by")
                and _in_log(c, "link to node 'a@test' failed", "certificate refused there?")
            )
        )
        assert not _in_log(a, "inter-node link to node 'c@test' is up")
        assert _refused_as_down(b, "q.revoked", "c@test")
        # a and b, not revoked, link each other both ways.
        declare_on(b, "q.b", a)
        declare_on(a, "q.a", b)
        publish_confirmed(a, "q.b", [b"to b"])
        publish_confirmed(b, "q.a", [b"to a"])
        assert consume(a, "q.b", 1) == [b"to b"]
        assert consume(b, "q.a", 1) == [b"to a"]
        _alive(a, b, c)
    finally:
        _stop(*started)


def test_a_crl_reloaded_closes_the_links_up_with_a_node_it_now_revokes(
    etcd_server: EtcdServer, ca: trustme.CA, tmp_path: Path
) -> None:
    prefix = f"/leveret-test/linkcrlreload-{uuid.uuid4().hex[:8]}/"
    # a and b read the CA's CRL, which first revokes nobody; c's certificate is the CA's.
    crlfile = tmp_path / "cluster.crl"
    crlfile.write_bytes(revocation_list(ca))
    revoking = {"LEVERET_CLUSTER_TLS_CRLFILE": str(crlfile)}
    started: list[Node] = []
    try:
        for name in ("a@test", "b@test"):
            env = {**_tls_env(tmp_path, name, ca, ca), **revoking}
            started.append(_start(etcd_server, prefix, name, env))
        a, b = started
        c = _start(etcd_server, prefix, "c@test", _tls_env(tmp_path, "c@test", ca, ca))
        started.append(c)
        declare_on(c, "q.c", a, b)
        declare_on(a, "q.a", b, c)
        publish_confirmed(a, "q.c", [b"a to c"])
        publish_confirmed(c, "q.a", [b"c to a"])
        nodes.eventually(
            lambda: all(
                _in_log(x, f"inter-node link from node '{y.name}' is up")
                for x, y in ((a, c), (c, a), (b, c), (c, b))
            )
        )
        # The CA revokes c: a new CRL over the file, read again by ctl on a, SIGHUP on b.
        crlfile.write_bytes(revocation_list(ca, (tmp_path / "c@test.crt").read_bytes()))
        assert "cluster_links_closed: [c@test]" in ok(a.data_dir, "reload_tls")
        assert b.broker.process is not None
        b.broker.process.send_signal(signal.SIGHUP)
        closed = "closed: its certificate is revoked by the cluster_tls_crlfile reloaded"
        nodes.eventually(
            lambda: all(
                _in_log(x, f"inter-node link {way} node 'c@test' {closed}")
                for x in (a, b)
                for way in ("to", "from")
            )
        )
        # c's queue answers on a and b as a down node's, and a's on c; the redials meet the
        # new CRL and are refused both ways, so it stays so.
        for node, queue, leader in ((a, "q.c", "c@test"), (b, "q.c", "c@test")):
            nodes.eventually(functools.partial(_refused_as_down, node, queue, leader))
        nodes.eventually(lambda: _refused_as_down(c, "q.a", "a@test"))
        nodes.eventually(
            lambda: (
                _in_log(a, "link to node 'c@test' failed: TLS handshake", "certificate revoked")
                and _in_log(a, "link from 127.0.0.1:", "refused: TLS handshake", "revoked by")
            )
        )
        assert _refused_as_down(a, "q.c", "c@test")
        assert _refused_as_down(c, "q.a", "a@test")
        # a and b, not revoked, are still linked.
        assert not _in_log(a, "inter-node link to node 'b@test' is down")
        publish_confirmed(b, "q.a", [b"b to a"])
        assert consume(b, "q.a", 2) == [b"c to a", b"b to a"]
        _alive(a, b, c)
    finally:
        _stop(*started)


def test_with_the_name_check_the_dialled_host_must_be_named(
    etcd_server: EtcdServer, ca: trustme.CA, tmp_path: Path
) -> None:
    prefix = f"/leveret-test/linknames-{uuid.uuid4().hex[:8]}/"
    check = {"LEVERET_CLUSTER_TLS_SERVER_NAME_CHECK": "true"}
    started: list[Node] = []
    try:
        # e's certificate names localhost only; its record says 127.0.0.1.
        e_env = {**_tls_env(tmp_path, "e@test", ca, ca, ("localhost",)), **check}
        e = _start(etcd_server, prefix, "e@test", e_env)
        started.append(e)
        match = _TLS_PORT.search(e.broker.log_text())
        assert match is not None
        # a and b are named by their address (a SAN IP entry); b dials e at localhost.
        a_env = {**_tls_env(tmp_path, "a@test", ca, ca, ("127.0.0.1",)), **check}
        started.append(_start(etcd_server, prefix, "a@test", a_env))
        b_env = {
            **_tls_env(tmp_path, "b@test", ca, ca, ("127.0.0.1",)),
            **check,
            "LEVERET_CLUSTER_PEER_ADDRESSES": f"e@test=localhost:{match.group(1)}",
        }
        started.append(_start(etcd_server, prefix, "b@test", b_env))
        a, b = started[1:]
        declare_on(b, "q.named", a)
        publish_confirmed(a, "q.named", [b"named"])
        assert consume(a, "q.named", 1) == [b"named"]
        assert _in_log(a, "inter-node link to node 'b@test' is up")
        # e, dialled at 127.0.0.1 by a, is refused there; dialled at localhost by b, linked.
        declare_on(e, "q.elsewhere", b)
        nodes.eventually(lambda: _refused_as_down(a, "q.elsewhere", "e@test"))
        nodes.eventually(
            lambda: _in_log(
                a, "link to node 'e@test' failed: TLS handshake", "does not name the host dialled"
            )
        )
        publish_confirmed(b, "q.elsewhere", [b"via localhost"])
        assert consume(b, "q.elsewhere", 1) == [b"via localhost"]
        assert not _in_log(a, "inter-node link to node 'e@test' is up")
        _alive(a, b, e)
    finally:
        _stop(*started)


def test_a_crl_that_cannot_be_used_stops_the_node_at_start(
    etcd_server: EtcdServer, ca: trustme.CA, tmp_path: Path
) -> None:
    crlfile = tmp_path / "broken.crl"
    crlfile.write_text("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n")
    env = {
        **_tls_env(tmp_path, "x@test", ca, ca),
        "LEVERET_CLUSTER_TLS_CRLFILE": str(crlfile),
        "LEVERET_ETCD_PREFIX": f"/leveret-test/linkbadcrl-{uuid.uuid4().hex[:8]}/",
    }
    ports = ("--port", "--stream-port", "--management-port", "--prometheus-port", "--cluster-port")
    command = [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1"]
    command += [arg for flag in ports for arg in (flag, "0")]
    command += ["--etcd", etcd_server.url, "--node-name", "x@test"]
    command += ["--data-dir", str(tmp_path / "x")]
    result = subprocess.run(
        command,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert f"leveret: cluster_tls_crlfile cannot be used: {crlfile} is not a valid CRL" in (
        result.stderr
    )
