"""flud/compression.py: zstd at one level, kept only when it saves enough,
the same bytes for the same input, and a decompression that makes exactly
the recorded size or refuses."""
import os
import random
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from flud import compression
from flud.compression import (LEVEL, MIN_SAVED_BYTES, ZSTD, check_method, compress,
                              compress_if_worth, decompress, plan_pieces, sample_incompressible,
                              sample_spans, slices, worth_keeping, zstd)
from flud.errors import BadCompressedData, CompressionError, FludError, UnknownCompression

REPO = Path(__file__).resolve().parents[3]


def _sample(view) -> bytes:
    return b"".join(view[o:o + n] for o, n in sample_spans(len(view)))


def looks_incompressible(data) -> bool:
    """The guess a large segment's plan makes from a sample of `data`."""
    return sample_incompressible(_sample(memoryview(data).cast("B")))


def plan_segment(data):
    """plan_pieces() of a segment held in `data` (a backup reads its pieces
    from the file instead)."""
    view = memoryview(data).cast("B")
    return plan_pieces(_sample(view), lambda: slices(view, len(view)), len(view))


def text(size: int, seed: int = 1) -> bytes:
    """Source-like text: words from a small vocabulary, lines of code."""
    rng = random.Random(seed)
    words = [b"def", b"return", b"self", b"value", b"import", b"for", b"in", b"if", b"None",
             b"count", b"name", b"path", b"(", b")", b":", b"=", b"+", b"1", b"0", b"data"]
    out = bytearray()
    while len(out) < size:
        out += b"    " * rng.randint(0, 3) + b" ".join(rng.choices(words, k=rng.randint(3, 12)))
        out += b"\n"
    return bytes(out[:size])


@pytest.mark.parametrize("size", [300, 1000, 40_000, 1024 * 1024 - 1])
def test_text_round_trips_through_a_smaller_frame(size):
    data = text(size)
    method, stored = compress_if_worth(data)
    assert method == ZSTD and worth_keeping(size, len(stored))
    assert decompress(method, stored, size) == data
    # any bytes-like input: a backup hands over its bytearray
    assert compress_if_worth(bytearray(data))[1] == stored


