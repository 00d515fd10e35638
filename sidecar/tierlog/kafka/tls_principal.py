"""The principal of a TLS client certificate, named as Kafka names it.

On an ``SSL`` listener Kafka's default principal builder takes the client certificate's
subject as Java renders it (``X500Principal.getName()``, RFC 2253) and, under the default
``ssl.principal.mapping.rules`` (``DEFAULT``), keeps it whole: ``User:CN=billing,O=Example``.
A connection without a verified certificate (``ssl.client.auth=none``, or ``requested``
and none given) is ``User:ANONYMOUS``. Users' ACLs and quotas are written against those
strings, so ours must be the same bytes: RDNs last-first, joined by ``,`` (the values of a
multi-valued RDN by ``+``, in their encoded order); the attributes RFC 2253 names (CN, C,
L, ST, O, OU, STREET, DC, UID) by keyword with their string escaped, every other attribute
by its dotted OID and ``#`` with its DER encoding in hex (an e-mail address included).

The subject is read from the certificate's DER (Python's ``getpeercert()`` dict has lost
each value's ASN.1 type, which that hex encoding needs): a certificate's TBSCertificate
is a SEQUENCE of an optional [0] version, the serial, the signature algorithm, the
issuer, the validity and the subject.
"""

from __future__ import annotations

import ssl

__all__ = ["subject_principal", "tls_principal"]

# The keywords Java's RFC 2253 rendering uses, by OID.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.1": "UID",
    "0.9.2342.19200300.100.1.25": "DC",
}
# The string types whose value Java writes as text: UTF8String, PrintableString,
# TeletexString, IA5String, GeneralString, BMPString. Java decodes each one's bytes as
# UTF-8 (a BMPString's UTF-16 included), and so do we.
_STRING_TAGS = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID, _VERSION = 0x30, 0x31, 0x06, 0xA0


def tls_principal(connection: ssl.SSLObject | None) -> str | None:
    """The principal name of the connection's verified client certificate (None: no
    TLS, or no certificate)."""
    if connection is None:
        return None
    certificate = connection.getpeercert(binary_form=True)
    return None if not certificate else subject_principal(certificate)


def subject_principal(certificate_der: bytes) -> str:
    """The certificate's subject as ``X500Principal.getName()`` renders it; ValueError
    for bytes that are not a certificate."""
    _tag, certificate, _end = _element(certificate_der, 0)
    _tag, tbs, _end = _element(certificate, 0)
    fields = list(_elements(tbs))
    if fields and fields[0][0] == _VERSION:
        fields = fields[1:]
    if len(fields) < 5:
        raise ValueError("a certificate without a subject")
    tag, subject = fields[4]  # serial, signature, issuer, validity, subject
    if tag != _SEQUENCE:
        raise ValueError("the certificate has no subject name")
    rdns = [_rdn(rdn) for tag, rdn in _elements(subject) if tag == _SET]
    return ",".join(reversed(rdns))


def _rdn(rdn: bytes) -> str:
    return "+".join(_attribute(attribute) for _tag, attribute in _elements(rdn))


def _attribute(attribute: bytes) -> str:
    oid_tag, oid, value_start = _element(attribute, 0)
    if oid_tag != _OID:
        raise ValueError("an attribute without its type")
    value_tag, value, value_end = _element(attribute, value_start)
    dotted = _dotted(oid)
    keyword = _KEYWORDS.get(dotted)
    if keyword is None or value_tag not in _STRING_TAGS:
        return f"{keyword or dotted}=#{attribute[value_start:value_end].hex()}"
    return f"{keyword}={_escaped(value.decode('utf-8', 'replace'))}"


def _escaped(text: str) -> str:
    """RFC 2253's escapes as Java writes them: the special characters anywhere, NUL as
    ``\\00``, and spaces (or CRs) leading or trailing."""
    escaped = [
        "\\00" if char == "\0" else f"\\{char}" if char in _ESCAPED else char for char in text
    ]
    lead = next((i for i, char in enumerate(text) if char not in " \r"), len(text))
    trail = next((i for i in range(len(text) - 1, -1, -1) if text[i] not in " \r"), -1)
    return "".join(f"\\{part}" if i < lead or i > trail else part for i, part in enumerate(escaped))


def _dotted(oid: bytes) -> str:
    if not oid:
        raise ValueError("an empty object identifier")
    arcs: list[int] = []
    value = 0
    for byte in oid:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(arc) for arc in [*head, *arcs[1:]])


def _elements(data: bytes) -> list[tuple[int, bytes]]:
    """The (tag, content) of each DER element in ``data``, one after another."""
    found = []
    offset = 0
    while offset < len(data):
        tag, content, offset = _element(data, offset)
        found.append((tag, content))
    return found


def _element(data: bytes, offset: int) -> tuple[int, bytes, int]:
    """The DER element at ``offset``: its tag, its content, and where the next begins."""
    if offset + 2 > len(data):
        raise ValueError("a truncated DER element")
    tag, length = data[offset], data[offset + 1]
    start = offset + 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(data[start : start + size], "big")
        start += size
    end = start + length
    if end > len(data):
        raise ValueError("a DER element longer than its container")
    return tag, data[start:end], end
