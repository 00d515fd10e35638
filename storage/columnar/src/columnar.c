/* tierlog._columnar: v2 records walked straight into Arrow column buffers.
 *
 * The per-record loop of the Spark pipeline's decode, in C: one pass over a batch's
 * records section (already decompressed by the storage engine's codecs) appending
 * offsets, timestamps, keys, values and headers to growable buffers laid out as
 * Arrow's (int32 offsets + data + validity bitmaps), so no Python object is made per
 * record.  The rules are exactly those of ``tierlog.storage.records.rows``: every read
 * is bounded by the buffer, every field by its record, and whatever the Python walker
 * rejects raises the same ``CorruptRecordError``.  A batch is all or nothing: on an
 * error the columns are rolled back to where they were before it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *corrupt_error; /* tierlog.storage.errors.CorruptRecordError */

#define MIN_RECORD_SIZE 7

/* ---- growable byte buffers ----------------------------------------------------- */

/* A buffer grown in a ``bytearray`` that ``take`` hands to Python as it is: the columns
 * are never copied, and Arrow wraps them without a copy either. */
typedef struct {
    PyObject *owner; /* a bytearray of ``cap`` bytes, or NULL before the first byte */
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t last_len; /* the length last taken: the next chunk starts that large */
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : (b->last_len > 4096 ? b->last_len + b->last_len / 8 : 4096);
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        cap *= 2;
    }
    if (!b->owner) {
        b->owner = PyByteArray_FromStringAndSize(NULL, cap);
        if (!b->owner) return -1;
    } else if (PyByteArray_Resize(b->owner, cap) < 0) {
        return -1;
    }
    b->data = PyByteArray_AS_STRING(b->owner);
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (n == 0) return 0; /* an empty key or value: nothing to copy (and maybe no buffer) */
    if (b->len + n > b->cap && buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) { Py_CLEAR(b->owner); b->data = NULL; b->len = b->cap = 0; }

/* The bytes so far as a bytearray of exactly that length; the buffer starts empty. */
static PyObject *buf_detach(Buf *b) {
    PyObject *owner = b->owner ? b->owner : PyByteArray_FromStringAndSize(NULL, 0);
    if (!owner) return NULL;
    if (PyByteArray_Resize(owner, b->len) < 0) { Py_DECREF(owner); return NULL; }
    b->last_len = b->len;
    b->owner = NULL;
    b->data = NULL;
    b->len = b->cap = 0;
    return owner;
}

/* An Arrow validity bitmap: bit i set when slot i is not null. */
typedef struct {
    Buf bits;
    Py_ssize_t nulls;
} Validity;

static int validity_put(Validity *v, Py_ssize_t slot, int valid) {
    Py_ssize_t needed = slot / 8 + 1;
    if (needed > v->bits.len) {
        if (buf_reserve(&v->bits, needed - v->bits.len) < 0) return -1;
        memset(v->bits.data + v->bits.len, 0, (size_t)(needed - v->bits.len));
        v->bits.len = needed;
    }
    if (valid) v->bits.data[slot / 8] |= (char)(1 << (slot % 8));
    else v->nulls++;
    return 0;
}

/* Back to its first ``slots`` slots (fewer than it holds). */
static void validity_truncate(Validity *v, Py_ssize_t slots, Py_ssize_t nulls) {
    if (v->bits.len > (slots + 7) / 8) v->bits.len = (slots + 7) / 8;
    if (slots % 8 && slots / 8 < v->bits.len)
        v->bits.data[slots / 8] &= (char)((1 << (slots % 8)) - 1);
    v->nulls = nulls;
}

/* A binary (or string) column: int32 offsets (slots + 1 of them), data, validity. */
typedef struct {
    Buf offsets;
    Buf data;
    Validity validity;
    Py_ssize_t slots;
} Binary;

static int binary_init(Binary *c) {
    int32_t zero = 0;
    return buf_put(&c->offsets, &zero, sizeof zero);
}

static int binary_put(Binary *c, const char *src, Py_ssize_t n, int valid) {
    if (valid) {
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a binary column outgrew 2 GiB: flush sooner");
            return -1;
        }
        if (buf_put(&c->data, src, n) < 0) return -1;
    }
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, sizeof end) < 0) return -1;
    if (validity_put(&c->validity, c->slots, valid) < 0) return -1;
    c->slots++;
    return 0;
}

