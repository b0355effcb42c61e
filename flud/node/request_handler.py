"""Dispatch: one adapter line per op, from a connection to the storage core.

The handler never lets an exception escape towards the reactor: every failure
becomes an ERROR with a stable code (errors.code_for_exception), and the node
keeps serving everyone else.
"""
import logging

from twisted.internet import defer

from flud.node.reachability import plain_host
from flud.protocol import messages
from flud.protocol.codec import DATA_CHUNK, Op, pieces_of
from flud.protocol.errors import ErrorCode, RemoteError
from flud.node.peers import GOSSIP_SAMPLE
from flud.storage.capacity import ReservationGroup

log = logging.getLogger("flud.server")

# Verifies up to this size are done on the reactor thread; larger ones go to
# the worker pool.
INLINE_IO = 1024 * 1024
# A RETRIEVE answer up to this size goes in one frame; larger ones stream,
# starting with a small piece so the first byte is not held behind a 1 MiB
# frame (time to first byte), then in DATA_CHUNK pieces.
INLINE_RETRIEVE = 64 * 1024
FIRST_PIECE = 64 * 1024
# An upload holds its declared size from its first frame (storage/capacity.py
# bounds how much one connection and one sender may hold). One that receives
# nothing is dropped, its space given back (STALLED to the sender):
# - once neither it nor its connection received a byte for
#   UPLOAD_STALL_TIMEOUT: the sender is silent, gone or hung. 90 s is the flud
#   client's own STALL_TIMEOUT (60 s) and a margin: a client feeds an
#   extent's streams at the pace of the slowest of its nodes and gives up on
#   that node after 60 s, so it always names the slow node itself before a
#   healthy one, whose stream waited meanwhile, drops that stream.
# - once it received no byte of its own for UPLOAD_ABANDON_TIMEOUT, however
#   busy its connection. The connection counts because a DATA frame (1 MiB)
#   reaches the handler only whole, and a sender sends its uploads' frames in
#   turn: on a slow link an upload's next frame can be minutes away while its
#   connection never stops receiving. 300 s keeps three uploads sharing one
#   connection alive down to ~10 KB/s.
UPLOAD_STALL_TIMEOUT = 90.0
UPLOAD_ABANDON_TIMEOUT = 300.0


class ReaderSource:
    """Adapts a storage Reader to the wire's pull source."""

    def __init__(self, reader, total: int, on_close=None, first_piece: int = FIRST_PIECE):
        self._reader = reader
        self.remaining = total
        self._on_close = on_close
        self._first_piece = first_piece

    def read(self, n: int) -> bytes:
        if self._first_piece:
            n, self._first_piece = min(n, self._first_piece), 0
        chunk = self._reader.read(min(n, self.remaining))
        if not chunk and self.remaining:
            raise RemoteError(ErrorCode.INTERNAL, "share ended before its recorded size")
        self.remaining -= len(chunk)
        return chunk

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            if self._on_close is not None:
                self._on_close()


