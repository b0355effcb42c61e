"""The block buffers of one file's restore: a fixed number, used again and
again.

A fresh 512 KiB bytearray per RETRIEVE answer costs its zeroing, a page fault
per 4 KiB and an mmap/munmap pair (glibc maps buffers this large, see
flud.lean.tune_malloc). A file's restore receives each block into one of its
own buffers, and a buffer goes back as soon as its block is written to disk,
so the next segment's RETRIEVEs start block by block while the last one is
still being written (the window of segments is counted in blocks, not held
back until a whole segment is written). The buffers are anonymous maps: page
aligned, so a block goes from its buffer to the device (O_DIRECT) with no
staging copy.

get() waits when all `count` buffers are out. A buffer whose request failed
is abandoned (the connection may still write into it: it is left to the
garbage collector) and a new one may be made in its place.
"""
import collections
import mmap

from twisted.internet import defer


class BlockBuffers:
    def __init__(self, size: int, count: int):
        """size: a block's bytes; count: buffers out at once (the footprint)."""
        self.size = size
        self.count = count
        self._free = []
        self._out = {}      # id -> buffer handed out and not back yet
        self._made = 0      # buffers made and not abandoned: out or free
        self._waiting = collections.deque()

    @property
    def footprint(self) -> int:
        return self.size * self.count

    @property
    def held(self) -> int:
        """Bytes of the free buffers held now."""
        return len(self._free) * self.size

    def get(self) -> defer.Deferred:
        """Fires with a writable buffer of `size` bytes (old contents not
        cleared) once one of the count is free."""
        if self._free or self._made < self.count:
            return defer.succeed(self._hand_out())
        waiter = defer.Deferred()
        self._waiting.append(waiter)
        return waiter

    def give_back(self, pieces) -> None:
        """Return the buffers under these pieces (views of buffers handed out
        here, whose answers are complete; anything else, or a buffer already
        back, is ignored: a buffer is never free twice)."""
        for piece in pieces:
            owner = self._out.pop(id(getattr(piece, "obj", None)), None)
            if owner is None:
                continue
            self._free.append(owner)
        self._serve_waiting()

    def abandon(self, buffer) -> None:
        """A buffer handed out will not come back: another may be made."""
        if self._out.pop(id(getattr(buffer, "obj", None)), None) is not None:
            self._made -= 1
            self._serve_waiting()

    def _hand_out(self) -> memoryview:
        if self._free:
            owner = self._free.pop()
        else:
            self._made += 1
            owner = mmap.mmap(-1, self.size)
        self._out[id(owner)] = owner
        return memoryview(owner)

    def _serve_waiting(self) -> None:
        while self._waiting:
            waiter = self._waiting[0]
            if waiter.called:  # cancelled while it waited
                self._waiting.popleft()
                continue
            if not self._free and self._made >= self.count:
                return
            self._waiting.popleft().callback(self._hand_out())