typedef struct {
    Py_ssize_t slots, nulls;
} BinaryMark;

static BinaryMark binary_mark(const Binary *c) {
    BinaryMark m = {c->slots, c->validity.nulls};
    return m;
}

static void binary_rollback(Binary *c, BinaryMark m) {
    c->slots = m.slots;
    c->offsets.len = (m.slots + 1) * (Py_ssize_t)sizeof(int32_t);
    c->data.len = ((int32_t *)c->offsets.data)[m.slots];
    validity_truncate(&c->validity, m.slots, m.nulls);
}

static void binary_free(Binary *c) {
    buf_free(&c->offsets); buf_free(&c->data); buf_free(&c->validity.bits);
    c->validity.nulls = 0; c->slots = 0;
}

/* ---- the Columns type ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int include_headers;
    Py_ssize_t rows;
    Buf offsets;          /* int64 per row */
    Buf timestamps_ms;    /* int64 per row */
    Buf timestamp_types;  /* int32 per row */
    Binary keys, values;
    Buf header_lists;     /* int32 offsets into the header entries, rows + 1 */
    Validity header_validity;  /* null for a record without headers */
    Binary header_keys, header_values;
} Columns;

typedef struct {
    Py_ssize_t rows;
    BinaryMark keys, values, header_keys, header_values;
    Py_ssize_t header_nulls;
} Mark;

static int columns_reset(Columns *self) {
    buf_free(&self->offsets); buf_free(&self->timestamps_ms); buf_free(&self->timestamp_types);
    binary_free(&self->keys); binary_free(&self->values);
    buf_free(&self->header_lists); buf_free(&self->header_validity.bits);
    self->header_validity.nulls = 0;
    binary_free(&self->header_keys); binary_free(&self->header_values);
    self->rows = 0;
    int32_t zero = 0;
    if (binary_init(&self->keys) < 0 || binary_init(&self->values) < 0) return -1;
    if (binary_init(&self->header_keys) < 0 || binary_init(&self->header_values) < 0) return -1;
    return buf_put(&self->header_lists, &zero, sizeof zero);
}

static Mark columns_mark(const Columns *self) {
    Mark m = {self->rows, binary_mark(&self->keys), binary_mark(&self->values),
              binary_mark(&self->header_keys), binary_mark(&self->header_values),
              self->header_validity.nulls};
    return m;
}

static void columns_rollback(Columns *self, Mark m) {
    self->rows = m.rows;
    self->offsets.len = m.rows * 8;
    self->timestamps_ms.len = m.rows * 8;
    self->timestamp_types.len = m.rows * 4;
    binary_rollback(&self->keys, m.keys);
    binary_rollback(&self->values, m.values);
    if (!self->include_headers) return; /* the header columns stay empty */
    binary_rollback(&self->header_keys, m.header_keys);
    binary_rollback(&self->header_values, m.header_values);
    self->header_lists.len = (m.rows + 1) * 4;
    validity_truncate(&self->header_validity, m.rows, m.header_nulls);
}

static int Columns_init(Columns *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"include_headers", NULL};
    int include_headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &include_headers)) return -1;
    self->include_headers = include_headers;
    return columns_reset(self);
}

