"""P-256 keys, ECDSA over SHA-256 and SHA-256 itself, from OpenSSL's libcrypto
through ctypes: what flud.keys needs for node identities. And AES-256-CTR in
place, for the content of backed-up files (flud.crypto).

Why not pycryptodome: every flud process has libcrypto mapped already (the
stdlib ssl module links it for TLS), so this adds only ctypes' small
wrappers, while pycryptodome's ECC, DSS and ASN.1 modules made an idle node
1.6-1.9 MB larger. It is faster too, measured here: a HELLO signature takes
0.03 ms (pycryptodome 0.23 ms), a verification 0.21 ms (0.40 ms; most of it
is OpenSSL 3 decoding the SubjectPublicKeyInfo). AES-256-CTR runs at 8 GB/s
on one core here, pycryptodome's at 4 GB/s.

OpenSSL 3 API only. Every function called has its argument and result types
declared (pointers as c_void_p: an undeclared result is a C int, which
truncates 64-bit pointers), and everything allocated is freed here, private
keys by the P256Key that holds them.
"""
import ctypes
import threading
import weakref
from ctypes import POINTER, byref, c_char_p, c_int, c_long, c_size_t, c_uint, c_ulong, c_void_p

__all__ = ["LibcryptoError", "LibcryptoUnavailable", "UnsupportedKey", "P256Key", "verify", "sha256",
           "aes256_ctr_in_place"]


class LibcryptoError(Exception):
    """An OpenSSL call failed where it should not."""


class LibcryptoUnavailable(LibcryptoError):
    """No OpenSSL 3 libcrypto could be loaded."""


class UnsupportedKey(LibcryptoError, ValueError):
    """Not a readable P-256 EC key."""


EVP_PKEY_EC = 408
P256_GROUP = b"prime256v1"  # OpenSSL's name for P-256 (secp256r1)
COORDINATE_BYTES = 32
_MIN_VERSION = 0x30000000
_GROUP_NAME_SIZE = 64

_PROTOTYPES = {  # name: (result type, argument types...)
    "OpenSSL_version_num": (c_ulong,),
    "ERR_clear_error": (None,),
    "EVP_sha256": (c_void_p,),
    "EVP_Digest": (c_int, c_char_p, c_size_t, c_char_p, POINTER(c_uint), c_void_p, c_void_p),
    "EVP_PKEY_CTX_new_from_name": (c_void_p, c_void_p, c_char_p, c_char_p),
    "EVP_PKEY_CTX_new_from_pkey": (c_void_p, c_void_p, c_void_p, c_char_p),
    "EVP_PKEY_CTX_free": (None, c_void_p),
    "EVP_PKEY_keygen_init": (c_int, c_void_p),
    "EVP_PKEY_CTX_set_group_name": (c_int, c_void_p, c_char_p),
    "EVP_PKEY_generate": (c_int, c_void_p, POINTER(c_void_p)),
    "EVP_PKEY_pairwise_check": (c_int, c_void_p),
    "EVP_PKEY_free": (None, c_void_p),
    "EVP_PKEY_up_ref": (c_int, c_void_p),
    "EVP_PKEY_get_base_id": (c_int, c_void_p),
    "EVP_PKEY_get_group_name": (c_int, c_void_p, c_char_p, c_size_t, POINTER(c_size_t)),
    "EVP_PKEY_get_bn_param": (c_int, c_void_p, c_char_p, POINTER(c_void_p)),
    "BN_bn2binpad": (c_int, c_void_p, c_char_p, c_int),
    "BN_clear_free": (None, c_void_p),
    "d2i_AutoPrivateKey": (c_void_p, c_void_p, POINTER(c_void_p), c_long),
    "d2i_PUBKEY": (c_void_p, c_void_p, POINTER(c_void_p), c_long),
    "EVP_MD_CTX_new": (c_void_p,),
    "EVP_MD_CTX_free": (None, c_void_p),
    "EVP_DigestSignInit": (c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p),
    "EVP_DigestSign": (c_int, c_void_p, c_char_p, POINTER(c_size_t), c_char_p, c_size_t),
    "EVP_DigestVerifyInit": (c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p),
    "EVP_DigestVerify": (c_int, c_void_p, c_char_p, c_size_t, c_char_p, c_size_t),
    "EVP_aes_256_ctr": (c_void_p,),
    "EVP_CIPHER_fetch": (c_void_p, c_void_p, c_char_p, c_char_p),
    "EVP_CIPHER_CTX_new": (c_void_p,),
    "EVP_CIPHER_CTX_free": (None, c_void_p),
    "EVP_EncryptInit_ex": (c_int, c_void_p, c_void_p, c_void_p, c_char_p, c_char_p),
    "EVP_EncryptUpdate": (c_int, c_void_p, c_void_p, POINTER(c_int), c_void_p, c_int),
    "EVP_EncryptFinal_ex": (c_int, c_void_p, c_void_p, POINTER(c_int)),
    "EVP_DecryptInit_ex": (c_int, c_void_p, c_void_p, c_void_p, c_char_p, c_char_p),
    "EVP_DecryptUpdate": (c_int, c_void_p, c_void_p, POINTER(c_int), c_void_p, c_int),
    "EVP_DecryptFinal_ex": (c_int, c_void_p, c_void_p, POINTER(c_int)),
    "EVP_CIPHER_CTX_ctrl": (c_int, c_void_p, c_int, c_int, c_void_p),
}
_CTRL_AEAD_GET_TAG = 0x10
_CTRL_AEAD_SET_TAG = 0x11
SIV_TAG = 16
# EVP_EncryptUpdate takes an int length: larger buffers go in pieces of this.
_CTR_PIECE = 1 << 30

