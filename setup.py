"""The compiled parts of flud: the GF(2^8) parity kernel (flud/_gf256.c) and
the content-defined chunker's rolling hash (flud/_cdc.c).

Optional: where they cannot be built, flud codes parity with zfec's own
encoder (the same bytes, ~10x slower) and cuts large files at fixed sizes
(flud/chunker.py: no dedup of shifted data)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("flud._gf256", ["flud/_gf256.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11"]),
                   Extension("flud._cdc", ["flud/_cdc.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11"])])
