"""Contents are compressed before they are encrypted: zstd at one fixed level.

zstd is the standard library's `compression.zstd` from Python 3.14 and the
`backports.zstd` package before it (the same module, kept by the same
authors), so the dependency goes away on 3.14. Both release the GIL while
zstd works, so compression runs beside the reactor and the other workers.

What a caller relies on:
- The same input gives the same bytes for a given zstd library version: one
  level, the frame's flags pinned (content size written, no checksum: the
  convergent key already checks the plaintext), no threads inside zstd, no
  dictionary. Nothing depends on it across versions: a content is found
  again by its plaintext digest, never by its compressed bytes.
- Data that does not compress is stored as it is (method None): a file is
  compressed and the result kept only if it saves enough (worth_keeping);
  a large segment asks sample_incompressible() of a sample first, at a
  fraction of the cost (plan_pieces).
- A large segment is compressed in place (compress_in_place), in its own
  buffer, a piece at a time: no second segment-sized buffer. Its compressed
  length is learnt first without writing (plan_pieces: an extent's
  streams declare their sizes before its first segment is sent).
- decompress() refuses an unknown method, and bytes that do not give exactly
  the recorded size, with a typed error: it never makes more than that size.

A node never imports this module: it stores shares and never sees a
plaintext. The client imports it only where it compresses or decompresses.
"""
import sys
import threading

from flud.errors import BadCompressedData, UnknownCompression

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

ZSTD = "zstd"  # the method's name, as records write it
METHODS = (ZSTD,)

# Level 1. Measured per file on the generated tree's text and source files
# (tools/bench/gen_tree.py --files 2000: 1,294 files under 1 MiB, 14.7 MB,
# one core, medians of 5): level 1 3.63x at 262 MB/s (327 MB/s with the
# context kept), level 3 3.75x at 224 MB/s (280 MB/s). Level 3 stores 1.2%
# less of those bytes for 17% more CPU: ~73 ns for each further byte saved,
# against ~5 ns per byte saved at level 1. A byte saved is n/k bytes not sent
# over TLS and not stored, which costs the client far less than 73 ns, and
# small files are the critical path of a mixed backup.
LEVEL = 1
# Small files' contents at level 3 (restic's default) since issue 27: on the
# generated tree (tools/bench/bench_stored.py: 5,000 files, 77.7 MB below
# 1 MiB) level 1 kept 38.15 MB at 324 MB/s, level 3 36.95 MB at 258 MB/s:
# 3.1% less to store and send n/k times for ~0.8 ms of CPU per MB of small
# files, and the bytes on the nodes go from 1.002x to below n/k x restic's
# repository. Records stay at LEVEL: an unchanged record must seal to the
# same blob it did, and a content is found by its plaintext, never its frame.
CONTENT_LEVEL = 3

# Kept only if it saves at least 1/32 of the size and at least 64 bytes. Below
# that the saving is within the noise of what compression costs: the record's
# method field (~11 bytes of manifest per file), a decompression at every
# restore, and the frame's own header (~10 bytes) on data that barely shrank.
# Media and archives save nothing and land far below both.
MIN_SAVED_FRACTION = 32
MIN_SAVED_BYTES = 64

# sample_incompressible() compresses this many spans of this size, spread
# evenly over its data (all of it when it is shorter): 32 KiB, ~0.1 ms.
SAMPLE_SPANS = 8
SAMPLE_SPAN = 4096

_OPTIONS = {
    zstd.CompressionParameter.compression_level: LEVEL,
    zstd.CompressionParameter.content_size_flag: 1,
    zstd.CompressionParameter.checksum_flag: 0,
    zstd.CompressionParameter.dict_id_flag: 0,
}
_FLUSH_FRAME = zstd.ZstdCompressor.FLUSH_FRAME
# Each thread keeps its own compressor: a context made for every file costs
# ~20% more time (its tables mapped and zeroed afresh), and a shared one would
# serialise the threads on its lock. At level 1 a context holds ~350 KiB after
# a 1 MiB input; the client's pool has 2 threads.
_local = threading.local()