_LIB = []  # the declared library, once loaded


def _libcrypto_path() -> str:
    """The libcrypto the ssl module runs on, so no second copy gets mapped."""
    import _ssl  # noqa: F401 - maps libcrypto (already done in any process using TLS)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if "libcrypto.so" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass
    import ctypes.util  # only here: it imports subprocess and runs ldconfig
    path = ctypes.util.find_library("crypto")
    if not path:
        raise LibcryptoUnavailable("OpenSSL's libcrypto was not found")
    return path


def _lib():
    if _LIB:
        return _LIB[0]
    path = _libcrypto_path()
    try:
        lib = ctypes.CDLL(path)
        for name, (result, *arguments) in _PROTOTYPES.items():
            function = getattr(lib, name)
            function.restype = result
            function.argtypes = arguments
    except (OSError, AttributeError) as exc:
        raise LibcryptoUnavailable(f"{path} is not an OpenSSL 3 libcrypto: {exc}") from None
    if lib.OpenSSL_version_num() < _MIN_VERSION:
        raise LibcryptoUnavailable(f"{path} is older than OpenSSL 3.0")
    _LIB.append(lib)
    return lib


def _failed(lib, exception: Exception) -> Exception:
    """exception, with OpenSSL's error queue (per thread) cleared first: left
    there, its entries would show up in the ssl module's next error report."""
    lib.ERR_clear_error()
    return exception


def sha256(data: bytes) -> bytes:
    lib = _lib()
    data = bytes(data)
    digest = ctypes.create_string_buffer(32)
    if lib.EVP_Digest(data, len(data), digest, None, lib.EVP_sha256(), None) != 1:
        raise _failed(lib, LibcryptoError("EVP_Digest failed"))
    return digest.raw


_CTR_CIPHER = []


def _ctr_cipher(lib):
    """AES-256-CTR fetched from the provider once: OpenSSL 3 looks a legacy
    EVP_aes_256_ctr() up again at every init (~15 us, profiled: a restore
    decrypts one small file per call)."""
    if not _CTR_CIPHER:
        fetched = lib.EVP_CIPHER_fetch(None, b"AES-256-CTR", None)
        _CTR_CIPHER.append(fetched or lib.EVP_aes_256_ctr())
    return _CTR_CIPHER[0]


_SIV_CIPHER = []


def siv_available() -> bool:
    """Whether this libcrypto has AES-256-SIV (OpenSSL 3's default provider)."""
    try:
        return _siv_cipher(_lib()) is not None
    except LibcryptoUnavailable:
        return False


def _siv_cipher(lib):
    if not _SIV_CIPHER:
        _SIV_CIPHER.append(lib.EVP_CIPHER_fetch(None, b"AES-256-SIV", None) or None)
    return _SIV_CIPHER[0]