static void Columns_dealloc(Columns *self) {
    buf_free(&self->offsets); buf_free(&self->timestamps_ms); buf_free(&self->timestamp_types);
    binary_free(&self->keys); binary_free(&self->values);
    buf_free(&self->header_lists); buf_free(&self->header_validity.bits);
    binary_free(&self->header_keys); binary_free(&self->header_values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Appends one row's fixed columns. */
static int put_row(Columns *self, int64_t offset, int64_t timestamp, int32_t timestamp_type) {
    if (buf_put(&self->offsets, &offset, 8) < 0) return -1;
    if (buf_put(&self->timestamps_ms, &timestamp, 8) < 0) return -1;
    if (buf_put(&self->timestamp_types, &timestamp_type, 4) < 0) return -1;
    self->rows++;
    return 0;
}

/* Closes the row's header list (``has_headers`` 0: a null list, as for no headers). */
static int end_header_list(Columns *self, int has_headers) {
    int32_t end = (int32_t)self->header_keys.slots;
    if (buf_put(&self->header_lists, &end, 4) < 0) return -1;
    return validity_put(&self->header_validity, self->rows - 1, has_headers);
}

/* ---- the walk -------------------------------------------------------------------- */

/* A zigzag varint of at most ``max_bytes`` bytes (5: int32, 10: int64) at *pos, read
 * no further than ``len``; the raw value keeps its low ``bits`` bits, as Kafka's reader
 * does.  Returns 0, or -1 when it runs past ``len`` or past ``max_bytes``. */
static inline int read_varint(const uint8_t *data, Py_ssize_t len, Py_ssize_t *pos,
                              int max_bytes, int bits, int64_t *out) {
    uint64_t raw = 0;
    Py_ssize_t at = *pos;
    for (int i = 0; i < max_bytes; i++, at++) {
        if (at >= len) return -1;
        uint8_t byte = data[at];
        raw |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            if (bits == 32) raw &= 0xFFFFFFFFu;
            *pos = at + 1;
            if (bits == 32) {
                uint32_t r = (uint32_t)raw;
                *out = (int64_t)(int32_t)((r >> 1) ^ (0u - (r & 1)));
            } else {
                *out = (int64_t)((raw >> 1) ^ (0 - (raw & 1)));
            }
            return 0;
        }
    }
    return -1;
}

#define CORRUPT(msg) do { PyErr_SetString(corrupt_error, msg); return -1; } while (0)
#define VARINT(dst) do { if (read_varint(data, len, &pos, 5, 32, &(dst)) < 0) \
    CORRUPT("batch holds fewer bytes than its records declare"); } while (0)

/* Well-formed UTF-8 as Python's strict decoder has it: no overlongs, no surrogates,
 * nothing above U+10FFFF. */
