"""Reading back what flud.keys writes: the SubjectPublicKeyInfo of an X.509
certificate, for the tests that check a certificate carries its identity's
key (a node learns a peer's identity from HELLO, never from X.509)."""
from flud.keys import BadKeyFile

_SEQUENCE, _CONTEXT_CONSTRUCTED = 0x30, 0xA0


def _der_elements(der: bytes, start: int, end: int) -> list:
    """(tag, start, content start, end) of each element in der[start:end],
    which must be whole elements in strict DER: low tag numbers, definite
    lengths in their shortest form. ValueError otherwise."""
    elements = []
    while start < end:
        if end - start < 2:
            raise ValueError("truncated element")
        tag, length = der[start], der[start + 1]
        if tag & 0x1F == 0x1F:
            raise ValueError("high tag number")
        content = start + 2
        if length & 0x80:
            size = length & 0x7F
            if not 1 <= size <= 4 or content + size > end:
                raise ValueError("bad length")
            length = int.from_bytes(der[content:content + size], "big")
            if length < 0x80 or der[content] == 0:
                raise ValueError("length not in its shortest form")
            content += size
        if content + length > end:
            raise ValueError("element longer than what holds it")
        elements.append((tag, start, content, content + length))
        start = content + length
    return elements


def _der_sequence(der: bytes, element: tuple) -> list:
    tag, _start, content, end = element
    if tag != _SEQUENCE:
        raise ValueError(f"expected a SEQUENCE, found tag {tag:#04x}")
    return _der_elements(der, content, end)


def public_der_of_cert(cert_der: bytes) -> bytes:
    """The SubjectPublicKeyInfo DER of an X.509 certificate, exactly as encoded in it.

    A peer's node ID is node_id_of() of this. Raises BadKeyFile on anything
    that is not a certificate.
    """
    try:
        cert_der = bytes(cert_der)
        (certificate,) = _der_elements(cert_der, 0, len(cert_der))
        tbs = _der_sequence(cert_der, _der_sequence(cert_der, certificate)[0])
        # version [0] EXPLICIT is optional; without it, SPKI moves up one place.
        spki = tbs[6 if tbs[0][0] == _CONTEXT_CONSTRUCTED else 5]
        _der_sequence(cert_der, spki)
    except (ValueError, IndexError, TypeError) as exc:
        raise BadKeyFile(f"not an X.509 certificate: {exc}") from None
    return cert_der[spki[1]:spki[3]]