def aes256_siv(key: bytes, data: bytes, associated: bytes, tag: bytes = None):
    """RFC 5297 AES-SIV with a 64-byte key over one associated-data string
    (none if empty) and `data`: sealing (tag None) gives (tag, ciphertext);
    opening (tag given) gives the plaintext, or None if it does not verify.
    OpenSSL's, not pycryptodome's: ~10x less per call on a directory record
    (its S2V runs in C, one call each way)."""
    lib = _lib()
    cipher = _siv_cipher(lib)
    if cipher is None or len(key) != 64:
        raise LibcryptoUnavailable("AES-256-SIV is not available")
    ctx = lib.EVP_CIPHER_CTX_new()
    if not ctx:
        raise _failed(lib, LibcryptoError("EVP_CIPHER_CTX_new failed"))
    written = c_int()
    sealing = tag is None
    init, update, final = ((lib.EVP_EncryptInit_ex, lib.EVP_EncryptUpdate,
                            lib.EVP_EncryptFinal_ex) if sealing else
                           (lib.EVP_DecryptInit_ex, lib.EVP_DecryptUpdate,
                            lib.EVP_DecryptFinal_ex))
    try:
        if init(ctx, cipher, None, bytes(key), None) != 1:
            raise _failed(lib, LibcryptoError("AES-SIV init failed"))
        if not sealing:
            want = ctypes.create_string_buffer(bytes(tag), SIV_TAG)
            if lib.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_AEAD_SET_TAG, SIV_TAG, want) != 1:
                raise _failed(lib, LibcryptoError("AES-SIV set tag failed"))
        if associated and update(ctx, None, byref(written), bytes(associated),
                                 len(associated)) != 1:
            raise _failed(lib, LibcryptoError("AES-SIV associated data failed"))
        data = bytes(data)
        out = ctypes.create_string_buffer(max(1, len(data)))
        if update(ctx, out, byref(written), data, len(data)) != 1:
            if sealing:
                raise _failed(lib, LibcryptoError("AES-SIV update failed"))
            lib.ERR_clear_error()
            return None
        end = ctypes.create_string_buffer(16)
        if final(ctx, end, byref(written)) != 1:
            if sealing:
                raise _failed(lib, LibcryptoError("AES-SIV final failed"))
            lib.ERR_clear_error()
            return None
        if not sealing:
            return out.raw[:len(data)]
        got = ctypes.create_string_buffer(SIV_TAG)
        if lib.EVP_CIPHER_CTX_ctrl(ctx, _CTRL_AEAD_GET_TAG, SIV_TAG, got) != 1:
            raise _failed(lib, LibcryptoError("AES-SIV get tag failed"))
        return got.raw, out.raw[:len(data)]
    finally:
        lib.EVP_CIPHER_CTX_free(ctx)


def aes256_ctr_in_place(key: bytes, buffer, counter: int, skip: int = 0) -> None:
    """AES-256-CTR over the writable `buffer` itself. The 128-bit big-endian
    counter starts at `counter`, and the first `skip` bytes of keystream are
    passed over (a range starting inside a block). Releases the GIL."""
    lib = _lib()
    view = memoryview(buffer).cast("B")
    if view.readonly:
        raise ValueError("aes256_ctr_in_place needs a writable buffer")
    if len(key) != 32 or not 0 <= skip < 16 or not 0 <= counter < 1 << 128:
        raise ValueError("a 32-byte key, a 128-bit counter and a skip under 16")
    ctx = lib.EVP_CIPHER_CTX_new()
    if not ctx:
        raise _failed(lib, LibcryptoError("EVP_CIPHER_CTX_new failed"))
    written = c_int()
    try:
        if lib.EVP_EncryptInit_ex(ctx, _ctr_cipher(lib), None, bytes(key),
                                  counter.to_bytes(16, "big")) != 1:
            raise _failed(lib, LibcryptoError("EVP_EncryptInit_ex failed"))
        if skip:
            scratch = ctypes.create_string_buffer(skip)
            if lib.EVP_EncryptUpdate(ctx, scratch, byref(written), scratch, skip) != 1:
                raise _failed(lib, LibcryptoError("EVP_EncryptUpdate failed"))
        for start in range(0, len(view), _CTR_PIECE):
            piece = view[start:start + _CTR_PIECE]
            # Its first byte's address: a ctypes array type per length would be
            # made anew for each file's size (~9 us a call, profiled)
            target = ctypes.c_char.from_buffer(piece)
            address = ctypes.addressof(target)
            try:
                if lib.EVP_EncryptUpdate(ctx, address, byref(written), address,
                                         len(piece)) != 1:
                    raise _failed(lib, LibcryptoError("EVP_EncryptUpdate failed"))
            finally:
                del target  # lets go of the buffer's export
            piece.release()
    finally:
        lib.EVP_CIPHER_CTX_free(ctx)


