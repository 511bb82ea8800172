"""Which certificates a ``cluster_tls_crlfile`` revokes, read without OpenSSL: the link
(``cluster/link_tls.py``) checks the peers of the links already up against a CRL reloaded,
which OpenSSL only consults in a handshake.

A certificate is revoked when a CRL of the file has its issuer (the same DER name) and lists
its serial number, as OpenSSL's ``CRL_CHECK_LEAF`` looks it up. The file is the one the new
contexts loaded (OpenSSL parsed it and checks each CRL's signature and dates in every
handshake); here only its DER structure is read (RFC 5280 5.1: ``tbsCertList``'s issuer and
``revokedCertificates``; 4.1: ``tbsCertificate``'s serial number and issuer). Only
``cluster/link_tls.py`` imports it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

__all__ = ["CrlError", "Revocations", "issuer_and_serial", "read_crls"]

_SEQUENCE: Final = 0x30
_INTEGER: Final = 0x02
_UTC_TIME: Final = 0x17
_GENERALIZED_TIME: Final = 0x18
_VERSION_TAG: Final = 0xA0  # [0] EXPLICIT: a certificate's version
_PEM_CRL: Final = re.compile(rb"-----BEGIN X509 CRL-----(.*?)-----END X509 CRL-----", re.DOTALL)

# (issuer's DER name, serial number) of each certificate revoked.
Revocations = frozenset[tuple[bytes, int]]


class CrlError(ValueError):
    """A CRL or certificate whose DER structure is not what RFC 5280 describes."""


def _element(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The DER element at ``pos``: its tag, where its content starts and where it ends."""
    if pos + 2 > end:
        raise CrlError("truncated element")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise CrlError("multi-byte tag")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise CrlError("bad length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > end:
        raise CrlError("element longer than what holds it")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """The elements between ``start`` and ``end``: (tag, element start, content start, end)."""
    out = []
    pos = start
    while pos < end:
        tag, content, stop = _element(data, pos, end)
        out.append((tag, pos, content, stop))
        pos = stop
    return out


def _inside(data: bytes) -> list[tuple[int, int, int, int]]:
    """The elements of the ``to-be-signed`` part of a signed structure (a certificate, a
    CRL: SEQUENCE { tbs SEQUENCE, algorithm, signature })."""
    tag, content, end = _element(data, 0, len(data))
    if tag != _SEQUENCE:
        raise CrlError("not a SEQUENCE")
    tbs_tag, tbs_content, tbs_end = _element(data, content, end)
    if tbs_tag != _SEQUENCE:
        raise CrlError("no to-be-signed SEQUENCE")
    return _children(data, tbs_content, tbs_end)


def _integer(data: bytes, content: int, end: int) -> int:
    return int.from_bytes(data[content:end], "big", signed=True)


def issuer_and_serial(der: bytes) -> tuple[bytes, int]:
    """A certificate's issuer (its DER name) and serial number."""
    fields = _inside(der)
    if fields and fields[0][0] == _VERSION_TAG:
        fields = fields[1:]
    if len(fields) < 3 or fields[0][0] != _INTEGER or fields[2][0] != _SEQUENCE:
        raise CrlError("not a certificate")
    _, _, content, end = fields[0]
    _, start, _, stop = fields[2]
    return der[start:stop], _integer(der, content, end)


def _crl(der: bytes) -> set[tuple[bytes, int]]:
    fields = _inside(der)
    if fields and fields[0][0] == _INTEGER:  # version (v2)
        fields = fields[1:]
    # signature algorithm, issuer, thisUpdate, [nextUpdate], [revokedCertificates], [ext]
    if len(fields) < 3 or fields[0][0] != _SEQUENCE or fields[1][0] != _SEQUENCE:
        raise CrlError("not a CRL")
    _, start, _, stop = fields[1]
    issuer = der[start:stop]
    rest = fields[3:]
    if rest and rest[0][0] in (_UTC_TIME, _GENERALIZED_TIME):
        rest = rest[1:]
    revoked: set[tuple[bytes, int]] = set()
    if rest and rest[0][0] == _SEQUENCE:
        _, _, content, end = rest[0]
        for tag, _, entry, entry_end in _children(der, content, end):
            serial = _children(der, entry, entry_end)
            if tag != _SEQUENCE or not serial or serial[0][0] != _INTEGER:
                raise CrlError("bad revoked certificate entry")
            revoked.add((issuer, _integer(der, serial[0][2], serial[0][3])))
    return revoked


def read_crls(pem: bytes) -> Revocations:
    """The certificates the PEM CRLs of ``pem`` revoke."""
    revoked: set[tuple[bytes, int]] = set()
    for match in _PEM_CRL.finditer(pem):
        try:
            der = base64.b64decode(b"".join(match.group(1).split()), validate=True)
        except binascii.Error:
            raise CrlError("bad base64") from None
        revoked |= _crl(der)
    return frozenset(revoked)
