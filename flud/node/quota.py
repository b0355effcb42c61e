"""Give to get on a node: admit or refuse each STORE by its owner's credit,
learn links, and earn credit for owners by claims (docs/quotas.md).

The arithmetic is flud/trust/ledger.py, links flud/trust/link.py, claims
flud/trust/claims.py (all pure); the rows flud/node/ledger_store.py. Here:
the reactor, the pool and the store.

A tick every `interval` seconds:
1. reads this node's own links (files `flud link` wrote in its home) and
   pushes them (LINK) to peers not told yet, a few per tick;
2. for an owner it holds data for whose linked nodes are known, places
   one claim on one of them if its claims fall short of what the ledger
   wants (at most one claim in flight: a claim is held in memory while
   it is sent);
3. spot checks the claims due, a few per tick; a claim counts towards
   its owner's credit only while its last check passed, and one failing
   MAX_FAILURES checks in a row is dropped.
"""
import logging
import os
import random

from twisted.internet import defer

from flud.keys import NODE_ID_LENGTH
from flud.node.ledger_store import LEDGER_FILENAME, Claim, LedgerStore
from flud.protocol import messages
from flud.protocol.client import PeerClient
from flud.protocol.codec import Op
from flud.protocol.errors import ErrorCode, RemoteError
from flud.trust import claims as claimlib
from flud.trust import ledger
from flud.trust.link import LinkRefused, read_link

log = logging.getLogger("flud.quota")

LINKS_DIRNAME = "links"           # NODE_HOME/links/<owner hex>.link (`flud link`)
LINK_SUFFIX = ".link"
PUSHES_PER_TICK = 16
CHECKS_PER_TICK = 16
CHECK_PERIODS = 6                 # a claim is checked every CHECK_PERIODS ticks
MAX_FAILURES = 3
HELD_REFRESH = 30.0               # seconds a cached held(owner) is trusted
MAX_OWN_LINKS = 64
STATS_OWNERS = 32


def own_links_dir(home: str) -> str:
    return os.path.join(home, LINKS_DIRNAME)