def _decode(lib, decoder, der: bytes) -> int:
    """An EVP_PKEY from DER that must be read whole; UnsupportedKey otherwise."""
    if isinstance(der, (bytearray, memoryview)):
        der = bytes(der)
    elif not isinstance(der, bytes):
        raise UnsupportedKey(f"a key is bytes, not {type(der).__name__}")
    buffer = ctypes.create_string_buffer(der, len(der))
    start = ctypes.addressof(buffer)
    cursor = c_void_p(start)
    try:
        pkey = decoder(None, byref(cursor), len(der))
    finally:
        ctypes.memset(buffer, 0, len(der))  # may hold a private key
    if not pkey:
        raise _failed(lib, UnsupportedKey("not a key OpenSSL can read"))
    lib.ERR_clear_error()  # decoders tried before the one that worked may leave errors
    try:
        if cursor.value - start != len(der):
            raise UnsupportedKey("trailing bytes after the key")
        _require_p256(lib, pkey)
    except UnsupportedKey:
        lib.EVP_PKEY_free(pkey)
        raise
    return pkey


def _require_p256(lib, pkey: int) -> None:
    if lib.EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC:
        raise _failed(lib, UnsupportedKey("not an EC key"))
    name = ctypes.create_string_buffer(_GROUP_NAME_SIZE)
    if lib.EVP_PKEY_get_group_name(pkey, name, _GROUP_NAME_SIZE, None) != 1:
        raise _failed(lib, UnsupportedKey("an EC key without a named curve"))
    if name.value != P256_GROUP:
        raise UnsupportedKey(f"an EC key on {name.value.decode('ascii', 'replace')}, not P-256")


