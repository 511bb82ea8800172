"""``cluster/revocation.py``: the certificates a CRL file revokes, as OpenSSL's
CRL_CHECK_LEAF matches a peer (issuer name and serial number), of the CRLs a CA of the
CA file signed; bad input is a ``CrlError``, never another exception."""

from __future__ import annotations

import base64
import datetime
import ssl
import subprocess
from typing import TYPE_CHECKING

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from hypothesis import given
from hypothesis import strategies as st

from leveret.cluster.revocation import CrlError, Revocations, issuer_and_serial, read_crls
from tests.crl_support import revocation_list

if TYPE_CHECKING:
    from pathlib import Path


def _read(pem: bytes, *cas: trustme.CA) -> Revocations:
    revoked, unsigned = read_crls(pem, b"".join(ca.cert_pem.bytes() for ca in cas))
    assert unsigned == 0
    return revoked


def _forged(signer: trustme.CA, named: trustme.CA, *revoked: bytes) -> bytes:
    """A CRL naming ``named`` as its issuer, signed by ``signer``'s key."""
    now = datetime.datetime.now(datetime.UTC)
    key = serialization.load_pem_private_key(signer.private_key_pem.bytes(), None)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(x509.load_pem_x509_certificate(named.cert_pem.bytes()).subject)
        .last_update(now - datetime.timedelta(minutes=1))
        .next_update(now + datetime.timedelta(days=1))
    )
    for cert in revoked:
        serial = x509.load_pem_x509_certificate(cert).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    signed = builder.sign(key, hashes.SHA256())  # type: ignore[arg-type]
    return signed.public_bytes(serialization.Encoding.PEM)


def _der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def test_a_crl_revokes_the_certificates_it_lists_of_its_own_ca() -> None:
    ca, other = trustme.CA(), trustme.CA()
    revoked, kept = ca.issue_cert("revoked"), ca.issue_cert("kept")
    foreign = other.issue_cert("foreign")
    crls = _read(revocation_list(ca, revoked.cert_chain_pems[0].bytes()), ca)
    assert issuer_and_serial(_der(revoked)) in crls
    assert issuer_and_serial(_der(kept)) not in crls
    # The same serial number from another CA is another certificate.
    issuer, serial = issuer_and_serial(_der(foreign))
    assert (issuer, serial) not in crls
    assert (issuer_and_serial(_der(revoked))[0], serial) not in crls
    assert _read(revocation_list(ca), ca) == frozenset()


def test_a_file_of_several_crls_revokes_what_each_lists() -> None:
    one, two = trustme.CA(), trustme.CA()
    a, b = one.issue_cert("a"), two.issue_cert("b")
    pem = revocation_list(one, a.cert_chain_pems[0].bytes()) + revocation_list(
        two, b.cert_chain_pems[0].bytes()
    )
    crls = _read(pem, one, two)
    assert {issuer_and_serial(_der(a)), issuer_and_serial(_der(b))} == crls


def test_a_crl_no_ca_of_the_file_signed_revokes_nothing() -> None:
    """Named after a CA of the file but signed by another key (a forged CRL), or of a CA
    not in the file: passed over, and counted."""
    ca, impostor = trustme.CA(), trustme.CA()
    leaf = ca.issue_cert("leaf").cert_chain_pems[0].bytes()
    forged = _forged(impostor, ca, leaf)
    revoked, unsigned = read_crls(forged + revocation_list(impostor, leaf), ca.cert_pem.bytes())
    assert (revoked, unsigned) == (frozenset(), 2)


def test_a_crl_made_by_openssl_ca(tmp_path: Path) -> None:
    """What ``openssl ca -gencrl`` writes (a v2 CRL with extensions, after a revoke)."""
    ca = trustme.CA()
    leaf = ca.issue_cert("leaf")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (tmp_path / "ca.key").write_bytes(ca.private_key_pem.bytes())
    (tmp_path / "leaf.pem").write_bytes(leaf.cert_chain_pems[0].bytes())
    (tmp_path / "index.txt").write_text("")
    (tmp_path / "crlnumber").write_text("1000\n")
    (tmp_path / "ca.cnf").write_text(
        "[ca]\ndefault_ca = cluster\n[cluster]\n"
        f"database = {tmp_path}/index.txt\ncrlnumber = {tmp_path}/crlnumber\n"
        f"certificate = {tmp_path}/ca.pem\nprivate_key = {tmp_path}/ca.key\n"
        "default_md = sha256\ndefault_crl_days = 1\n"
    )
    config = ["-config", str(tmp_path / "ca.cnf")]
    subprocess.run(
        ["openssl", "ca", *config, "-revoke", str(tmp_path / "leaf.pem")],
        check=True,
        capture_output=True,
    )
    made = subprocess.run(
        ["openssl", "ca", *config, "-gencrl"], check=True, capture_output=True
    ).stdout
    assert _read(made, ca) == {issuer_and_serial(_der(leaf))}


@pytest.mark.parametrize(
    "pem",
    [
        b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
        b"-----BEGIN X509 CRL-----\n!!!!\n-----END X509 CRL-----\n",
        b"-----BEGIN X509 CRL-----\nMAA=\n-----END X509 CRL-----\n",  # an empty SEQUENCE
    ],
)
def test_a_crl_that_cannot_be_read_is_a_crl_error(pem: bytes) -> None:
    with pytest.raises(CrlError):
        _read(pem, trustme.CA())


_CA = trustme.CA()
_LEAF = _CA.issue_cert("leaf")
_CRL_DER = base64.b64decode(
    b"".join(revocation_list(_CA, _LEAF.cert_chain_pems[0].bytes()).splitlines()[1:-1])
)


def _pem(der: bytes) -> bytes:
    return b"-----BEGIN X509 CRL-----\n" + base64.b64encode(der) + b"\n-----END X509 CRL-----\n"


def test_a_certificate_whose_serial_is_not_positive_is_read_as_it_is() -> None:
    """RFC 5280 forbids it and cryptography warns that a later release will refuse it; the
    lookup reads it without the warning (under the tests' warnings-as-errors, hypothesis
    found the warning escaping as an exception)."""
    der = _der(_LEAF)
    # The serial's first byte (after the certificate's, the body's and the version's heads
    # and the INTEGER's tag and length) with its top bit set: a negative number.
    assert der[13:15] == b"\x02\x14"
    negative = der[:15] + bytes([0x80]) + der[16:]
    issuer, serial = issuer_and_serial(negative)
    assert serial < 0
    assert issuer == issuer_and_serial(der)[0]


@given(st.binary(max_size=300) | st.sampled_from([_CRL_DER, _der(_LEAF)]), st.data())
def test_any_bytes_read_or_raise_crl_error(der: bytes, data: st.DataObject) -> None:
    """A real CRL or certificate cut short or with a byte changed, or any bytes."""
    if der and data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(der) - 1))
        if data.draw(st.booleans()):
            der = der[:at]
        else:
            der = der[:at] + bytes([data.draw(st.integers(0, 255))]) + der[at + 1 :]
    for read in (issuer_and_serial, lambda d: read_crls(_pem(d), _CA.cert_pem.bytes())):
        try:
            read(der)
        except CrlError:
            pass
