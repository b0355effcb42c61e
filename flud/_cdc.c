/* Content-defined chunking: the cut points of a gear rolling hash.
 *
 *     h = (h << 1) + gear[byte]
 *
 * Bit j of h depends on the last j+1 bytes only, so a cut is made where the
 * TOP bits of h are zero (they depend on the last 64 bytes). As in FastCDC,
 * nothing is hashed in a chunk's first `min` bytes (no cut can fall there),
 * a chunk shorter than `normal` may need more zero bits (mask_small) than
 * one past it (mask_large: flud/chunker.py sets normal = min, one mask),
 * and a chunk is cut at `max` whatever its hash.
 *
 * scan() works on a stream: it carries (bytes already in the chunk, hash)
 * from one buffer to the next, so a file is read piece by piece into one
 * buffer and no chunk is ever held whole. The GIL is released while it
 * scans.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *cdc_scan(PyObject *self, PyObject *args)
{
    Py_buffer data, gear;
    unsigned long long pos, hash, min, normal, max, mask_small, mask_large;
    if (!PyArg_ParseTuple(args, "y*y*KKKKKKK", &data, &gear, &pos, &hash, &min, &normal,
                          &max, &mask_small, &mask_large))
        return NULL;
    if (gear.len != 256 * 8) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&gear);
        PyErr_SetString(PyExc_ValueError, "the gear table must be 256 64-bit words");
        return NULL;
    }
    uint64_t table[256];
    memcpy(table, gear.buf, sizeof table);
    const uint8_t *p = (const uint8_t *)data.buf;
    Py_ssize_t n = data.len, i = 0;
    uint64_t h = hash, at = pos;
    int cut = 0;
    Py_BEGIN_ALLOW_THREADS
    if (at < min) {                     /* no cut before min: skip unhashed */
        uint64_t skip = min - at;
        if ((uint64_t)n < skip)
            skip = (uint64_t)n;
        i = (Py_ssize_t)skip;
        at += skip;
        h = 0;
    }
    for (; i < n && at < normal && at < max; i++, at++) {
        h = (h << 1) + table[p[i]];
        if (!(h & mask_small)) {
            i++, at++, cut = 1;
            break;
        }
    }
    if (!cut)
        for (; i < n && at < max; i++, at++) {
            h = (h << 1) + table[p[i]];
            if (!(h & mask_large)) {
                i++, at++, cut = 1;
                break;
            }
        }
    if (!cut && at >= max)
        cut = 1;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&gear);
    return Py_BuildValue("nOK", i, cut ? Py_True : Py_False, (unsigned long long)h);
}

static PyMethodDef methods[] = {
    {"scan", cdc_scan, METH_VARARGS,
     "scan(data, gear, pos, hash, min, normal, max, mask_small, mask_large) -> "
     "(bytes consumed, cut?, hash): the next cut point of a chunk already `pos` bytes long"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cdc", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cdc(void)
{
    return PyModule_Create(&module);
}
