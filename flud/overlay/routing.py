"""A Kademlia routing table, sans I/O (in the spirit of the libp2p kad-dht
spec: k = 20 contacts a bucket, lookups alpha = 3 wide).

Contacts are kept by XOR distance from this node's id, one bucket per
shared-prefix length. A bucket keeps its oldest live contacts (nodes that
have stayed up long tend to stay up, and an attacker cannot flush them by
sending new ids): a newcomer to a full bucket is held as a replacement
candidate while the caller pings the bucket's least recently seen contact,
and takes its place only if that ping fails.

Only contacts the caller verified go in: a record whose signature checked
and a node that answered (the table never takes hearsay). A diversity cap
keeps one subnet from filling a bucket or the table (an attacker's many ids
on one network); a loopback or single-host network turns it off.
"""
from __future__ import annotations

import functools
import heapq
import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field

K = 20
ALPHA = 3
ID_BITS = 256
# At most this many contacts from one subnet in a bucket, and in the table.
SUBNET_PER_BUCKET = 2
SUBNET_PER_TABLE = 10


@functools.lru_cache(maxsize=4096)   # asked for every record of every lookup answer
def subnet_of(host: str) -> str:
    """The subnet the diversity cap counts a host in: its /24 (IPv4) or /48
    (IPv6); "" (no cap) for a name or for an address that is not global
    (loopback, private, the 198.18.0.0/15 lab range): one host or one LAN
    running many nodes is a testnet or a lab, not an attacker's network."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return ""
    if not address.is_global:
        return ""
    prefix = 24 if address.version == 4 else 48
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


@dataclass
class Contact:
    node_id: bytes
    subnet: str = ""          # "" when the diversity cap does not apply
    record: object = None     # the node's signed record (opaque here)
    last_seen: float = 0.0
    number: int = 0           # the id as an integer, for distances (set on creation)

    def __post_init__(self):
        self.number = int.from_bytes(self.node_id, "big")


@dataclass
class Offered:
    """What offer() did: "added", "updated", "refused" (diversity cap), or
    "full": the bucket is full and `ping` should be pinged; call
    ping_result(ping.node_id, answered) with what happened."""
    outcome: str
    ping: Contact | None = None


@dataclass
class RoutingTable:
    self_id: bytes
    k: int = K
    diversity: bool = True
    buckets: dict = field(default_factory=dict)       # index -> OrderedDict(id -> Contact)
    waiting: dict = field(default_factory=dict)       # index -> replacement Contact
    subnets: dict = field(default_factory=dict)       # subnet -> count in the table
    bucket_subnets: dict = field(default_factory=dict)  # (index, subnet) -> count
    self_number: int = 0

    def __post_init__(self):
        self.self_number = int.from_bytes(self.self_id, "big")

    def _index(self, number: int) -> int:
        return ID_BITS - (self.self_number ^ number).bit_length()

    def __len__(self) -> int:
        return sum(len(b) for b in self.buckets.values())

    def contacts(self):
        for bucket in self.buckets.values():
            yield from bucket.values()

    def get(self, node_id: bytes):
        bucket = self.buckets.get(self._index(int.from_bytes(node_id, "big")))
        return bucket.get(node_id) if bucket else None

    def has_room(self, node_id: bytes, subnet: str = "") -> bool:
        """Could a new contact with this id and subnet go in without
        displacing anyone? (Worth a reachability probe only then.)"""
        if node_id == self.self_id:
            return False
        index = self._index(int.from_bytes(node_id, "big"))
        bucket = self.buckets.get(index, {})
        if node_id in bucket:
            return True
        if len(bucket) >= self.k:
            return False
        if self.diversity and subnet:
            in_bucket = self.bucket_subnets.get((index, subnet), 0)
            return in_bucket < SUBNET_PER_BUCKET and self.subnets.get(subnet, 0) < SUBNET_PER_TABLE
        return True

    def offer(self, contact: Contact, now: float) -> Offered:
        if contact.node_id == self.self_id:
            return Offered("refused")
        index = self._index(contact.number)
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = OrderedDict()
        held = bucket.get(contact.node_id)
        if held is not None:
            held.last_seen = now
            if contact.record is not None:
                held.record = contact.record
            bucket.move_to_end(contact.node_id)
            return Offered("updated")
        if self.diversity and contact.subnet:
            in_bucket = self.bucket_subnets.get((index, contact.subnet), 0)
            if (in_bucket >= SUBNET_PER_BUCKET
                    or self.subnets.get(contact.subnet, 0) >= SUBNET_PER_TABLE):
                return Offered("refused")
        contact.last_seen = now
        if len(bucket) < self.k:
            self._put(bucket, contact)
            return Offered("added")
        self.waiting[index] = contact
        return Offered("full", next(iter(bucket.values())))

    def ping_result(self, node_id: bytes, answered: bool, now: float = 0.0) -> None:
        """The least recently seen contact of a full bucket answered (it
        stays, the newcomer is dropped) or did not (it goes, the newcomer
        takes its place)."""
        index = self._index(int.from_bytes(node_id, "big"))
        bucket = self.buckets.get(index, {})
        newcomer = self.waiting.pop(index, None)
        if node_id not in bucket:
            return
        if answered:
            bucket[node_id].last_seen = now
            bucket.move_to_end(node_id)
            return
        self.remove(node_id)
        if newcomer is not None:
            self._put(bucket, newcomer)

    def remove(self, node_id: bytes) -> None:
        index = self._index(int.from_bytes(node_id, "big"))
        bucket = self.buckets.get(index)
        if bucket and node_id in bucket:
            gone = bucket.pop(node_id)
            if gone.subnet:
                self.subnets[gone.subnet] -= 1
                self.bucket_subnets[(index, gone.subnet)] -= 1

    def closest(self, target: bytes, count: int = K, exclude=()) -> list:
        target_int = int.from_bytes(target, "big")
        ranked = [(c.number ^ target_int, c) for bucket in self.buckets.values()
                  for c in bucket.values() if not exclude or c.node_id not in exclude]
        return [c for _, c in heapq.nsmallest(count, ranked, key=_first)]

    def random_id_in_bucket(self, index: int, rng) -> bytes:
        """An id that falls in bucket `index` (shares `index` leading bits
        with this node's id, then differs): what a bucket refresh looks up."""
        mine = int.from_bytes(self.self_id, "big")
        flip = 1 << (ID_BITS - 1 - index)
        low = rng.getrandbits(ID_BITS - 1 - index) if index < ID_BITS - 1 else 0
        number = ((mine ^ flip) >> (ID_BITS - 1 - index) << (ID_BITS - 1 - index)) | low
        return number.to_bytes(ID_BITS // 8, "big")

    def nearest_bucket(self) -> int:
        return max((i for i, b in self.buckets.items() if b), default=0)

    def _put(self, bucket, contact) -> None:
        bucket[contact.node_id] = contact
        if contact.subnet:
            self.subnets[contact.subnet] = self.subnets.get(contact.subnet, 0) + 1
            key = (self._index(contact.number), contact.subnet)
            self.bucket_subnets[key] = self.bucket_subnets.get(key, 0) + 1


def _first(pair):
    return pair[0]
