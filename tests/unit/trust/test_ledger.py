"""The give-to-get arithmetic: credit, refusals that name the numbers, and
how many claims a node wants."""
from flud.trust import ledger
from flud.trust.ledger import QuotaTerms

O = b"\x01" * 32
FRIEND = b"\x02" * 32
MIB = 1024 * 1024


def test_no_grant_means_no_quota():
    terms = QuotaTerms(grant=None)
    assert ledger.admit(terms, O, 10 ** 15, 0, 10 ** 12) is None
    assert ledger.claims_wanted(terms, O, 10 ** 12) == 0


def test_credit_is_grant_plus_ratio_times_given():
    terms = QuotaTerms(grant=MIB, ratio=0.5)
    assert ledger.credit(terms, O, 4 * MIB) == 3 * MIB
    assert ledger.admit(terms, O, 2 * MIB, 4 * MIB, MIB) is None
    refusal = ledger.admit(terms, O, 2 * MIB, 4 * MIB, MIB + 1)
    assert (refusal.held, refusal.size, refusal.credit, refusal.grant, refusal.given) == (
        2 * MIB, MIB + 1, 3 * MIB, MIB, 4 * MIB)
    text = refusal.message()
    for number in (2 * MIB, MIB + 1, 3 * MIB, MIB, 4 * MIB):
        assert str(number) in text
    assert "ratio 0.5" in text


def test_an_explicit_quota_overrides_the_formula_both_ways():
    terms = QuotaTerms(grant=MIB, owner_quotas={FRIEND: 100 * MIB})
    assert ledger.admit(terms, FRIEND, 50 * MIB, 0, 50 * MIB) is None
    refusal = ledger.admit(terms, FRIEND, 50 * MIB, 10 ** 12, 50 * MIB + 1)
    assert refusal.explicit and "quota its operator set" in refusal.message()
    assert ledger.claims_wanted(terms, FRIEND, 50 * MIB) == 0
    # ... and on a node with no quota for anyone else
    open_node = QuotaTerms(grant=None, owner_quotas={FRIEND: MIB})
    assert ledger.admit(open_node, FRIEND, MIB, 0, 1) is not None
    assert ledger.admit(open_node, O, 10 ** 12, 0, 1) is None


def test_claims_keep_credit_a_headroom_above_what_is_held():
    terms = QuotaTerms(grant=4 * MIB, ratio=2.0)
    assert ledger.claims_wanted(terms, O, 0) == 0          # nothing held: nothing asked
    wanted = ledger.claims_wanted(terms, O, 10 * MIB)
    assert wanted == 5 * MIB                               # (10 + 4 - 4) / 2
    assert ledger.credit(terms, O, wanted) == 14 * MIB     # held + one grant
    small = QuotaTerms(grant=1024)
    assert ledger.claims_wanted(small, O, 1) == 1 + ledger.MIN_HEADROOM - 1024


def test_next_claim_size_is_bounded_and_rounded():
    assert ledger.next_claim_size(100, 100) == 0
    assert ledger.next_claim_size(1, 0) == ledger.MIN_CLAIM
    assert ledger.next_claim_size(ledger.MIN_CLAIM + 1, 0) == 2 * ledger.MIN_CLAIM
    assert ledger.next_claim_size(10 ** 12, 0) == ledger.MAX_CLAIM


def test_claim_allowance_for_other_nodes():
    terms = QuotaTerms(grant=MIB, claim_allowance=8 * MIB)
    assert ledger.admit_claim(terms, 7 * MIB, MIB)
    assert not ledger.admit_claim(terms, 7 * MIB, MIB + 1)


def test_surplus_claims_are_released_down_to_one_spare_or_all_when_none_are_wanted():
    assert not ledger.claims_surplus(10 * MIB, 10 * MIB + ledger.MAX_CLAIM)
    assert ledger.claims_surplus(10 * MIB, 10 * MIB + ledger.MAX_CLAIM + 1)
    assert ledger.claims_surplus(0, 1) and not ledger.claims_surplus(0, 0)