class P256Key:
    """A P-256 private key (an EVP_PKEY, freed with this object)."""

    __slots__ = ("_pkey", "__weakref__")

    def __init__(self, pkey: int):
        """Takes ownership of pkey, an EVP_PKEY* already checked to be P-256."""
        self._pkey = pkey
        weakref.finalize(self, _lib().EVP_PKEY_free, pkey)

    @classmethod
    def generate(cls) -> "P256Key":
        lib = _lib()
        ctx = lib.EVP_PKEY_CTX_new_from_name(None, b"EC", None)
        if not ctx:
            raise _failed(lib, LibcryptoError("EVP_PKEY_CTX_new_from_name(EC) failed"))
        pkey = c_void_p()
        try:
            if (lib.EVP_PKEY_keygen_init(ctx) != 1
                    or lib.EVP_PKEY_CTX_set_group_name(ctx, b"P-256") != 1
                    or lib.EVP_PKEY_generate(ctx, byref(pkey)) != 1):
                raise _failed(lib, LibcryptoError("P-256 key generation failed"))
        finally:
            lib.EVP_PKEY_CTX_free(ctx)
        return cls(pkey.value)

    @classmethod
    def from_der(cls, der: bytes) -> "P256Key":
        """From PKCS#8 or SEC1 DER; UnsupportedKey unless it is a P-256 key whose
        public point is the private scalar's (OpenSSL does not check that)."""
        lib = _lib()
        key = cls(_decode(lib, lib.d2i_AutoPrivateKey, der))
        ctx = lib.EVP_PKEY_CTX_new_from_pkey(None, key._pkey, None)
        if not ctx:
            raise _failed(lib, LibcryptoError("EVP_PKEY_CTX_new_from_pkey failed"))
        try:
            if lib.EVP_PKEY_pairwise_check(ctx) != 1:
                raise _failed(lib, UnsupportedKey("its public key is not its private key's"))
        finally:
            lib.EVP_PKEY_CTX_free(ctx)
        return key

    def _bn_param(self, lib, name: bytes) -> bytes:
        bn = c_void_p()
        if lib.EVP_PKEY_get_bn_param(self._pkey, name, byref(bn)) != 1:
            raise _failed(lib, LibcryptoError(f"no {name.decode()} in a P-256 key"))
        try:
            out = ctypes.create_string_buffer(COORDINATE_BYTES)
            if lib.BN_bn2binpad(bn, out, COORDINATE_BYTES) != COORDINATE_BYTES:
                raise _failed(lib, LibcryptoError(f"{name.decode()} does not fit 32 bytes"))
            return out.raw
        finally:
            lib.BN_clear_free(bn)

    def public_xy(self) -> tuple:
        """(x, y) of the public point, 32 bytes each (whatever form it was read in)."""
        lib = _lib()
        return self._bn_param(lib, b"qx"), self._bn_param(lib, b"qy")

    def private_d(self) -> bytes:
        """The private scalar, 32 bytes."""
        return self._bn_param(_lib(), b"priv")

    def sign(self, data: bytes) -> bytes:
        """ECDSA over SHA-256 (random k), DER-encoded."""
        lib = _lib()
        data = bytes(data)
        ctx = lib.EVP_MD_CTX_new()
        if not ctx:
            raise _failed(lib, LibcryptoError("EVP_MD_CTX_new failed"))
        try:
            size = c_size_t()
            if (lib.EVP_DigestSignInit(ctx, None, lib.EVP_sha256(), None, self._pkey) != 1
                    or lib.EVP_DigestSign(ctx, None, byref(size), None, 0) != 1):
                raise _failed(lib, LibcryptoError("ECDSA signing could not start"))
            signature = ctypes.create_string_buffer(size.value)
            if lib.EVP_DigestSign(ctx, signature, byref(size), data, len(data)) != 1:
                raise _failed(lib, LibcryptoError("EVP_DigestSign failed"))
            return signature.raw[:size.value]
        finally:
            lib.EVP_MD_CTX_free(ctx)


# Public keys decoded lately, by their DER: OpenSSL 3's decoder costs ~0.4 ms
# a key, more than the verify itself, and a node checks the same peers'
# keys again and again (HELLO, their signed records). The cache holds one
# reference of each; a verify takes its own (up_ref) and frees it as usual.
PUBLIC_KEY_CACHE = 512
_public_keys = {}
_public_keys_lock = threading.Lock()


def _public_key(lib, spki_der) -> int:
    key = bytes(spki_der) if isinstance(spki_der, (bytearray, memoryview)) else spki_der
    with _public_keys_lock:
        pkey = _public_keys.get(key) if isinstance(key, bytes) else None
        if pkey is not None and lib.EVP_PKEY_up_ref(pkey) == 1:
            return pkey
    pkey = _decode(lib, lib.d2i_PUBKEY, key)
    with _public_keys_lock:
        if key not in _public_keys and lib.EVP_PKEY_up_ref(pkey) == 1:
            _public_keys[key] = pkey
            if len(_public_keys) > PUBLIC_KEY_CACHE:
                lib.EVP_PKEY_free(_public_keys.pop(next(iter(_public_keys))))
    return pkey


def verify(spki_der: bytes, data: bytes, signature: bytes) -> bool:
    """True only for a valid DER ECDSA-SHA256 signature by the P-256 key in
    spki_der (SubjectPublicKeyInfo); anything malformed is False."""
    lib = _lib()
    try:
        data, signature = bytes(data), bytes(signature)
        pkey = _public_key(lib, spki_der)
    except (UnsupportedKey, TypeError):
        return False
    ctx = lib.EVP_MD_CTX_new()
    try:
        valid = bool(ctx) and (
            lib.EVP_DigestVerifyInit(ctx, None, lib.EVP_sha256(), None, pkey) == 1
            and lib.EVP_DigestVerify(ctx, signature, len(signature), data, len(data)) == 1)
    finally:
        lib.EVP_MD_CTX_free(ctx)
        lib.EVP_PKEY_free(pkey)
    if not valid:
        lib.ERR_clear_error()
    return valid
