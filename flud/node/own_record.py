"""This node's own signed record, kept fresh.

The sequence number must grow across restarts, or peers would keep the old
record (the highest sequence wins) and never learn a new address: it is
the wall clock in milliseconds, but never less than one above the last
sequence this node signed, which is kept in `record.seq` in its home (so a
clock set back cannot make a node's new record lose to its old one).
"""
import os
import time

from flud.protocol.node_record import (RECORD_LIFETIME, REFRESH_BEFORE, ROLE_STORE, Address,
                                       sign_record)

SEQUENCE_FILE = "record.seq"


class OwnRecord:
    def __init__(self, identity, home: str, host: str, port: int, capacity: int = 0,
                 roles: int = ROLE_STORE, clock=time.time, addresses=None):
        """addresses: the candidate hints (default: host:port alone); the
        record lists them until reachability says which passed (move)."""
        self.identity = identity
        self.path = os.path.join(home, SEQUENCE_FILE)
        self.addresses = tuple(addresses) if addresses else (Address.tcp(host, port),)
        self.candidates = self.addresses
        self.capacity = capacity
        self.roles = roles
        self.clock = clock
        self._record = None

    def __call__(self):
        """The current record, re-signed when it is near its expiry."""
        now = self.clock()
        if self._record is None or self._record.expires - now < REFRESH_BEFORE:
            self._record = self._sign(now)
        return self._record

    def move(self, addresses) -> None:
        """New address hints (a mapped port, a relay): signed at once."""
        self.addresses = tuple(addresses)
        self._record = self._sign(self.clock())

    def _sign(self, now):
        sequence = max(int(now * 1000), self._last_sequence() + 1)
        record = sign_record(self.identity, sequence, int(now) + RECORD_LIFETIME,
                             self.addresses, self.roles, self.capacity)
        self._save_sequence(sequence)
        return record

    def _last_sequence(self) -> int:
        try:
            with open(self.path) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _save_sequence(self, sequence: int) -> None:
        temp = self.path + ".tmp"
        with open(temp, "w") as f:
            f.write(str(sequence))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
