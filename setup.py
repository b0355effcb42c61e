"""The one compiled part of flud: the GF(2^8) parity kernel (flud/_gf256.c).

Optional: where it cannot be built, flud codes parity with zfec's own encoder
(the same bytes, ~10x slower)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("flud._gf256", ["flud/_gf256.c"], optional=True,
                             extra_compile_args=["-O3", "-std=c11"])])