class QuotaKeeper:
    def __init__(self, terms: ledger.QuotaTerms, home: str, store, identity, clock,
                 run_blocking, interval: float, rng: random.Random | None = None,
                 durable: bool = True):
        self.terms = terms
        self.home = home
        self.store = store
        self.node_id = identity.node_id
        self.secret = claimlib.claim_secret(identity.private_d())
        self.clock = clock
        self.run_blocking = run_blocking
        self.interval = interval
        self.rng = rng or random.Random()
        self.db = LedgerStore(os.path.join(home, LEDGER_FILENAME), durable)
        self.membership = None     # set by the service once it exists
        self.pool = None
        self._held = {}            # owner -> [bytes, fetched_at]
        self._given = self.db.given()
        self._told = set()         # peers told our links since we started
        self._own_links = []
        self._own_owners = set()   # owners linked to this node: its operator, never refused
        self._placing = False
        self._resting = {}         # holder -> until when no claim is offered to it (it refused)
        self._call = None
        self.counters = {"refused": 0, "links_learned": 0, "links_refused": 0,
                         "claims_placed": 0, "claims_failed_to_place": 0,
                         "checks_passed": 0, "checks_failed": 0, "claims_dropped": 0, "claims_released": 0,
                         "links_pushed": 0}

    # ---- STORE -------------------------------------------------------------

    def admit(self, conn, size: int) -> None:
        """Raise RemoteError(QUOTA) if conn's owner may not store `size` more."""
        owner = conn.peer_id
        if self.terms.unlimited and self.terms.explicit(owner) is None:
            return
        if owner in self._own_owners and self.terms.explicit(owner) is None:
            return              # the node's own operator: it gives this whole node
        held = self.held(owner)
        if self._is_node(conn) and self.terms.explicit(owner) is None:
            if not ledger.admit_claim(self.terms, held, size):
                self.counters["refused"] += 1
                raise RemoteError(ErrorCode.QUOTA, (
                    f"this node keeps at most {self.terms.claim_allowance} bytes of "
                    f"claims for another node; it holds {held} for you and this store is {size}"))
        else:
            refusal = ledger.admit(self.terms, owner, held, self._given.get(owner, 0), size)
            if refusal is not None:
                self.counters["refused"] += 1
                log.info("STORE of %d refused for %s: %s", size, owner.hex()[:12], refusal.message())
                raise RemoteError(ErrorCode.QUOTA, refusal.message())

    def admitted(self, owner: bytes, size: int) -> None:
        """An upload admit() let through has opened: count it at once, so
        uploads in flight add up (the next refresh reads the store again,
        which forgets the ones that never finished)."""
        entry = self._held.get(owner)
        if entry is not None:
            entry[0] += size

    def _is_node(self, conn) -> bool:
        """A peer that said it is a node and that membership knows by its
        signed record: it may store claims (within the claim allowance)."""
        hello = conn.peer_hello
        return (hello is not None and hello.role == messages.ROLE_NODE
                and self.membership is not None and conn.peer_id in self.membership.peers)

    def held(self, owner: bytes) -> int:
        now = self.clock.seconds()
        entry = self._held.get(owner)
        if entry is None or now - entry[1] > HELD_REFRESH:
            entry = self._held[owner] = [self.store.owner_bytes(owner), now]
        return entry[0]

    # ---- LINK --------------------------------------------------------------

    def learn_link(self, raw: bytes) -> bool:
        """Check a link record and keep it; RemoteError(BAD_LINK) if it is
        malformed, half signed or forged."""
        try:
            link = read_link(raw)
        except LinkRefused as err:
            self.counters["links_refused"] += 1
            raise RemoteError(ErrorCode.BAD_LINK, str(err)) from None
        new = self.db.add_link(link.owner_id, link.node_id, bytes(raw), self.clock.seconds())
        if new:
            self.counters["links_learned"] += 1
            log.info("learned: owner %s runs node %s", link.owner_id.hex()[:12], link.node_id.hex()[:12])
        return new

    def load_own_links(self) -> int:
        """Read the links `flud link` left in this node's home: a link
        naming another node, or a bad one, is logged and skipped."""
        directory = own_links_dir(self.home)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(LINK_SUFFIX))
        except FileNotFoundError:
            return 0
        links, owners = [], set()
        for name in names[:MAX_OWN_LINKS]:
            try:
                with open(os.path.join(directory, name), "rb") as f:
                    raw = f.read(4096)
                link = read_link(raw)
            except (OSError, LinkRefused) as err:
                log.warning("link file %s skipped: %s", name, err)
                continue
            if link.node_id != self.node_id:
                log.warning("link file %s names node %s, not this one; skipped", name,
                            link.node_id.hex()[:12])
                continue
            if self.db.add_link(link.owner_id, link.node_id, raw, self.clock.seconds()):
                self._told.clear()          # a new link: tell everyone again
            links.append(raw)
            owners.add(link.owner_id)
        self._own_links, self._own_owners = links, owners
        return len(links)

    # ---- the tick ----------------------------------------------------------

    def start(self) -> None:
        self.load_own_links()
        self._call = self.clock.callLater(self.rng.uniform(0, self.interval), self._tick)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.db.close()

    def _tick(self) -> None:
        d = defer.maybeDeferred(self.tick)
        d.addErrback(lambda f: log.warning("ledger round failed: %s", f.getTraceback()))
        d.addBoth(self._again)

    def _again(self, _):
        if self._call is not None:
            self._call = self.clock.callLater(self.interval, self._tick)

    @defer.inlineCallbacks
    def tick(self):
        self.load_own_links()
        yield self.push_links()
        if not self.terms.unlimited:
            self.place_claims()
            yield self.check_claims()

    # ---- pushing our links -------------------------------------------------

    def push_links(self):
        if not self._own_links or self.membership is None:
            return defer.succeed(None)
        waiting = []
        for peer in [p for p in self.membership.alive() if p.node_id not in self._told][:PUSHES_PER_TICK]:
            self._told.add(peer.node_id)
            d = self.pool.get(peer.node_id, peer.host, peer.port)
            d.addCallback(self._send_links, list(self._own_links))
            d.addErrback(self._not_told, peer.node_id)
            waiting.append(d)
        return defer.DeferredList(waiting)

    @defer.inlineCallbacks
    def _send_links(self, conn, links):
        for raw in links:
            yield conn.request(Op.LINK, messages.LinkBody(raw))
            self.counters["links_pushed"] += 1

    def _not_told(self, failure, node_id):
        self._told.discard(node_id)       # try again next round
        log.debug("links not pushed to %s: %s", node_id.hex()[:12], failure.getErrorMessage())

    # ---- claims ------------------------------------------------------------

    def owners_short(self) -> list[tuple[bytes, int]]:
        """(owner, size of the next claim) for owners whose claims fall
        short; an owner with claims to spare has its newest released."""
        short = []
        for owner in self.db.linked_owners():
            if owner == self.node_id or len(owner) != NODE_ID_LENGTH:
                continue
            wanted = ledger.claims_wanted(self.terms, owner, self.held(owner))
            placed = self.db.placed(owner)
            if ledger.claims_surplus(wanted, placed):
                self.release_claim(self.db.newest_claim(owner))
                continue
            size = ledger.next_claim_size(wanted, placed)
            if size:
                short.append((owner, size))
        return short

    def release_claim(self, claim: Claim) -> None:
        """Forget a claim and ask its holder to delete it (best effort: a
        holder that does not hear it keeps it until this node's lease on it
        ends)."""
        self.db.drop_claim(claim.key)
        self._given = self.db.given()
        self.counters["claims_released"] += 1
        peer = self.membership.peers.get(claim.holder) if self.membership else None
        if peer is None:
            return
        d = self.pool.get(claim.holder, peer.host, peer.port)
        d.addCallback(lambda conn: PeerClient(conn).delete(claim.key))
        d.addErrback(lambda f: log.debug("claim release on %s: %s", claim.holder.hex()[:12],
                                         f.getErrorMessage()))

    def place_claims(self) -> None:
        if self._placing or self.membership is None:
            return
        for owner, size in self.owners_short():
            now = self.clock.seconds()
            holders = [n for n in self.db.linked_nodes(owner)
                       if n != self.node_id and n in self.membership.peers
                       and self._resting.get(n, 0.0) <= now]
            if not holders:
                continue
            holder = min(holders, key=lambda n: (self.db.placed_on(n), n))
            self._placing = True
            d = self.place_claim(owner, holder, size)
            d.addBoth(self._placed)
            return

    def _placed(self, result):
        self._placing = False
        return result

    @defer.inlineCallbacks
    def place_claim(self, owner: bytes, holder: bytes, size: int):
        claim_id = claimlib.new_claim_id(self.rng)
        peer = self.membership.peers[holder]
        try:
            data, key = yield self.run_blocking(claimlib.claim_content, self.secret, claim_id, size)
            conn = yield self.pool.get(holder, peer.host, peer.port)
            yield PeerClient(conn).store(key, data)
            del data
        except Exception as err:
            self.counters["claims_failed_to_place"] += 1
            # full, refusing or away: not offered another claim for a while
            self._resting[holder] = self.clock.seconds() + CHECK_PERIODS * self.interval
            log.info("a claim of %d bytes on %s (for owner %s) failed: %s", size,
                     holder.hex()[:12], owner.hex()[:12], err)
            return
        claim = Claim(key, claim_id, holder, owner, size, self.clock.seconds(), 0.0, False, 0)
        self.db.add_claim(claim)
        self.counters["claims_placed"] += 1
        yield self.check_claim(claim)     # counts once this node saw it held

    def check_claims(self):
        now = self.clock.seconds()
        due = self.db.claims_due(now - CHECK_PERIODS * self.interval, CHECKS_PER_TICK)
        return defer.DeferredList([self.check_claim(c) for c in due])

    @defer.inlineCallbacks
    def check_claim(self, claim: Claim):
        """One spot check, by this node, of a claim it placed."""
        check = claimlib.spot_check(self.secret, claim.claim_id, claim.size, self.rng)
        ok = False
        peer = self.membership.peers.get(claim.holder) if self.membership else None
        if peer is not None:
            try:
                conn = yield self.pool.get(claim.holder, peer.host, peer.port)
                digest = yield PeerClient(conn).verify(claim.key, check.nonce, check.offset,
                                                       check.length)
                ok = digest == check.expected
            except Exception as err:
                log.info("claim check on %s failed: %s", claim.holder.hex()[:12], err)
        self.db.checked(claim.key, ok, self.clock.seconds())
        self.counters["checks_passed" if ok else "checks_failed"] += 1
        if not ok and claim.failures + 1 >= MAX_FAILURES:
            self.db.drop_claim(claim.key)
            self.counters["claims_dropped"] += 1
        self._given = self.db.given()
        return ok

    # ---- STATS -------------------------------------------------------------

    def stats(self) -> dict:
        return {"grant": self.terms.grant, "ratio": self.terms.ratio,
                "owner_quotas": len(self.terms.owner_quotas),
                "links": self.db.link_count(), "own_links": len(self._own_links),
                # the owners credited most (STATS stays small on a big network)
                "given": {o.hex(): n for o, n in sorted(self._given.items(),
                                                        key=lambda item: -item[1])[:STATS_OWNERS]},
                **self.db.claim_totals(), **self.counters}
