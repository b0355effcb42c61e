"""FIND_NODE lookups on the wire: the Twisted glue around the overlay's
sans-I/O lookup (flud/overlay/lookup.py), shared by the node and the client.

`drive(lookup, ask)` runs any object with the Lookup interface
(next_queries / answered / failed / done): it sends at most alpha queries at
once through `ask(contact) -> Deferred[list of contacts]` and fires with the
lookup when it is done. `RecordChecker` turns the records a FIND_NODE
answer carries into contacts: only records whose signature checks and that
are alive, each signature checked once (a bounded cache), so a lookup never
takes hearsay and a node repeating the same records costs no CPU twice.
The contact type is the caller's (this room does not import the overlay).
"""
from collections import OrderedDict

from twisted.internet import defer

from flud.protocol.node_record import RecordRefused, check_record

# Seconds one FIND_NODE may take (dial included) before its node counts as
# failed for this lookup: a stopped node must not hold a lookup up.
QUERY_TIMEOUT = 5.0
CHECKED_CACHE = 4096


class RecordChecker:
    """check(records, now) -> the records that passed, refusals counted by code."""

    def __init__(self, size: int = CHECKED_CACHE):
        self.size = size
        self._checked = OrderedDict()   # (id, sequence, signature) -> True
        self.refused = {}

    def passed(self, record, now: float) -> bool:
        key = (record.node_id, record.sequence, record.signature)
        if key in self._checked:
            self._checked.move_to_end(key)
            if record.expires + 300 >= now:
                return True
        try:
            check_record(record, now)
            if not record.tcp_addresses():
                raise RecordRefused("RECORD_NO_ADDRESS", "record has no direct address")
        except RecordRefused as refusal:
            self.refused[refusal.code] = self.refused.get(refusal.code, 0) + 1
            return False
        self._checked[key] = True
        if len(self._checked) > self.size:
            self._checked.popitem(last=False)
        return True

    def check(self, records, now: float) -> list:
        best = {}
        for record in records:
            held = best.get(record.node_id)
            if held is not None and held.sequence >= record.sequence:
                continue
            if self.passed(record, now):
                best[record.node_id] = record
        return list(best.values())


def drive(lookup, ask) -> defer.Deferred:
    """Run `lookup` to its end; fires with it (never fails: a query that
    fails counts its node as failed)."""
    result = defer.Deferred()
    in_flight = [0]

    def pump():
        if result.called:
            return
        if not lookup.done:
            batch = lookup.next_queries()
            in_flight[0] += len(batch)    # all of it first: an answer may come at once
            for contact in batch:
                d = defer.maybeDeferred(ask, contact)
                d.addCallbacks(answered, failed, callbackArgs=(contact,), errbackArgs=(contact,))
        if not result.called and (lookup.done or not in_flight[0]):
            result.callback(lookup)

    def answered(contacts, contact):
        in_flight[0] -= 1
        if not result.called:
            lookup.answered(contact.node_id, contacts)
        pump()

    def failed(failure, contact):
        in_flight[0] -= 1
        if not result.called:
            lookup.failed(contact.node_id)
        pump()

    pump()
    return result
