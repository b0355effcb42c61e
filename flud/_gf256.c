/* GF(2^8) multiply-accumulate of k input blocks into m output blocks:
 *
 *     out[r][x] = XOR over c of  coef[r][c] * in[c][x]
 *
 * the inner product an erasure encoder computes for its parity. The field's
 * polynomial is not known here: every coefficient comes as two 16-byte
 * tables, its products with the low nibbles (0..15) and with the high ones
 * (0x00, 0x10, ..., 0xf0). Multiplication by a constant is linear over XOR,
 * so c*x = lo[x & 15] ^ hi[x >> 4]: one table lookup per nibble, 32 of them
 * at once with AVX2's byte shuffle. flud/gf256.py builds the tables from
 * zfec's own encoder, so the parity is zfec's, byte for byte.
 *
 * The GIL is released while the blocks are coded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#define MAX_BLOCKS 256
/* Columns coded per pass: the k input tiles stay in L1/L2 while every
 * output row is made from them. */
#define TILE 8192

static void code_scalar(const uint8_t *tables, int k, int m, const uint8_t **in,
                        uint8_t **out, size_t start, size_t end)
{
    for (int r = 0; r < m; r++) {
        uint8_t *o = out[r];
        for (int c = 0; c < k; c++) {
            const uint8_t *lo = tables + (size_t)(r * k + c) * 32, *hi = lo + 16;
            const uint8_t *s = in[c];
            if (c == 0)
                for (size_t x = start; x < end; x++)
                    o[x] = lo[s[x] & 15] ^ hi[s[x] >> 4];
            else
                for (size_t x = start; x < end; x++)
                    o[x] ^= lo[s[x] & 15] ^ hi[s[x] >> 4];
        }
    }
}

#ifdef HAVE_X86
__attribute__((target("avx2")))
static void code_avx2(const uint8_t *tables, int k, int m, const uint8_t **in,
                      uint8_t **out, size_t start, size_t end)
{
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < m; r++) {
        uint8_t *o = out[r];
        for (int c = 0; c < k; c++) {
            const uint8_t *t = tables + (size_t)(r * k + c) * 32;
            const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
            const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(t + 16)));
            const uint8_t *s = in[c];
            for (size_t x = start; x < end; x += 32) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(s + x));
                __m256i p = _mm256_xor_si256(
                    _mm256_shuffle_epi8(lo, _mm256_and_si256(v, nibble)),
                    _mm256_shuffle_epi8(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble)));
                if (c)
                    p = _mm256_xor_si256(p, _mm256_loadu_si256((const __m256i *)(o + x)));
                _mm256_storeu_si256((__m256i *)(o + x), p);
            }
        }
    }
}
#endif

static int use_avx2(void)
{
#ifdef HAVE_X86
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

static void code(const uint8_t *tables, int k, int m, const uint8_t **in, uint8_t **out,
                 size_t length, int vector)
{
    for (size_t start = 0; start < length; start += TILE) {
        size_t end = start + TILE < length ? start + TILE : length;
        size_t split = start;
#ifdef HAVE_X86
        if (vector) {
            split = start + ((end - start) & ~(size_t)31);
            code_avx2(tables, k, m, in, out, start, split);
        }
#endif
        if (split < end)
            code_scalar(tables, k, m, in, out, split, end);
    }
}

static void release_all(Py_buffer *views, int count)
{
    for (int i = 0; i < count; i++)
        PyBuffer_Release(&views[i]);
}

/* addmul(tables, inputs, outputs, vector=True) */
static PyObject *gf_addmul(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"tables", "inputs", "outputs", "vector", NULL};
    Py_buffer tables;
    PyObject *inputs, *outputs;
    int vector = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*OO|p", keywords, &tables, &inputs,
                                     &outputs, &vector))
        return NULL;
    PyObject *in_seq = NULL, *out_seq = NULL, *result = NULL;
    Py_buffer views[2 * MAX_BLOCKS];
    int held = 0;
    in_seq = PySequence_Fast(inputs, "inputs must be a sequence of buffers");
    out_seq = in_seq ? PySequence_Fast(outputs, "outputs must be a sequence of buffers") : NULL;
    if (!out_seq)
        goto done;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(in_seq), m = PySequence_Fast_GET_SIZE(out_seq);
    if (k < 1 || m < 1 || k > MAX_BLOCKS || m > MAX_BLOCKS) {
        PyErr_Format(PyExc_ValueError, "need 1..%d inputs and outputs, got %zd and %zd",
                     MAX_BLOCKS, k, m);
        goto done;
    }
    if (tables.len != k * m * 32) {
        PyErr_Format(PyExc_ValueError, "%zd x %zd coefficients need %zd table bytes, got %zd",
                     m, k, k * m * 32, tables.len);
        goto done;
    }
    const uint8_t *in[MAX_BLOCKS];
    uint8_t *out[MAX_BLOCKS];
    Py_ssize_t length = -1;
    for (Py_ssize_t i = 0; i < k + m; i++) {
        PyObject *obj = i < k ? PySequence_Fast_GET_ITEM(in_seq, i)
                              : PySequence_Fast_GET_ITEM(out_seq, i - k);
        if (PyObject_GetBuffer(obj, &views[held], i < k ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0)
            goto done;
        held++;
        if (length < 0)
            length = views[i].len;
        if (views[i].len != length) {
            PyErr_Format(PyExc_ValueError, "every block must have %zd bytes; block %zd has %zd",
                         length, i, views[i].len);
            goto done;
        }
        if (i < k)
            in[i] = views[i].buf;
        else
            out[i - k] = views[i].buf;
    }
    int vec = vector && use_avx2();
    Py_BEGIN_ALLOW_THREADS
    code(tables.buf, (int)k, (int)m, in, out, (size_t)length, vec);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_all(views, held);
    Py_XDECREF(in_seq);
    Py_XDECREF(out_seq);
    PyBuffer_Release(&tables);
    return result;
}

static PyObject *gf_kernel(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(use_avx2() ? "avx2" : "scalar");
}

static PyMethodDef methods[] = {
    {"addmul", (PyCFunction)(void (*)(void))gf_addmul, METH_VARARGS | METH_KEYWORDS,
     "addmul(tables, inputs, outputs, vector=True): outputs[r] = XOR_c coef[r][c] * inputs[c]"},
    {"kernel", gf_kernel, METH_NOARGS, "The vector kernel this CPU runs: 'avx2' or 'scalar'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gf256", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gf256(void)
{
    return PyModule_Create(&module);
}
