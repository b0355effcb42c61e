"""The requests we sent a peer, and how each answer is put together. Sans-I/O.

A RequestTable knows, by request id, what every open request of ours waits
for: its op, where streamed answer bytes go (a sink the caller gave, a
buffer made from the answer's announced size, a buffer the caller offered,
or parts joined at the end) and whether the request went out whole (from
then on the answer is the peer's to give: flud.protocol.stall watches it).

Nothing here fires anything. Each request carries a `waiter`, any object the
caller chose (a connection uses a Deferred); the table hands the Answer back
when it is complete, cancelled, failed or lost, and the caller tells its
waiter. So this module imports nothing from twisted.internet and is tested
with plain calls.
"""
from flud.protocol.codec import Op, Pieces, Placed, pieces_of

# A streamed answer up to this size is received into one buffer made when its
# head arrives (its size is in the head); larger ones are joined at the end.
PREALLOCATE_LIMIT = 256 * 1024 * 1024
# Answers from this size get a mapped, prefaulted buffer (answer_buffer).
POPULATE_MIN = 4 * 1024 * 1024


def answer_buffer(total: int):
    """A writable buffer for an answer of `total` bytes. Large ones are mapped
    with their pages populated in one go: a bytearray zeroes its fresh pages
    one fault at a time (measured here: 47 ms for 64 MiB, against 24 ms)."""
    import mmap  # here: a node never needs it
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if total < POPULATE_MIN or not populate:
        return bytearray(total)
    return memoryview(mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate))


class Answer:
    """One open request of ours and its answer as it arrives."""

    __slots__ = ("waiter", "op", "sink", "into", "head", "parts", "buffer", "filled", "sent")

    def __init__(self, waiter, op, sink, into=None):
        self.waiter = waiter  # the caller's; handed back with the outcome
        self.sent = False  # the request went out whole: the answer is the peer's to give
        self.op = op
        self.sink = sink
        self.into = into  # a writable buffer the caller offers for the answer
        self.head = None
        self.parts = []  # streamed bytes, when the caller gave no sink
        self.buffer = None  # or the whole answer, filled as DATA arrives
        self.filled = 0

    def expect(self, total: int) -> None:
        """The answer's size is known: copy each piece into place as it comes
        (while the network is busy) instead of joining them all at the end."""
        if 0 < total <= PREALLOCATE_LIMIT and self.sink is None:
            into, self.into = self.into, None
            self.buffer = (into[:total] if into is not None and total <= len(into)
                           else answer_buffer(total))

    def add(self, data) -> None:
        if self.buffer is None:
            self.parts.append(data)
            return
        end = self.filled + len(data)
        if end > len(self.buffer):  # a peer sent more than it announced
            self.buffer = bytearray(self.buffer[:self.filled])
        self.buffer[self.filled:end] = data
        self.filled = end

    def deliver(self, data) -> None:
        """A DATA payload of the answer (bytes, a view, Pieces or Placed)."""
        if type(data) is Placed:  # already in self.buffer (decrypted in place)
            return
        if self.sink is not None:  # one call per DATA frame, as the frame was sent
            self.sink(data if type(data) is not Pieces else bytes(data))
            return
        for piece in pieces_of(data):  # straight into the preallocated answer
            self.add(piece)

    def finish(self):
        """The answer is complete: its head message, with the streamed bytes
        (if any were kept here) as its data."""
        if self.buffer is not None:
            self.head.data = (self.buffer if self.filled == len(self.buffer)
                              else bytes(memoryview(self.buffer)[:self.filled]))
        elif self.parts:
            self.head.data = b"".join(self.parts)
        return self.head


class RequestTable:
    """Open requests by id. Methods that end a request take it out of the
    table and return its Answer (None: no such request, or not ended yet)."""

    def __init__(self):
        self._open = {}

    def __len__(self) -> int:
        return len(self._open)

    def open(self, rid: int, op: int, waiter, sink=None, into=None,
             sent: bool = True) -> Answer:
        """`sink(chunk)` receives streamed answer bytes; `into`, a writable
        memoryview, receives a streamed answer that fits in it; `sent`: the
        request went out whole (False while its own bytes still stream)."""
        answer = Answer(waiter, op, sink, into)
        answer.sent = sent
        self._open[rid] = answer
        return answer

    def get(self, rid: int):
        return self._open.get(rid)

    def pop(self, rid: int):
        """End a request without an answer (an error, a failed upload)."""
        return self._open.pop(rid, None)

    def mark_sent(self, rid: int) -> None:
        """The request's streamed bytes all went out."""
        answer = self._open.get(rid)
        if answer is not None:
            answer.sent = True

    def owed(self) -> bool:
        """Some request went out whole and waits for its answer."""
        return any(answer.sent for answer in self._open.values())

    def on_head(self, rid: int, op: int, message, end: bool):
        """A RESPONSE arrived; returns the Answer if it ended the request."""
        answer = self._open.get(rid)
        if answer is None:
            return None
        answer.head = message
        if op == Op.RETRIEVE and not end:
            answer.expect(message.total)
        if op == Op.RETRIEVE and message.data:
            answer.deliver(message.data)
            message.data = b""
        if end:
            del self._open[rid]
            return answer
        return None

    def on_data(self, rid: int, data, end: bool):
        """Streamed answer bytes arrived; returns the Answer if they ended it."""
        answer = self._open.get(rid)
        if answer is None:
            return None
        answer.deliver(data)
        if end:
            del self._open[rid]
            return answer
        return None

    def cancel(self, waiter):
        """The caller gives up the request it waits on with `waiter`:
        (rid, Answer), or None if it already ended."""
        for rid, answer in self._open.items():
            if answer.waiter is waiter:
                del self._open[rid]
                return rid, answer
        return None

    def fail_all(self) -> list:
        """The connection is gone: every open Answer, the table left empty."""
        answers, self._open = list(self._open.values()), {}
        return answers
