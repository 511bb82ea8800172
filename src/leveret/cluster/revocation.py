"""Which certificates a ``cluster_tls_crlfile`` revokes: the link (``cluster/link_tls.py``)
checks the peers of the links already up against a CRL reloaded, which OpenSSL only
consults in a handshake.

Read with ``cryptography`` (its X.509 parser, not one of ours): a CRL counts only when one
of the ``cluster_tls_cacertfile`` CAs, named as its issuer, signed it (as OpenSSL requires
in a handshake), and a certificate is revoked when such a CRL of its issuer (names compared
as ``cryptography`` compares them, attribute by attribute) lists its serial number, as
OpenSSL's ``CRL_CHECK_LEAF`` looks a peer up. Only ``cluster/link_tls.py`` imports it.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, cast

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.utils import CryptographyDeprecationWarning

if TYPE_CHECKING:
    from collections.abc import Iterator

    from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes

__all__ = ["CrlError", "Revocations", "issuer_and_serial", "read_crls"]

_PEM_CRL: Final = re.compile(rb"-----BEGIN X509 CRL-----.*?-----END X509 CRL-----", re.DOTALL)

# (issuer, serial number) of each certificate revoked.
Revocations = frozenset[tuple[x509.Name, int]]


class CrlError(ValueError):
    """A CRL, CA or certificate that cannot be read as X.509."""


# What cryptography raises for bytes it cannot read as X.509 (a version it does not know
# is not a ValueError).
_UNREADABLE: Final = (ValueError, x509.InvalidVersion, UnsupportedAlgorithm)


@contextmanager
def _serials_as_they_are() -> Iterator[None]:
    # A serial number that is not positive (RFC 5280 forbids it; OpenSSL reads it) is
    # looked up as it is: cryptography's warning that a later release will refuse it (then
    # a ValueError, read as unreadable here) is not the operator's to act on at every
    # lookup, and a test's warnings-as-errors must not make it an exception.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        yield


def issuer_and_serial(der: bytes) -> tuple[x509.Name, int]:
    """A certificate's issuer and serial number."""
    try:
        with _serials_as_they_are():
            cert = x509.load_der_x509_certificate(der)
            return cert.issuer, cert.serial_number
    except _UNREADABLE as exc:
        raise CrlError(f"not a certificate: {exc}") from None


def _signed_by_a_ca(crl: x509.CertificateRevocationList, cas: list[x509.Certificate]) -> bool:
    for ca in cas:
        if ca.subject != crl.issuer:
            continue
        try:
            # A key no CA signs with (X25519, ...) fails the check below: TypeError.
            key = cast("CertificateIssuerPublicKeyTypes", ca.public_key())
            if crl.is_signature_valid(key):
                return True
        except (TypeError, ValueError, UnsupportedAlgorithm):
            continue
    return False


def read_crls(pem: bytes, cas_pem: bytes) -> tuple[Revocations, int]:
    """The certificates the PEM CRLs of ``pem`` revoke, of those CRLs signed by a CA of
    ``cas_pem`` (PEM certificates), and how many CRLs were passed over as not so signed."""
    try:
        cas = x509.load_pem_x509_certificates(cas_pem)
    except _UNREADABLE as exc:
        raise CrlError(f"the CA file: {exc}") from None
    revoked: set[tuple[x509.Name, int]] = set()
    unsigned = 0
    for match in _PEM_CRL.finditer(pem):
        try:
            with _serials_as_they_are():
                crl = x509.load_pem_x509_crl(match.group(0))
                if not _signed_by_a_ca(crl, cas):
                    unsigned += 1
                    continue
                revoked.update((crl.issuer, entry.serial_number) for entry in crl)
        except _UNREADABLE as exc:
            raise CrlError(f"not a CRL: {exc}") from None
    return frozenset(revoked), unsigned
