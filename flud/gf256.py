"""zfec's parity, coded by flud's vector kernel (flud/_gf256.c).

zfec codes parity with one table lookup per byte and coefficient (~450 MB/s
of input at 4-of-8 on one core here, the largest single CPU cost of a
backup). Its parity is an inner product over GF(2^8) with a fixed k x (n-k)
coefficient matrix, so the same bytes come out of AVX2 byte shuffles at
several GB/s. The coefficients are not rebuilt here: they are read off
zfec's own encoder (each coefficient's products with all 256 byte values),
so the parity is zfec's, byte for byte, whatever its field or matrix, and
zfec still decodes everything. Where the kernel was not built, zfec encodes.
"""
from __future__ import annotations

try:
    from flud import _gf256
except ImportError:  # built without a C compiler: zfec codes the parity
    _gf256 = None


def available() -> bool:
    return _gf256 is not None


def kernel() -> str:
    """'avx2', 'scalar' (the kernel without vectors) or 'zfec' (no kernel)."""
    return _gf256.kernel() if _gf256 is not None else "zfec"


class ParityCoder:
    """The n-k parity blocks of k blocks, as zfec.Encoder(k, n) makes them."""

    def __init__(self, k: int, n: int, vector: bool = True):
        if _gf256 is None:
            raise RuntimeError("flud's GF(2^8) kernel was not built (flud/_gf256.c)")
        self.k, self.n, self.vector = k, n, vector
        self.tables = _nibble_tables(_coefficient_products(k, n), k, n)

    def encode_into(self, blocks, outputs) -> None:
        """Writes parity block r into outputs[r] (writable, each len(blocks[0]))."""
        _gf256.addmul(self.tables, blocks, outputs, self.vector)

    def encode(self, blocks) -> list:
        outputs = [bytearray(len(blocks[0])) for _ in range(self.n - self.k)]
        self.encode_into(blocks, outputs)
        return outputs

    def encode_rows(self, blocks, rows) -> list:
        """Only the parity blocks `rows` (0 is the first parity block), as
        repair needs: each row's coefficients are a slice of the tables."""
        per_row = self.k * 32
        tables = b"".join(self.tables[r * per_row:(r + 1) * per_row] for r in rows)
        outputs = [bytearray(len(blocks[0])) for _ in rows]
        _gf256.addmul(tables, blocks, outputs, self.vector)
        return outputs


def _coefficient_products(k: int, n: int) -> list:
    """products[r][c][x] = coefficient (r, c) times byte x, from zfec: block c
    holds every byte value and the others zeros, so parity r is that row."""
    import zfec

    encoder = zfec.Encoder(k, n)
    every_byte = bytes(range(256))
    zeros = bytes(256)
    per_input = []
    for c in range(k):
        blocks = [every_byte if i == c else zeros for i in range(k)]
        per_input.append(encoder.encode(blocks, list(range(k, n))))
    return [[bytes(per_input[c][r]) for c in range(k)] for r in range(n - k)]


def _nibble_tables(products: list, k: int, n: int) -> bytes:
    """Per coefficient: its products with the 16 low nibbles, then with the 16
    high ones (c*x = lo[x & 15] ^ hi[x >> 4], since c*(a^b) = c*a ^ c*b)."""
    out = bytearray()
    for r in range(n - k):
        for c in range(k):
            row = products[r][c]
            out += bytes(row[x] for x in range(16))
            out += bytes(row[x << 4] for x in range(16))
    return bytes(out)