class _OpenUpload:
    """An upload receiving its bytes, and when it last made progress."""

    __slots__ = ("upload", "transfer", "timer", "progress_at", "seen_in", "quiet_since")

    def __init__(self, upload, transfer, now: float, bytes_in: int):
        self.upload = upload
        self.transfer = transfer
        self.timer = None
        self.progress_at = now      # its last bytes (or its request)
        self.seen_in = bytes_in     # its connection's bytes_in then...
        self.quiet_since = now      # ...or when a check last saw that change

    def progressed(self, now: float, bytes_in: int) -> None:
        self.progress_at = self.quiet_since = now
        self.seen_in = bytes_in

    def stop_timer(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.timer = None


class NodeHandler:
    """Serves one node's requests from every connection."""

    def __init__(self, store, run_blocking, membership=None, roots=None,
                 stats=None, monitor=None, inline_commits=False, on_request=None,
                 on_delete=None):
        self.store = store
        # on_request(owner): told of every authenticated request before it is
        # served (the node renews the owner's lease: flud/node/leases.py).
        self.on_request = on_request
        # on_delete(owner): told of every DELETE done; the store then leaves
        # compaction to it (flud/node/compaction.py). None: the store compacts.
        self.on_delete = on_delete
        self.run_blocking = run_blocking
        # Commit an upload on the reactor thread when nothing else is in
        # progress (see _commit); False: always in a worker.
        self.inline_commits = inline_commits
        self._commits_in_workers = 0
        self.membership = membership
        self.discovery = None  # flud/node/discovery.py: answers FIND_NODE
        self.roots = roots
        self.stats = stats or (lambda: {})
        self.monitor = monitor
        self.quota = None    # a QuotaKeeper (flud/node/quota.py): STORE credit, LINK
        self.listeners = []  # told of every connection made ready or lost
        self._uploads = {}  # (connection, rid) -> _OpenUpload
        self._groups = {}   # connection -> ReservationGroup of its open uploads
        self.counters = {"requests": 0, "errors": 0, "stores": 0, "retrieves": 0,
                         "verifies": 0, "deletes": 0, "stalled": 0,
                         "bytes_stored_in": 0, "bytes_retrieved_out": 0}
        self._live = set()           # open connections, for byte totals
        self._closed_bytes = [0, 0]  # bytes in/out of connections now closed
        self._ops = {
            Op.PING: self._ping,
            Op.PEERS: self._peers,
            Op.STATS: self._stats,
            Op.STORE: self._store,
            Op.RETRIEVE: self._retrieve,
            Op.VERIFY: self._verify,
            Op.DELETE: self._delete,
            Op.ROOT_PUT: self._root_put,
            Op.ROOT_GET: self._root_get,
            Op.LINK: self._link,
            Op.DIAL_BACK: self._dial_back,
            Op.RESERVE: self._reserve,
            Op.RELAY_INCOMING: self._relay_incoming,
            Op.PUNCH_CONNECT: self._punch_connect,
            Op.PUNCH_SYNC: self._punch_sync,
            Op.OBSERVED: self._observed,
            Op.FIND_NODE: self._find_node,
        }
        self.dial_back = None   # flud/node/dial_back.py's DialBackServer
        self.relay = None       # flud/node/relay.py: RelayService, ReservationKeeper
        self.reservation = None
        self.punch = None       # flud/node/puncher.py's Puncher

    # ---- connection events -------------------------------------------------

    def connection_ready(self, conn):
        self._live.add(conn)
        for listener in self.listeners:
            listener.connection_ready(conn)

    def connection_lost(self, conn):
        if conn in self._live:
            self._live.discard(conn)
            self._closed_bytes[0] += conn.bytes_in
            self._closed_bytes[1] += conn.bytes_out
        for (owner_conn, rid) in [k for k in self._uploads if k[0] is conn]:
            self._abort_upload(owner_conn, rid)
        self._groups.pop(conn, None)
        for listener in self.listeners:
            listener.connection_lost(conn)

    def request_received(self, conn, rid, op, message, end):
        self.counters["requests"] += 1
        try:
            if self.on_request is not None and conn.peer_id:
                self.on_request(conn.peer_id)
            result = self._ops[op](conn, rid, message, end)
        except Exception as err:
            self._fail(conn, rid, err)
            return
        if isinstance(result, defer.Deferred):
            result.addErrback(lambda f: self._fail(conn, rid, f.value))

    def request_data(self, conn, rid, data, end):
        entry = self._uploads.get((conn, rid))
        if entry is None:
            return
        try:
            entry.upload.write_pieces(pieces_of(data))
            entry.progressed(conn.clock.seconds(), conn.bytes_in)
            self.counters["bytes_stored_in"] += len(data)
            if end:
                self._commit(conn, rid)
        except Exception as err:
            self._abort_upload(conn, rid)
            self._fail(conn, rid, err)

    def request_cancelled(self, conn, rid):
        self._abort_upload(conn, rid)

    # ---- ops ---------------------------------------------------------------

    def _ping(self, conn, rid, message, end):
        conn.respond(rid, messages.Empty())

    def _peers(self, conn, rid, message, end):
        if self.membership is None:
            conn.respond(rid, messages.PeerList([]))
            return
        self.membership.merge(message.peers, source=conn)
        node = conn.peer_hello is not None and conn.peer_hello.role == messages.ROLE_NODE
        conn.respond(rid, messages.PeerList(
            self.membership.snapshot(GOSSIP_SAMPLE) if node else self.membership.snapshot()))

    def _dial_back(self, conn, rid, message, end):
        if self.dial_back is None:
            raise RemoteError(ErrorCode.UNKNOWN_OP, "this node does not dial back")
        return self.dial_back.serve(conn, rid, message)

    def _reserve(self, conn, rid, message, end):
        if self.relay is None:
            raise RemoteError(ErrorCode.RELAY_REFUSED, "this node relays for nobody")
        return self.relay.reserve(conn, rid, message)

    def _relay_incoming(self, conn, rid, message, end):
        if self.reservation is None:
            raise RemoteError(ErrorCode.RELAY_REFUSED, "this node holds no reservation")
        return self.reservation.incoming(conn, rid, message)

    def _punch_connect(self, conn, rid, message, end):
        if self.punch is None:
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node does not punch holes")
        return self.punch.serve_connect(conn, rid, message)

    def _punch_sync(self, conn, rid, message, end):
        if self.punch is None:
            raise RemoteError(ErrorCode.PUNCH_REFUSED, "this node does not punch holes")
        return self.punch.serve_sync(conn, rid, message)

    def _observed(self, conn, rid, message, end):
        """Where the asker is seen: costs nothing, keeps nothing."""
        seen = conn.transport.getPeer()
        conn.respond(rid, messages.Observed(plain_host(seen.host), seen.port))

    def _stats(self, conn, rid, message, end):
        values = dict(self.stats())
        values["server"] = dict(self.counters)
        values["net"] = {  # transport bytes, TLS included, since the node started
            "bytes_in": self._closed_bytes[0] + sum(c.bytes_in for c in self._live),
            "bytes_out": self._closed_bytes[1] + sum(c.bytes_out for c in self._live),
            "connections": len(self._live)}
        conn.respond(rid, messages.Stats(values))

    def _store(self, conn, rid, message, end):
        key = message.content_key  # None for a streamed share: checked at commit
        if self.quota is not None:
            self.quota.admit(conn, message.size)   # QUOTA beyond the owner's credit
        group = self._groups.get(conn)
        if group is None:
            group = self._groups[conn] = ReservationGroup(name="this connection")
        upload = self.store.open_upload(key, conn.peer_id, message.size, message.kind_name,
                                        group=group)
        if self.quota is not None:
            self.quota.admitted(conn.peer_id, message.size)
        transfer = None
        if self.monitor is not None:
            name = key.hex()[:16] if key is not None else "streamed"
            transfer = self.monitor.transfer("store", name)
        entry = _OpenUpload(upload, transfer, conn.clock.seconds(), conn.bytes_in)
        entry.timer = conn.clock.callLater(UPLOAD_STALL_TIMEOUT, self._check_stall, conn, rid)
        self._uploads[(conn, rid)] = entry
        self.counters["stores"] += 1
        self.request_data(conn, rid, message.data, end)

    def _check_stall(self, conn, rid):
        entry = self._uploads.get((conn, rid))
        if entry is None:
            return
        entry.timer = None
        now = conn.clock.seconds()
        if conn.bytes_in != entry.seen_in:  # the connection received since: not silent
            entry.seen_in, entry.quiet_since = conn.bytes_in, now
        silent = now - entry.progress_at
        if silent >= UPLOAD_ABANDON_TIMEOUT or (
                silent >= UPLOAD_STALL_TIMEOUT and now - entry.quiet_since >= UPLOAD_STALL_TIMEOUT):
            self.counters["stalled"] += 1
            log.info("dropping an upload from %s: nothing received for it in %.0f s",
                     conn.describe(), silent)
            self._abort_upload(conn, rid)
            self._fail(conn, rid, RemoteError(
                ErrorCode.STALLED, f"this node received nothing for this upload in {silent:.0f} s "
                                   f"and dropped it; send it again"))
            return
        due = min(entry.quiet_since + UPLOAD_STALL_TIMEOUT,
                  entry.progress_at + UPLOAD_ABANDON_TIMEOUT)
        entry.timer = conn.clock.callLater(max(due - now, 1.0), self._check_stall, conn, rid)

    def _commit(self, conn, rid):
        # Out of the table first: a CANCEL or a lost connection arriving while
        # the commit runs in a worker must not abort it from another thread.
        entry = self._uploads.pop((conn, rid))
        entry.stop_timer()
        upload, transfer = entry.upload, entry.transfer

        def done(_):
            if transfer is not None:
                transfer.close()
            conn.respond(rid, messages.Empty())

        def failed(failure):
            if transfer is not None:
                transfer.close()
            self._fail(conn, rid, failure.value)

        if self.inline_commits and not self._uploads and not self._commits_in_workers:
            # Nothing else in progress: the commit (fsync, rename, index) runs
            # here. Handing it to a worker and back cost a node more CPU than
            # the commit itself (measured: 12% less node CPU per 512 KiB
            # STORE inline, 18% more STOREs/s one at a time); with other work
            # open it goes to a worker, so that work never waits on an fsync.
            d = defer.maybeDeferred(upload.commit)
        else:
            self._commits_in_workers += 1
            d = self.run_blocking(upload.commit)
            d.addBoth(self._commit_left_worker)
        d.addCallbacks(done, failed)

    def _commit_left_worker(self, result):
        self._commits_in_workers -= 1
        return result

    def _abort_upload(self, conn, rid):
        entry = self._uploads.pop((conn, rid), None)
        if entry is None:
            return
        entry.stop_timer()
        try:
            entry.upload.abort()
        except Exception:
            log.exception("aborting an upload failed")
        if entry.transfer is not None:
            entry.transfer.close()

    def _retrieve(self, conn, rid, message, end):
        length = None if message.length == messages.TO_END else message.length
        reader = self.store.open_reader(message.key, conn.peer_id, message.offset, length)
        total = reader.remaining
        self.counters["retrieves"] += 1
        self.counters["bytes_retrieved_out"] += total
        if total <= INLINE_RETRIEVE:
            with reader:
                data = reader.read(total)
            conn.respond(rid, messages.RetrieveResponse(total, data))
            return
        if self.monitor is None:
            conn.respond_stream(rid, messages.RetrieveResponse(total), ReaderSource(reader, total))
            return None
        # A stream holds one chunk read ahead; under the node's memory budget
        # a new stream waits for room instead of growing the footprint.
        transfer = self.monitor.transfer("retrieve", message.key.hex()[:16])

        def granted(_):
            source = ReaderSource(reader, total, transfer.close)
            conn.respond_stream(rid, messages.RetrieveResponse(total), source)

        def refused(failure):
            reader.close()
            transfer.close()
            return failure

        return transfer.reserve(DATA_CHUNK, "read-ahead").addCallbacks(granted, refused)

    def _verify(self, conn, rid, message, end):
        self.counters["verifies"] += 1
        length = None if message.length == messages.TO_END else message.length
        owner = conn.peer_id
        if length is not None and length <= INLINE_IO:
            digest = self.store.verify(message.key, owner, message.nonce, message.offset, length)
            conn.respond(rid, messages.Digest(digest))
            return None
        d = self.run_blocking(self.store.verify, message.key, owner, message.nonce,
                              message.offset, length)
        d.addCallback(lambda digest: conn.respond(rid, messages.Digest(digest)))
        return d

    def _delete(self, conn, rid, message, end):
        self.counters["deletes"] += 1
        owner = conn.peer_id
        if self.on_delete is None:
            d = self.run_blocking(self.store.delete, message.key, owner)
        else:
            d = self.run_blocking(self.store.delete, message.key, owner, False)
            d.addCallback(lambda _: self.on_delete(owner))
        d.addCallback(lambda _: conn.respond(rid, messages.Empty()))
        return d

    def _root_put(self, conn, rid, message, end):
        if self.roots is None:
            raise RemoteError(ErrorCode.UNKNOWN_OP, "this node keeps no root records")
        d = self.run_blocking(self.roots.put, conn.peer_id, message.record)
        d.addCallback(lambda _: conn.respond(rid, messages.Empty()))
        return d

    def _root_get(self, conn, rid, message, end):
        if self.roots is None:
            raise RemoteError(ErrorCode.NOT_FOUND, "no root record for you here")
        conn.respond(rid, messages.Record(self.roots.get(conn.peer_id)))

    def _link(self, conn, rid, message, end):
        if self.quota is None:
            raise RemoteError(ErrorCode.UNKNOWN_OP, "this node keeps no ledger")
        self.quota.learn_link(message.link)
        conn.respond(rid, messages.Empty())
    def _find_node(self, conn, rid, message, end):
        if self.discovery is None:
            conn.respond(rid, messages.FoundNodes([]))
            return
        conn.respond(rid, self.discovery.answer(conn, message))

    def _fail(self, conn, rid, err):
        self.counters["errors"] += 1
        conn.respond_error(rid, err)
