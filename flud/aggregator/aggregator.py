"""Small files -> bundles -> coded shares -> one open tar per destination.

Synchronous and I/O free: the client feeds ciphertexts in, drains sealed tars
and bundle records out, and reports each tar's STORE outcome with confirm()
or replace(). The coder, the hash, the placement and the clock are injected;
the clock must be monotonic (time.monotonic), since open tars are kept in
opening order and only the oldest is checked for age.

Life of a tar:  open (members appended) -> sealed (in the take_sealed()
queue) -> taken (the caller is sending it) -> confirmed | replaced.
Its bytes count towards pending_bytes until confirmed or replaced, because
replace() needs them to re-send its shares to spares.

Memory: the caller can follow every buffer (pending_tars(), bundle_bytes)
and bound what an add() may add before making it (add_cost()), so a memory
budget can be reserved before the bytes exist.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Hashable

from flud.aggregator.bundle import (KEY_LENGTH, MIN_BLOCK_LENGTH, Encode, Hash,
                               OpenBundle, code_bundle)
from flud.aggregator.placement import BundlePlacement, checked_destinations
from flud.aggregator.policy import FlushPolicy
from flud.aggregator.records import (BundleRecord, DrainRequired,
                                PlacementExhausted, SealedTar, ShareMove,
                                ShareRef, TarMember)
from flud.aggregator.tarball import BLOCK_SIZE, END_OF_ARCHIVE, TarWriter

Place = Callable[[bytes, int], list[str]]
Clock = Callable[[], float]

# GF(2^8) erasure codes (zfec among them) cannot make more shares than this.
MAX_SHARES = 256
DEFAULT_SPARES = 2
# Under memory pressure, open tars are sealed (largest first) until they hold
# at most this fraction of max_pending_bytes: once the caller has confirmed
# what was sealed, the aggregator is back under its bound with room to work.
PRESSURE_OPEN_TAR_FRACTION = 0.5
# What a member can add to a tar beyond its data: its header block and the
# zero padding up to a whole block.
MEMBER_OVERHEAD = 2 * BLOCK_SIZE


def _member_size(length: int) -> int:
    """Tar bytes of a member: its header block and its data in whole blocks."""
    return BLOCK_SIZE + -(-length // BLOCK_SIZE) * BLOCK_SIZE


@dataclass
class _OpenTar:
    node: str
    opened_at: float
    serial: int
    writer: TarWriter = field(default_factory=TarWriter)
    members: list[TarMember] = field(default_factory=list)
    bundle_serials: list[int] = field(default_factory=list)  # per member
    # Identical shares (from identical bundles) are stored once per tar.
    offsets: dict[bytes, tuple[int, int]] = field(default_factory=dict)


@dataclass
class _Unconfirmed:
    tar: SealedTar
    bundle_serials: list[int]  # per member, to find each member's placement


class Aggregator:
    def __init__(self, policy: FlushPolicy, k: int, n: int, encode: Encode,
                 hash: Hash, place: Place, clock: Clock,
                 spares: int = DEFAULT_SPARES, min_distinct: int | None = None) -> None:
        """min_distinct: the fewest distinct nodes a bundle's n shares may
        go to when fewer than n live nodes are left (a node then takes more
        than one share of it: reduced redundancy). None: n (never)."""
        if not 1 <= k <= n <= MAX_SHARES:
            raise ValueError(f"need 1 <= k <= n <= {MAX_SHARES}, "
                             f"got k={k}, n={n}")
        if spares < 0:
            raise ValueError(f"spares must be >= 0, got {spares}")
        self.policy = policy
        self.k, self.n, self.spares = k, n, spares
        self.min_distinct = n if min_distinct is None else min_distinct
        if not 1 <= self.min_distinct <= n:
            raise ValueError(f"min_distinct must be in 1..n, got {min_distinct}")
        self._encode, self._hash = encode, hash
        self._place, self._clock = place, clock
        self._bundle = OpenBundle()
        self._bundle_serial = 0
        self._tar_serial = 0
        # Ordered by opening time: the first open tar is the oldest.
        self._open: OrderedDict[str, _OpenTar] = OrderedDict()
        self._open_tar_bytes = 0
        self._sealed: list[SealedTar] = []
        self._unconfirmed: dict[int, _Unconfirmed] = {}
        self._unconfirmed_bytes = 0
        self._records: list[tuple[int, BundleRecord]] = []
        self._placements: dict[int, BundlePlacement] = {}
        self._failed_nodes: set[str] = set()
        self._stats = dict(files=0, bundles=0, tars_sealed=0, bytes_in=0,
                           bytes_out=0, members=0, shares_moved=0)

    # -- feeding ---------------------------------------------------------

    def add(self, file_id: Hashable, ciphertext: bytes) -> None:
        """Append one encrypted small file to the open bundle.

        A bundle never grows past bundle_target (it is sealed first, unless
        it is empty): bundles, and so their shares and their coding, stay
        within a known size."""
        if self.must_drain():
            raise DrainRequired(self.pending_bytes,
                                self.policy.max_pending_bytes)
        if self._overflows_bundle(len(ciphertext)):
            self._seal_bundle()
        self._bundle.append(file_id, ciphertext)
        self._stats["files"] += 1
        self._stats["bytes_in"] += len(ciphertext)
        if self.policy.bundle_full(self._bundle.size):
            self._seal_bundle()
        self.poll()
        if self.must_drain():
            self._seal_largest_open_tars()

    def poll(self) -> None:
        """Seal every open tar that has waited max_age (call it on a timer
        too: add() polls, but a quiet client may not add for a while)."""
        now = self._clock()
        while self._open:
            oldest = next(iter(self._open.values()))
            if not self.policy.tar_expired(oldest.opened_at, now):
                break
            self._seal_tar(oldest.node)

    def flush(self) -> None:
        """End of run: seal the open bundle, then every open tar."""
        self.seal_bundle()
        for node in list(self._open):
            self._seal_tar(node)

    def seal_bundle(self) -> bool:
        """Seal the open bundle now, however small; False if it is empty.
        Its shares go into the open tars, which stay open."""
        if not self._bundle.file_count:
            return False
        self._seal_bundle()
        return True

    # -- draining --------------------------------------------------------

    def take_sealed(self) -> list[SealedTar]:
        """Sealed tars, in sealing order; each is pending until confirmed."""
        sealed, self._sealed = self._sealed, []
        return sealed

    def take_bundles(self) -> list[BundleRecord]:
        """Records of sealed bundles, in sealing order. replace() updates a
        record in place only until it is taken; afterwards apply its moves."""
        records, self._records = self._records, []
        for serial, _ in records:
            placement = self._placements.get(serial)
            if placement is not None:
                placement.record = None
        return [record for _, record in records]

    def confirm(self, sealed_tar: SealedTar) -> None:
        """The node stored `sealed_tar`: forget its bytes."""
        entry = self._pop_unconfirmed(sealed_tar)
        for serial in entry.bundle_serials:
            self._release(serial)

    def replace(self, failed: SealedTar) -> list[ShareMove]:
        """The STORE of `failed` did not succeed: send each of its shares to
        a spare of its bundle, or the next node place() ranks, or (with
        min_distinct < n) a live holder of it. Nothing changes if a bundle
        has nowhere left to go (PlacementExhausted). The failed node is never chosen again as
        a spare in this run; place() should skip it too.
        """
        entry = self._find_unconfirmed(failed)
        failed_nodes = self._failed_nodes | {failed.node}
        # Plan every move first, on copies, so an exhausted bundle leaves
        # the aggregator untouched.
        planned_holders: dict[int, list[str]] = {}
        plan = []
        for member, serial in zip(entry.tar.members, entry.bundle_serials):
            placement = self._placements[serial]
            holders = planned_holders.setdefault(serial,
                                                 list(placement.holders))
            node = self._new_holder(placement, holders, failed_nodes,
                                    failed.node)
            holders[member.share_index] = node
            plan.append((member, serial, node))
        self._failed_nodes = failed_nodes
        self._pop_unconfirmed(failed)
        moves = []
        for member, serial, node in plan:
            self._placements[serial].move(member.share_index,
                                          member.member_key, node)
            start = member.data_offset
            share = entry.tar.data[start:start + member.length]
            self._append_member(node, member.member_key, share, serial,
                                member.bundle_id, member.share_index)
            self._release(serial)  # after the append keeps the placement
            moves.append(ShareMove(member.bundle_id, member.share_index,
                                   member.member_key, failed.node, node))
        self._stats["shares_moved"] += len(moves)
        if self.must_drain():
            # The moved shares now sit in open tars: seal some, or a caller
            # with nothing left in flight would find nothing to drain.
            self._seal_largest_open_tars()
        return moves

    def _new_holder(self, placement: BundlePlacement, holders: list[str],
                    failed_nodes: set[str], failed_node: str) -> str:
        """Where a share of `placement` goes instead of `failed_node`: a
        spare; once those are used, the next node place() ranks (two spares
        a bundle run out when several nodes fail at once, while others are
        up); with no other live node, the live holder with the fewest of
        its shares, as long as min_distinct nodes hold the bundle."""
        try:
            return placement.choose_spare(holders, failed_nodes, failed_node)
        except PlacementExhausted:
            pass
        ranked = self._place(placement.bundle_id, MAX_SHARES)
        fresh = [node for node in ranked if node not in holders
                 and node not in failed_nodes and node not in placement.spares]
        if fresh:
            placement.spares.extend(fresh)
            return fresh[0]
        live = [node for node in holders if node not in failed_nodes]
        if len(set(live)) < self.min_distinct:
            raise PlacementExhausted(placement.bundle_id, failed_node)
        return min(live, key=live.count)

    # -- accounting ------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        """Open bundle + open tars + sealed tars not yet confirmed/replaced."""
        return (self._bundle.size + self._open_tar_bytes
                + self._unconfirmed_bytes)

    def must_drain(self) -> bool:
        """True: take_sealed(), then confirm()/replace() before add()."""
        return self.policy.over_pending(self.pending_bytes)

    @property
    def bundle_bytes(self) -> int:
        """Bytes of the open bundle."""
        return self._bundle.size

    def pending_tars(self) -> dict[int, tuple[str, int, bool]]:
        """{serial: (node, bytes, sealed)} of every tar open or not yet
        confirmed/replaced: with bundle_bytes, all of pending_bytes. A tar
        keeps its serial from opening to confirmation."""
        tars = {tar.serial: (node, tar.writer.size, False)
                for node, tar in self._open.items()}
        for serial, entry in self._unconfirmed.items():
            tars[serial] = (entry.tar.node, len(entry.tar.data), True)
        return tars

    def add_cost(self, nbytes: int) -> int:
        """The most pending_bytes can grow by in add() of `nbytes`.

        Sealing the bundle turns its bytes into n shares of ceil(size / k)
        (each padded to whole blocks with a header); every open tar may be
        sealed on the way (age, size, pressure), which adds its end blocks."""
        growth, new_tars, size = 0, 0, self._bundle.size
        if self._overflows_bundle(nbytes):
            growth += self._coded_size(size) - size
            new_tars += self.n
            size = 0
        size += nbytes
        growth += nbytes
        if self.policy.bundle_full(size):
            growth += self._coded_size(size) - size
            new_tars += self.n
        # Every tar that may be sealed on the way gets its end blocks: the
        # open ones, and those the new shares open (a tar that one would take
        # past tar_target is sealed first, so a share can open a second one).
        return growth + len(END_OF_ARCHIVE) * (len(self._open) + 2 * new_tars)

    def _overflows_bundle(self, nbytes: int) -> bool:
        return (self._bundle.file_count > 0
                and self._bundle.size + nbytes > self.policy.bundle_target)

    def _coded_size(self, bundle_size: int) -> int:
        """Most tar bytes the n shares of a bundle this size can take."""
        block_length = max(MIN_BLOCK_LENGTH, -(-bundle_size // self.k))
        return self.n * (block_length + MEMBER_OVERHEAD)

    def seal_open_tars(self, keep_bytes: int = 0) -> int:
        """Seal open tars, largest first, until they hold at most keep_bytes
        (0: all of them); returns how many were sealed. For a caller that
        needs memory back sooner than age or size would seal them."""
        sealed = 0
        while self._open and self._open_tar_bytes > keep_bytes:
            largest = max(self._open.values(), key=lambda t: t.writer.size)
            self._seal_tar(largest.node)
            sealed += 1
        return sealed

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    # -- internals -------------------------------------------------------

    def _seal_bundle(self) -> None:
        data, files = self._bundle.take()
        coded = code_bundle(data, self.k, self.n, self._encode, self._hash)
        nodes = checked_destinations(
            self._place(coded.bundle_id, self.n + self.spares),
            coded.bundle_id, self.n + self.spares, least=self.min_distinct)
        if len(nodes) < self.n:
            # Fewer live nodes than shares: each takes its turn (the fewest
            # shares a node, the most nodes a bundle), and no spare is left.
            nodes = [nodes[i % len(nodes)] for i in range(self.n)]
        holders, spares = nodes[:self.n], nodes[self.n:]
        record = BundleRecord(
            bundle_id=coded.bundle_id, length=coded.length, k=self.k,
            n=self.n, block_length=coded.block_length,
            shares=[ShareRef(i, key, node)
                    for i, (key, node) in enumerate(zip(coded.keys, holders))],
            files=files, spares=list(spares))
        serial = self._bundle_serial
        self._bundle_serial += 1
        self._placements[serial] = BundlePlacement(
            coded.bundle_id, list(holders), list(spares), record)
        self._records.append((serial, record))
        self._stats["bundles"] += 1
        for index, node in enumerate(holders):
            self._append_member(node, coded.keys[index], coded.shares[index],
                                serial, coded.bundle_id, index)

    def _append_member(self, node: str, key: bytes, share: bytes,
                       serial: int, bundle_id: bytes, index: int) -> None:
        tar = self._open.get(node)
        if (tar is not None and key not in tar.offsets and tar.writer.size
                and tar.writer.size + _member_size(len(share))
                + len(END_OF_ARCHIVE) > self.policy.tar_target):
            # A tar never grows past tar_target: it is sealed first.
            self._seal_tar(node)
            tar = None
        if tar is None:
            tar = self._open[node] = _OpenTar(node, self._clock(),
                                              self._tar_serial)
            self._tar_serial += 1
        size_before = tar.writer.size
        located = tar.offsets.get(key)
        if located is None:
            located = tar.offsets[key] = tar.writer.add(key.hex(), share)
        offset, length = located
        tar.members.append(TarMember(key, bundle_id, index, offset, length))
        tar.bundle_serials.append(serial)
        self._open_tar_bytes += tar.writer.size - size_before
        self._placements[serial].live_members += 1
        self._stats["members"] += 1
        if self.policy.tar_full(tar.writer.size + len(END_OF_ARCHIVE)):
            self._seal_tar(node)

    def _seal_tar(self, node: str) -> None:
        tar = self._open.pop(node)
        self._open_tar_bytes -= tar.writer.size
        data = tar.writer.seal()
        key = self._hash(data)
        if len(key) != KEY_LENGTH:
            raise ValueError(f"hash() returned {len(key)} bytes, "
                             f"expected {KEY_LENGTH}")
        sealed = SealedTar(node, data, bytes(key), tar.members, tar.serial)
        self._sealed.append(sealed)
        self._unconfirmed[sealed.serial] = _Unconfirmed(sealed,
                                                        tar.bundle_serials)
        self._unconfirmed_bytes += len(data)
        self._stats["tars_sealed"] += 1
        self._stats["bytes_out"] += len(data)

    def _seal_largest_open_tars(self) -> None:
        # Sealing converts open bytes into bytes the caller can send and
        # confirm; the smaller tars keep filling, so fewer tiny STOREs.
        self.seal_open_tars(int(self.policy.max_pending_bytes
                                * PRESSURE_OPEN_TAR_FRACTION))

    def _find_unconfirmed(self, sealed_tar: SealedTar) -> _Unconfirmed:
        entry = self._unconfirmed.get(sealed_tar.serial)
        if entry is None or entry.tar.key != sealed_tar.key:
            raise ValueError(f"tar #{sealed_tar.serial} for "
                             f"{sealed_tar.node!r} is not awaiting "
                             f"confirmation (unknown, or already confirmed "
                             f"or replaced)")
        return entry

    def _pop_unconfirmed(self, sealed_tar: SealedTar) -> _Unconfirmed:
        entry = self._find_unconfirmed(sealed_tar)
        del self._unconfirmed[sealed_tar.serial]
        self._unconfirmed_bytes -= len(entry.tar.data)
        return entry

    def _release(self, serial: int) -> None:
        """One member of bundle `serial` is stored or gone for good."""
        placement = self._placements[serial]
        placement.live_members -= 1
        if placement.live_members == 0:
            del self._placements[serial]
