"""Links: both keys sign, anything else is refused with a stable code."""
import pytest

from flud.keys import Identity
from flud.trust.link import (LinkRecord, LinkRefused, check_link, decode_link, read_link,
                             sign_link)

OWNER = Identity.generate()
NODE = Identity.generate()
OTHER = Identity.generate()


def refused(raw) -> str:
    with pytest.raises(LinkRefused) as err:
        read_link(raw)
    return err.value.code


def test_a_link_signed_by_both_round_trips():
    link = read_link(sign_link(OWNER, NODE, 1_700_000_000).encode())
    assert (link.owner_id, link.node_id, link.created) == (OWNER.node_id, NODE.node_id, 1_700_000_000)


def test_half_signed_links_are_refused():
    good = sign_link(OWNER, NODE, 5)
    for half in (LinkRecord(good.owner_public, good.node_public, 5, good.owner_signature, b""),
                 LinkRecord(good.owner_public, good.node_public, 5, b"", good.node_signature)):
        assert refused(half.encode()) == "LINK_HALF_SIGNED"


def test_forged_links_are_refused():
    good = sign_link(OWNER, NODE, 5)
    # a signature by another key in the owner's place; a node claiming an owner it is not
    by_other = LinkRecord(good.owner_public, good.node_public, 5,
                          OTHER.sign(good.body()), good.node_signature)
    assert refused(by_other.encode()) == "LINK_FORGED"
    stolen = LinkRecord(good.owner_public, OTHER.public_der, 5, good.owner_signature,
                        OTHER.sign(LinkRecord(good.owner_public, OTHER.public_der, 5).body()))
    assert refused(stolen.encode()) == "LINK_FORGED"
    later = LinkRecord(good.owner_public, good.node_public, 6, good.owner_signature,
                       good.node_signature)
    assert refused(later.encode()) == "LINK_FORGED"


@pytest.mark.parametrize("mangle", [
    lambda raw: raw[:-1], lambda raw: raw + b"x", lambda raw: b"\x02" + raw[1:], lambda raw: b"",
    lambda raw: raw[:1] + b"\xff\xff" + raw[3:], lambda raw: bytes(5000)])
def test_malformed_links_are_refused(mangle):
    raw = sign_link(OWNER, NODE, 5).encode()
    assert refused(mangle(raw)) in ("LINK_MALFORMED", "LINK_FORGED")


def test_a_link_naming_one_key_twice_is_refused():
    assert refused(sign_link(OWNER, OWNER, 5).encode()) == "LINK_MALFORMED"


def test_decode_does_not_check_signatures_but_check_does():
    raw = sign_link(OWNER, NODE, 5).encode()
    assert check_link(decode_link(raw)).node_id == NODE.node_id