def _compressor(level: int = LEVEL):
    name = f"compressor{level}"
    compressor = getattr(_local, name, None)
    if compressor is None:
        options = _OPTIONS if level == LEVEL else {
            **_OPTIONS, zstd.CompressionParameter.compression_level: level}
        compressor = zstd.ZstdCompressor(options=options)
        setattr(_local, name, compressor)
    return compressor


def compress(data, level: int = LEVEL) -> bytes:
    """One zstd frame of `data` (any bytes-like object), always."""
    return _compressor(level).compress(data, _FLUSH_FRAME)


def worth_keeping(size: int, stored: int) -> bool:
    """Whether `stored` bytes in place of `size` save enough to keep."""
    saved = size - stored
    return saved >= MIN_SAVED_BYTES and saved * MIN_SAVED_FRACTION >= size


def compress_if_worth(data, level: int = LEVEL):
    """(method, bytes to store): (ZSTD, the frame) when it saves enough,
    else (None, data itself)."""
    if len(data) <= MIN_SAVED_BYTES:
        return None, data
    frame = compress(data, level)
    if worth_keeping(len(data), len(frame)):
        return ZSTD, frame
    return None, data


def working_bytes(size: int) -> int:
    """What compressing `size` bytes allocates besides its input and the
    thread's context: zstd's output bound (the frame is made in it)."""
    return size + (size >> 8) + 512


def sample_spans(length: int) -> list:
    """[(offset, size)] of the sample sample_incompressible() takes from
    `length` bytes: SAMPLE_SPANS spans of SAMPLE_SPAN spread evenly (all of
    it when it is short)."""
    if length <= SAMPLE_SPANS * SAMPLE_SPAN:
        return [(0, length)]
    step = (length - SAMPLE_SPAN) // (SAMPLE_SPANS - 1)
    return [(i * step, SAMPLE_SPAN) for i in range(SAMPLE_SPANS)]


def sample_incompressible(sample) -> bool:
    """True when a sample (sample_spans' bytes, joined) does not save enough."""
    return not worth_keeping(len(sample), len(compress(sample)))


# A segment is compressed SEGMENT_PIECE bytes at a time (zstd's own block
# size): each piece's output is written over input already consumed (zstd
# copies what it is given into its own window). The output equals
# compress()'s for the same bytes (zstd emits whole blocks), and the same
# pieces give the same output whether they come from the segment's buffer
# or, one at a time, from the file (plan_pieces).
SEGMENT_PIECE = 128 * 1024
_CONTINUE = zstd.ZstdCompressor.CONTINUE


def _segment_compressor():
    compressor = getattr(_local, "segments", None)
    if compressor is None:
        compressor = _local.segments = zstd.ZstdCompressor(options=_OPTIONS)
    return compressor


def slices(view, length: int):
    """view[:length] as the SEGMENT_PIECE pieces a segment is compressed in."""
    return (view[start:min(start + SEGMENT_PIECE, length)]
            for start in range(0, length, SEGMENT_PIECE))


def _in_place_length(pieces, length: int, out=None):
    """The length of one zstd frame of `pieces` (SEGMENT_PIECE each but the
    last, `length` bytes together) if every piece of its output fits below
    the input consumed so far (so writing it there never overwrites unread
    bytes), else None. out: the segment's buffer, written over."""
    compressor = _segment_compressor()
    compressor.set_pledged_input_size(length)  # the frame's header says it, as compress()'s
    consumed = written = 0
    for piece in pieces:
        consumed += len(piece)
        output = compressor.compress(piece, _FLUSH_FRAME if consumed == length else _CONTINUE)
        if written + len(output) > consumed:
            _local.segments = None  # left mid-frame: the next segment gets a fresh one
            return None
        if out is not None:
            out[written:written + len(output)] = output
        written += len(output)
    if not length:
        written = len(compressor.compress(b"", _FLUSH_FRAME))
    if consumed != length:
        raise ValueError(f"the pieces held {consumed} bytes, not {length}")
    return written