static int is_utf8(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        Py_ssize_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return 0;
        if (i + need >= n) return 0; /* cut off */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (Py_ssize_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

/* The headers of one record, ``count`` of them from *pos up to ``end``. */
static int read_headers(Columns *self, const uint8_t *data, Py_ssize_t len, Py_ssize_t *at,
                        Py_ssize_t end, int64_t count) {
    Py_ssize_t pos = *at;
    if (count < 0 || count > end - pos) CORRUPT("invalid header count");
    for (int64_t h = 0; h < count; h++) {
        int64_t key_size, value_size;
        if (pos >= end) CORRUPT("a record header overruns its record");
        VARINT(key_size);
        if (key_size < 0) CORRUPT("a record header has a null key");
        if (key_size > end - pos) CORRUPT("a header key overruns its record");
        if (!is_utf8(data + pos, (Py_ssize_t)key_size)) CORRUPT("a record header key is not UTF-8");
        if (self->include_headers &&
            binary_put(&self->header_keys, (const char *)data + pos, (Py_ssize_t)key_size, 1) < 0)
            return -1;
        pos += (Py_ssize_t)key_size;
        if (pos >= end) CORRUPT("a record header overruns its record");
        VARINT(value_size);
        if (value_size > end - pos) CORRUPT("a header value overruns its record");
        if (self->include_headers &&
            binary_put(&self->header_values, (const char *)data + pos,
                       value_size < 0 ? 0 : (Py_ssize_t)value_size, value_size >= 0) < 0)
            return -1;
        if (value_size > 0) pos += (Py_ssize_t)value_size;
    }
    *at = pos;
    return 0;
}

/* Every record of data[start:end]: appended when its offset is in [low, high). */
static int walk(Columns *self, const uint8_t *data, Py_ssize_t len, Py_ssize_t start,
                Py_ssize_t size, int64_t record_count, int64_t base_offset, int64_t base_timestamp,
                int has_log_append_time, int64_t log_append_time, int32_t timestamp_type,
                int64_t low, int64_t high) {
    Py_ssize_t pos = start;
    for (int64_t remaining = record_count; remaining > 0; remaining--) {
        int64_t length, timestamp_delta, offset_delta, key_size, value_size;
        if (pos >= size) CORRUPT("batch holds fewer records than it declares");
        VARINT(length);
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (length < MIN_RECORD_SIZE - 1 || length > size - pos) CORRUPT("record length is invalid or overruns");
        pos += 1; /* the attributes byte */
        if (read_varint(data, len, &pos, 10, 64, &timestamp_delta) < 0)
            CORRUPT("batch holds fewer bytes than its records declare");
        VARINT(offset_delta);
        VARINT(key_size);
        Py_ssize_t key_at = pos;
        if (key_size > 0) {
            if (key_size > end - pos) CORRUPT("a record's key or value overruns it");
            pos += (Py_ssize_t)key_size;
        }
        VARINT(value_size);
        Py_ssize_t value_at = pos;
        if (value_size > 0) {
            if (value_size > end - pos) CORRUPT("a record's key or value overruns it");
            pos += (Py_ssize_t)value_size;
        }
        if (pos >= end) CORRUPT("a record's key or value overruns it");
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)offset_delta);
        int keep = low <= offset && offset < high;
        if (keep) {
            int64_t timestamp = has_log_append_time
                ? log_append_time
                : (int64_t)((uint64_t)base_timestamp + (uint64_t)timestamp_delta);
            if (put_row(self, offset, timestamp, timestamp_type) < 0) return -1;
            if (binary_put(&self->keys, (const char *)data + key_at,
                           key_size < 0 ? 0 : (Py_ssize_t)key_size, key_size >= 0) < 0)
                return -1;
            if (binary_put(&self->values, (const char *)data + value_at,
                           value_size < 0 ? 0 : (Py_ssize_t)value_size, value_size >= 0) < 0)
                return -1;
        }
        int has_headers = 0;
        if (data[pos] == 0) {
            pos += 1;
        } else {
            int64_t count;
            VARINT(count);
            int include = self->include_headers;
            if (!keep) self->include_headers = 0; /* checked, not kept */
            int failed = read_headers(self, data, len, &pos, end, count);
            self->include_headers = include;
            if (failed) return -1;
            has_headers = count > 0;
        }
        if (pos != end) CORRUPT("record declares a length but its fields end elsewhere");
        if (keep && self->include_headers && end_header_list(self, has_headers) < 0) return -1;
    }
    if (pos != size) CORRUPT("batch holds bytes beyond its declared records");
    return 0;
}

static PyObject *Columns_add_v2(Columns *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"data", "start", "end", "record_count", "base_offset",
                             "base_timestamp", "log_append_time", "timestamp_type", "low",
                             "high", NULL};
    Py_buffer view;
    Py_ssize_t start, end;
    long long record_count, base_offset, base_timestamp, low, high;
    PyObject *log_append_time;
    int timestamp_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*nnLLLOiLL", kwlist, &view, &start, &end,
                                     &record_count, &base_offset, &base_timestamp,
                                     &log_append_time, &timestamp_type, &low, &high))
        return NULL;
    long long append_time = 0;
    int has_append_time = log_append_time != Py_None;
    if (has_append_time) {
        append_time = PyLong_AsLongLong(log_append_time);
        if (append_time == -1 && PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
    }
    if (start < 0 || end < start || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "records section outside the buffer");
        return NULL;
    }
    Mark mark = columns_mark(self);
    int failed = walk(self, (const uint8_t *)view.buf, view.len, start, end, record_count,
                  base_offset, base_timestamp, has_append_time, append_time, timestamp_type,
                  low, high);
    PyBuffer_Release(&view);
    if (failed) {
        columns_rollback(self, mark);
        return NULL;
    }
    return PyLong_FromSsize_t(self->rows - mark.rows);
}

/* Rows already decoded in Python (v0/v1 messages): (offset, timestamp, key, value, headers)
 * tuples; legacy messages carry no headers. */