def test_the_same_input_gives_the_same_bytes_on_every_call_and_thread():
    data = text(300_000, seed=2)
    first = compress(data)
    assert compress(data) == first
    compress(text(900_000, seed=3))   # the thread's context was used for something else
    assert compress(data) == first
    others = []
    threads = [threading.Thread(target=lambda: others.append(compress(data))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert others == [first] * 3
    # a fresh one-shot compressor with the same level and flags agrees
    assert zstd.ZstdCompressor(options=compression._OPTIONS).compress(
        data, zstd.ZstdCompressor.FLUSH_FRAME) == first
    assert LEVEL == 1
    # the frame records its size and carries no checksum or dictionary id
    info = zstd.get_frame_info(first)
    assert info.decompressed_size == len(data) and info.dictionary_id == 0


@pytest.mark.parametrize("data", [
    os.urandom(5000),                                  # random: media, keys
    zlib.compress(text(200_000, seed=4), 9),           # already compressed
    os.urandom(1024 * 1024 - 1),
    b"",
    b"x" * MIN_SAVED_BYTES,                            # too small to save enough
], ids=["random", "deflated", "random-1MiB", "empty", "tiny"])
def test_data_that_does_not_compress_is_kept_as_it_is(data):
    method, stored = compress_if_worth(data)
    assert method is None and stored is data
    assert decompress(None, stored, len(data)) is data


def test_what_is_worth_keeping():
    assert worth_keeping(32 * 1000, 31 * 1000)             # 1/32 saved
    assert not worth_keeping(32 * 1000, 31 * 1000 + 1)     # a byte short of 1/32
    assert worth_keeping(1000, 1000 - MIN_SAVED_BYTES)
    assert not worth_keeping(1000, 1000 - MIN_SAVED_BYTES + 1)  # 1/32, but too few bytes
    assert not worth_keeping(100, 100)


def test_a_sample_tells_text_from_random_and_compressed_data():
    assert not looks_incompressible(text(2 * 1024 * 1024, seed=5))
    assert looks_incompressible(os.urandom(2 * 1024 * 1024))
    assert looks_incompressible(zlib.compress(text(3 * 1024 * 1024, seed=6), 9))
    assert not looks_incompressible(text(5000, seed=7))          # shorter than the sample
    assert looks_incompressible(b"")
    # text followed by media: the spans are spread over all of it
    mixed = text(1024 * 1024, seed=8) + os.urandom(1024 * 1024)
    assert not looks_incompressible(mixed)


def test_wrong_sizes_and_damaged_frames_are_refused_with_a_typed_error():
    data = text(50_000, seed=9)
    frame = compress(data)
    for expected in (len(data) - 1, len(data) + 1, 0):
        with pytest.raises(BadCompressedData):
            decompress(ZSTD, frame, expected)
    damaged = [frame[:-5], frame[:len(frame) // 2], frame + frame, frame + b"\0",
               b"\x28\xb5\x2f\xfd" + os.urandom(200), os.urandom(300), b""]
    for blob in damaged:
        with pytest.raises(BadCompressedData) as err:
            decompress(ZSTD, blob, len(data))
        assert err.value.code == "BAD_COMPRESSED_DATA"
        assert isinstance(err.value, CompressionError) and isinstance(err.value, FludError)
    with pytest.raises(BadCompressedData):
        decompress(None, b"abc", 4)


def test_a_frame_never_makes_more_than_the_recorded_size():
    bomb = compress(bytes(256 * 1024 * 1024))   # 256 MiB of zeros in a few kB
    assert len(bomb) < 64 * 1024
    with pytest.raises(BadCompressedData):
        decompress(ZSTD, bomb, 1000)


def test_an_unknown_method_is_refused_by_name():
    with pytest.raises(UnknownCompression) as err:
        decompress("brotli", b"whatever", 8)
    assert err.value.code == "UNKNOWN_COMPRESSION"
    assert "'brotli'" in str(err.value) and "newer flud" in str(err.value)
    with pytest.raises(UnknownCompression):
        check_method("ZSTD")
    check_method(None)
    check_method(ZSTD)


def test_a_node_never_imports_compression():
    """A node stores shares and never sees a plaintext: what it imports (the
    node's modules and the CLI's parser, as `flud node run`) leaves zstd out."""
    code = """
import sys
from flud.lean import defer_unused_imports
defer_unused_imports()
from twisted.internet import reactor
import flud.node.process, flud.node.service, flud.storage.disk, flud.memory, flud.workers
from flud.cli.main import build_parser
from flud.cli.node import node_config
node_config(build_parser().parse_args(["node", "run", "--home", "h", "--join", ":1"]))
print(sorted(m for m in sys.modules if "zstd" in m or m.startswith("compression")
             or m in ("flud.compression", "flud.client.repository.small_contents")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# --- a large file's segment: planned, then compressed in its own buffer


def test_a_segment_is_compressed_in_place_to_exactly_what_its_plan_said():
    data = text(700_000)  # several SEGMENT_PIECEs and a short last one
    method, stored = plan_segment(data)
    assert method == ZSTD and stored < len(data) // 2
    buffer = bytearray(data) + b"tail that is not the segment's"
    assert compression.compress_in_place(buffer, len(data)) == stored
    # the same bytes as compressing it whole: the output is deterministic
    assert bytes(buffer[:stored]) == compress(data)
    assert buffer[len(data):] == b"tail that is not the segment's"  # nothing past it touched
    assert decompress(ZSTD, bytes(buffer[:stored]), len(data)) == data
    # and again, after a frame abandoned half way on the same thread
    assert compression.compress_in_place(bytearray(os.urandom(300_000)), 300_000) is None
    again = bytearray(data)
    assert compression.compress_in_place(again, len(data)) == stored
    assert bytes(again[:stored]) == bytes(buffer[:stored])


def test_a_segment_that_does_not_compress_is_planned_as_it_is():
    noise = os.urandom(1 << 20)
    assert plan_segment(noise) == (None, len(noise))
    assert plan_segment(b"") == (None, 0)
    # noise first: the frame would overwrite bytes not read yet, so it is not
    # compressed in place even though its second half compresses
    mixed = os.urandom(300_000) + text(700_000)
    assert plan_segment(mixed) == (None, len(mixed))
    buffer = bytearray(mixed)
    assert compression.compress_in_place(buffer, len(mixed)) is None


def test_a_segment_that_saves_too_little_is_planned_as_it_is(monkeypatch):
    data = text(200_000)
    monkeypatch.setattr(compression, "sample_incompressible", lambda _: False)
    monkeypatch.setattr(compression, "MIN_SAVED_FRACTION", 1)  # must save all of it
    assert plan_segment(data) == (None, len(data))


def test_decompress_pieces_makes_the_recorded_size_from_pieces_or_refuses():
    data = text(500_000)
    frame = compress(data)
    pieces = [frame[i:i + 1000] for i in range(0, len(frame), 1000)]
    assert b"".join(compression.decompress_pieces(ZSTD, pieces, len(data))) == data
    for bad_pieces, size in [(pieces, len(data) - 1), (pieces, len(data) + 1),
                             (pieces + [b"x"], len(data)), (pieces[:-1], len(data)),
                             ([bytes(len(frame))], len(data)), ([frame, frame], len(data))]:
        with pytest.raises(BadCompressedData):
            list(compression.decompress_pieces(ZSTD, bad_pieces, size))
    with pytest.raises(UnknownCompression):
        list(compression.decompress_pieces("brotli", pieces, len(data)))