def plan_pieces(sample, pieces, length: int):
    """(method, stored length) of a large file's segment, nothing written:
    (ZSTD, the frame's length) when compress_in_place will fit and the frame
    saves enough, else (None, `length`). sample: its sample_spans' bytes,
    tried first, so a segment that does not compress costs ~0.1 ms, not a
    compression; pieces: a callable giving its SEGMENT_PIECE pieces in
    order (asked for only if the sample compresses)."""
    if sample_incompressible(sample):
        return None, length
    stored = _in_place_length(pieces(), length)
    if stored is None or not worth_keeping(length, stored):
        return None, length
    return ZSTD, stored


def compress_in_place(buffer, length: int):
    """buffer[:length] (a writable buffer) becomes its zstd frame, written
    over it piece by piece; returns the frame's length, or None if a piece
    did not fit below the input consumed (buffer[:length] is then spoilt).
    The same bytes as compress(buffer[:length])."""
    view = memoryview(buffer).cast("B")
    return _in_place_length(slices(view, length), length, view)


def check_method(method) -> None:
    """UnknownCompression unless `method` is None or one this flud knows."""
    if method is not None and method not in METHODS:
        raise UnknownCompression(
            f"compressed with {method!r}, which this version of flud cannot decompress "
            f"(it knows {', '.join(METHODS)}): restore it with the newer flud that wrote it")


def decompress_pieces(method, pieces, expected_size: int):
    """The plaintext of one frame stored in `pieces` (buffers, in order) with
    `method`, as output chunks in order: the stored bytes are never joined.
    The same checks as decompress(), made once the last piece is in: a
    caller uses the chunks only once this generator ran to its end."""
    check_method(method)
    decompressor = zstd.ZstdDecompressor()
    made = 0
    try:
        for piece in pieces:
            if not len(piece):
                continue
            if decompressor.eof:
                raise BadCompressedData("bytes follow the zstd frame")
            # Room for one byte more than recorded: that byte says "too long".
            chunk = decompressor.decompress(piece, max_length=expected_size - made + 1)
            made += len(chunk)
            if made > expected_size:
                break
            yield chunk
    except zstd.ZstdError as err:
        raise BadCompressedData(f"zstd data does not decompress: {err}") from None
    if made != expected_size or not decompressor.eof or decompressor.unused_data:
        raise BadCompressedData(f"zstd data does not decompress to the {expected_size} bytes "
                                f"recorded")


def decompress(method, data, expected_size: int):
    """The plaintext of `data` stored with `method` (None: as it is), which
    must be exactly `expected_size` bytes."""
    if method is None:
        if len(data) != expected_size:
            raise BadCompressedData(f"stored {len(data)} bytes where {expected_size} were recorded")
        return data
    check_method(method)
    decompressor = zstd.ZstdDecompressor()
    try:
        # Never more than the record says, whatever the bytes claim.
        plain = decompressor.decompress(data, max_length=expected_size)
    except zstd.ZstdError as err:
        raise BadCompressedData(f"zstd data does not decompress: {err}") from None
    if len(plain) != expected_size or not decompressor.eof or decompressor.unused_data:
        raise BadCompressedData(f"zstd data does not decompress to the {expected_size} bytes "
                                f"recorded")
    return plain


def decompress_bounded(data, limit: int) -> bytes:
    """The plaintext of one zstd frame whose size is not recorded elsewhere
    (a snapshot record's), refused past `limit` bytes (a frame that would
    grow without bound is a damaged or hostile one) or if it is not one
    whole frame."""
    decompressor = zstd.ZstdDecompressor()
    try:
        out = decompressor.decompress(data, max_length=limit + 1)
    except zstd.ZstdError as err:
        raise BadCompressedData(f"a zstd frame that does not decompress: {err}") from None
    if len(out) > limit:
        raise BadCompressedData(f"a zstd frame of more than {limit} bytes")
    if not decompressor.eof or decompressor.unused_data:
        raise BadCompressedData("not exactly one whole zstd frame")
    return out
