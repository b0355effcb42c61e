"""flud's parity kernel against zfec's own encoder: the same bytes."""
import random

import pytest
import zfec

from flud import gf256
from flud.coding import SegmentCoder

needs_kernel = pytest.mark.skipif(not gf256.available(), reason="kernel not built")


def _blocks(rng, k, length):
    return [rng.randbytes(length) for _ in range(k)]


@needs_kernel
@pytest.mark.parametrize("k, n", [(4, 8), (3, 10), (1, 2), (7, 9), (16, 32)])
@pytest.mark.parametrize("length", [1, 31, 32, 33, 1000, 8192, 8192 + 45, 3 * 8192 + 32])
@pytest.mark.parametrize("vector", [True, False])
def test_parity_is_zfecs(k, n, length, vector):
    rng = random.Random(f"{k}-{n}-{length}")
    blocks = _blocks(rng, k, length)
    expected = zfec.Encoder(k, n).encode(blocks, list(range(k, n)))
    got = gf256.ParityCoder(k, n, vector=vector).encode(blocks)
    assert [bytes(g) for g in got] == [bytes(e) for e in expected]


@needs_kernel
def test_encode_into_overwrites_what_the_outputs_held():
    rng = random.Random(1)
    blocks = _blocks(rng, 4, 4096)
    coder = gf256.ParityCoder(4, 8)
    outputs = [bytearray(rng.randbytes(4096)) for _ in range(4)]
    coder.encode_into([memoryview(b) for b in blocks], outputs)
    assert [bytes(o) for o in outputs] == [bytes(p) for p in coder.encode(blocks)]


def test_segment_coder_shares_decode_with_zfec():
    rng = random.Random(2)
    data = rng.randbytes(2 * 1024 * 1024 - 7)
    coder = SegmentCoder(4, 8)
    block_length, shares = coder.encode(data)
    assert coder.decode({i: shares[i] for i in (4, 5, 6, 7)}, len(data)) == data
    assert coder.decode({i: shares[i] for i in (0, 5, 2, 7)}, len(data)) == data


@pytest.mark.parametrize("inputs, outputs, message", [
    ([b"ab", b"abc"], [bytearray(2)], "every block must have 2 bytes"),
    ([b"ab", b"ab"], [bytearray(3)], "every block must have 2 bytes"),
    ([b"ab", b"ab"], [b"xy"], "writable"),
    ([], [bytearray(2)], "need 1..256 inputs"),
])
@needs_kernel
def test_bad_blocks_are_refused(inputs, outputs, message):
    coder = gf256.ParityCoder(2, 3)
    with pytest.raises((ValueError, TypeError, BufferError), match=message):
        gf256._gf256.addmul(coder.tables, inputs, outputs)


@needs_kernel
def test_table_size_must_match_the_blocks():
    with pytest.raises(ValueError, match="need 64 table bytes"):
        gf256._gf256.addmul(b"\0" * 32, [b"a", b"b"], [bytearray(1)])


def test_the_kernel_is_built_where_there_is_a_compiler():
    """pip builds flud/_gf256.c where it can (setup.py, optional): a
    machine with a C compiler that ends up without it lost the fast parity
    silently."""
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: zfec codes the parity")
    assert gf256.available(), "flud/_gf256.c was not built: run `make` (pip install -e .)"
    assert gf256.kernel() in ("avx2", "scalar")
