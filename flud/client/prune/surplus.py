"""Surplus copies: shares that a page of the holder map once named on a node
that the object's newest row no longer names (a repair re-created the share
elsewhere while the node was away, and then it came back), and that no row
still in use names (the newest map rows and this home's index). Nothing
reads them, and the owner's lease keeps them on the volunteer's disk for
as long as the owner renews it: prune deletes them, one share on one node
each, by prune_state's rules like any other garbage.

The map's older rows are what finds them, and merging the pages (prune's
own map rewrite, or any writer's) drops those rows. So a copy found once
is kept in prune's state (marked, then pending) and comes back from there
on every run until its DELETE is confirmed, however long its node is away;
a copy named again meanwhile (a repair put the share back there) leaves
the state instead.
"""
import logging

from twisted.internet import defer

from flud.client.repository.holder_map import MapPage
from flud.client.repository.prune_books import SURPLUS, is_surplus, place_of, surplus_id

log = logging.getLogger("flud.client")

__all__ = ("SURPLUS", "is_surplus", "place_of", "surplus_id", "superseded",
           "surplus_objects")


def _rows(page: MapPage):
    for _, bundle in page.bundles:
        yield from bundle.holders
    for _, holders in page.extents:
        yield from holders


@defer.inlineCallbacks
def superseded(repo, named):
    """{(share key, node)} that a page of the map names and `named` does
    not (each page is read again: the repository keeps only the newest row
    of each object). A page that cannot be read now is left out: what it
    alone names is found on a later run."""
    found = set()
    for ref, _ in repo.index.pages:
        try:
            page = MapPage.decode((yield repo.open_ref(ref)))
        except Exception as err:   # a page unreadable now: fewer surplus copies, never more
            log.warning("prune: map page %s not read for surplus copies: %s",
                        ref.blob_id[:16], err)
            continue
        found.update(place for place in ((h.key, h.node) for h in _rows(page))
                     if place not in named)
    return found


def surplus_objects(rows, named, state):
    """({surplus id: (SURPLUS, id's name, [(key, node)])}, {ids named again}).

    rows: {(key, node)} the map's pages name (superseded()); named: what is
    still in use (reach.named_shares); state: the PruneState, whose marked
    and pending surplus ids are found again here whatever the map says now.
    A copy deleted already (a tombstone) is not found again from old pages
    the map still lists."""
    remembered = {oid for oid in (*state.marks, *state.pending) if is_surplus(oid)}
    found, named_again = {}, set()
    for key, node in rows:
        oid = surplus_id(key, node)
        if (key, node) not in named and oid not in state.deleted:
            found[oid] = (SURPLUS, oid[len(SURPLUS) + 1:], [(key, node)])
    for oid in remembered:
        key, node = place_of(oid)
        if (key, node) in named:
            named_again.add(oid)
        else:
            found[oid] = (SURPLUS, oid[len(SURPLUS) + 1:], [(key, node)])
    return found, named_again