static PyObject *Columns_add_rows(Columns *self, PyObject *args) {
    PyObject *rows;
    int timestamp_type;
    if (!PyArg_ParseTuple(args, "O!i", &PyList_Type, &rows, &timestamp_type)) return NULL;
    Mark mark = columns_mark(self);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        long long offset, timestamp;
        PyObject *key, *value, *headers;
        if (!PyArg_ParseTuple(row, "LLOOO", &offset, &timestamp, &key, &value, &headers))
            goto fail;
        if (PyObject_IsTrue(headers)) {
            PyErr_SetString(PyExc_ValueError, "add_rows takes rows without headers");
            goto fail;
        }
        if (put_row(self, offset, timestamp, timestamp_type) < 0) goto fail;
        PyObject *fields[2] = {key, value};
        Binary *columns[2] = {&self->keys, &self->values};
        for (int f = 0; f < 2; f++) {
            int valid = fields[f] != Py_None;
            if (valid && !PyBytes_Check(fields[f])) {
                PyErr_SetString(PyExc_TypeError, "keys and values are bytes or None");
                goto fail;
            }
            if (binary_put(columns[f], valid ? PyBytes_AS_STRING(fields[f]) : NULL,
                           valid ? PyBytes_GET_SIZE(fields[f]) : 0, valid) < 0)
                goto fail;
        }
        if (self->include_headers && end_header_list(self, 0) < 0) goto fail;
    }
    return PyLong_FromSsize_t(self->rows - mark.rows);
fail:
    columns_rollback(self, mark);
    return NULL;
}

static PyObject *validity_of(Validity *v) {
    if (v->nulls == 0) Py_RETURN_NONE;
    return buf_detach(&v->bits);
}

static PyObject *binary_of(Binary *c) {
    Py_ssize_t nulls = c->validity.nulls;
    return Py_BuildValue("(NNNn)", buf_detach(&c->offsets), buf_detach(&c->data),
                         validity_of(&c->validity), nulls);
}

/* The columns so far (Arrow's layouts, in bytearrays handed over), and an empty start. */
static PyObject *Columns_take(Columns *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *headers = Py_None;
    Py_INCREF(Py_None);
    if (self->include_headers) {
        Py_DECREF(Py_None);
        Py_ssize_t nulls = self->header_validity.nulls;
        headers = Py_BuildValue("(NNnNN)", buf_detach(&self->header_lists),
                                validity_of(&self->header_validity), nulls,
                                binary_of(&self->header_keys), binary_of(&self->header_values));
        if (!headers) return NULL;
    }
    PyObject *taken = Py_BuildValue("(nNNNNNN)", self->rows, buf_detach(&self->offsets),
                                    buf_detach(&self->timestamps_ms),
                                    buf_detach(&self->timestamp_types), binary_of(&self->keys),
                                    binary_of(&self->values), headers);
    if (!taken) return NULL;
    if (columns_reset(self) < 0) { Py_DECREF(taken); return NULL; }
    return taken;
}

static Py_ssize_t Columns_len(Columns *self) { return self->rows; }

static PyObject *Columns_data_bytes(Columns *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->keys.data.len + self->values.data.len +
                              self->header_keys.data.len + self->header_values.data.len);
}

static PyMethodDef Columns_methods[] = {
    {"add_v2", (PyCFunction)(void (*)(void))Columns_add_v2, METH_VARARGS | METH_KEYWORDS,
     "Walk a v2 records section into the columns; returns the rows kept."},
    {"add_rows", (PyCFunction)Columns_add_rows, METH_VARARGS,
     "Append decoded v0/v1 rows; returns their number."},
    {"take", (PyCFunction)Columns_take, METH_NOARGS, "The buffers so far, and a fresh start."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"data_bytes", (getter)Columns_data_bytes, NULL, "Bytes held in binary columns.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Columns_as_sequence = {.sq_length = (lenfunc)Columns_len};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tierlog._columnar.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Record columns in Arrow's buffer layouts, filled batch by batch.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Columns_init,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
    .tp_as_sequence = &Columns_as_sequence,
};

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tierlog._columnar",
    .m_doc = "Kafka v2 records decoded into Arrow column buffers.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__columnar(void) {
    PyObject *errors = PyImport_ImportModule("tierlog.storage.errors");
    if (!errors) return NULL;
    corrupt_error = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (!corrupt_error) return NULL;
    if (PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *module = PyModule_Create(&columnar_module);
    if (!module) return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(module, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
