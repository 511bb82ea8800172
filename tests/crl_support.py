"""Certificate revocation lists for the tests: a trustme CA's CRL, made with
``cryptography`` (which trustme brings) as a CA's operator would with ``openssl ca
-gencrl``."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

if TYPE_CHECKING:
    import trustme
    from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes


def revocation_list(
    ca: trustme.CA, *revoked: bytes, valid_for: datetime.timedelta | None = None
) -> bytes:
    """``ca``'s CRL (PEM) listing the certificates ``revoked`` (PEM); it expired a minute ago
    when ``valid_for`` is negative."""
    now = datetime.datetime.now(datetime.UTC)
    until = now + (valid_for if valid_for is not None else datetime.timedelta(days=1))
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key: CertificateIssuerPrivateKeyTypes = serialization.load_pem_private_key(  # type: ignore[assignment]
        ca.private_key_pem.bytes(), None
    )
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(min(now, until) - datetime.timedelta(minutes=1))
        .next_update(until)
    )
    for cert in revoked:
        serial = x509.load_pem_x509_certificate(cert).serial_number
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(now).build()
        )
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
