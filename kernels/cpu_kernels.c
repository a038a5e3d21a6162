/* cpu_kernels.c: the CPU's compiled loops, built when the package is installed into the extension
 * module gpudedup._cpu_kernels: the numpy backend's shingling and MinHash, and the exact
 * verification's merges.
 *
 * Each function is the loop of the same name in gpudedup/backends/cpu_kernels.py or
 * gpudedup/core/verify_kernels.py (numba), with the same arguments and the same results bit for
 * bit; the docstrings there give the arrays' dtypes and shapes, and docs/hash-spec.md the
 * definitions. A compiled module loads in about a millisecond where numba's cached kernels take
 * some tenths of a second to start, so a run of any size takes these loops where they were built
 * (gpudedup/compiled.py). Every function releases the GIL while it loops: the backend's threads
 * shingle batches, and verification merges pairs, side by side.
 *
 * All hash arithmetic is on uint64_t (uint32_t for MinHash), which C defines to wrap mod 2**64
 * (2**32): the same arithmetic as numba's np.uint64 and numpy's. Inputs come from the callers in
 * backends/compiled_steps.py and core/verify.py, which make every array contiguous and of the
 * dtype named there; each function checks that the buffers hold what the counts say, and that
 * every row it is asked for exists, before it reads.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The hash family shared with the CUDA kernels: its constants and gd_fmix64, as C functions. */
#define GD_FUNCTION static inline
#include "hash_common.cuh"

#define SPACE 0x20u
#define CODE_POINTS 0x110000

/* Rows of at most this many hashes are sorted by insertion alone; buckets of sort_row as in
 * cpu_kernels.py (SMALL_ROW, MAX_BUCKET_BITS). */
#define SMALL_ROW 16
#define MAX_BUCKET_BITS 20

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif


/* --- normalisation ------------------------------------------------------------------------- */

/* The code point of the (valid) UTF-8 sequence at data[*i]; *i moves past it. */
static inline uint32_t decode_at(const uint8_t *data, uint64_t *i) {
    const uint8_t lead = data[*i];
    if (lead < 0x80) {
        *i += 1;
        return lead;
    }
    if (lead < 0xE0) {
        const uint32_t c = ((uint32_t)(lead & 0x1F) << 6) | (data[*i + 1] & 0x3F);
        *i += 2;
        return c;
    }
    if (lead < 0xF0) {
        const uint32_t c = ((uint32_t)(lead & 0x0F) << 12) | ((uint32_t)(data[*i + 1] & 0x3F) << 6)
                           | (data[*i + 2] & 0x3F);
        *i += 3;
        return c;
    }
    const uint32_t c = ((uint32_t)(lead & 0x07) << 18) | ((uint32_t)(data[*i + 1] & 0x3F) << 12)
                       | ((uint32_t)(data[*i + 2] & 0x3F) << 6) | (data[*i + 3] & 0x3F);
    *i += 4;
    return c;
}

static void normalize_loop(const uint8_t *data, const uint64_t *offsets, uint64_t n_docs, const uint32_t *lowercase,
                           const uint8_t *white, const uint8_t *category_flags, uint8_t strip, uint32_t *units,
                           uint64_t *unit_offsets, uint64_t *word_counts) {
    uint64_t written = 0;
    unit_offsets[0] = 0;
    for (uint64_t d = 0; d < n_docs; ++d) {
        uint64_t words = 0, has_text = 0, space_pending = 0;
        uint64_t i = offsets[d];
        const uint64_t end = offsets[d + 1];
        while (i < end) {
            const uint32_t lower = lowercase[decode_at(data, &i)];
            if (strip != 0 && (category_flags[lower] & strip) != 0) {
                continue; /* removed without a trace */
            }
            /* Branch-free as in cpu_kernels.py: a space is written, then the code point over or
             * after it, and `written` moves past each only where it counts. */
            const uint64_t is_white = white[lower] != 0;
            const uint64_t emit_space = space_pending & (1 - is_white);
            units[written] = SPACE;
            units[written + emit_space] = lower;
            written += emit_space + 1 - is_white;
            words += emit_space;
            has_text |= 1 - is_white;
            space_pending = is_white & has_text;
        }
        word_counts[d] = words + has_text; /* n spaces separate n + 1 words */
        unit_offsets[d + 1] = written;
    }
}

/* --- shingle hashes ------------------------------------------------------------------------ */

static inline uint64_t poly_hash64(const uint32_t *units, uint64_t start, uint64_t stop) {
    uint64_t h = GD_POLY_OFFSET;
    for (uint64_t j = start; j < stop; ++j) {
        h = gd_poly_step(h, units[j]);
    }
    return gd_fmix64(h);
}

static void char_loop(const uint32_t *units, const uint64_t *unit_offsets, uint64_t n_docs, uint64_t n,
                      uint64_t base_power_n, uint64_t offset_term, const uint64_t *shingle_offsets, uint64_t *hashes) {
    for (uint64_t d = 0; d < n_docs; ++d) {
        const uint64_t start = unit_offsets[d], stop = unit_offsets[d + 1];
        uint64_t out = shingle_offsets[d];
        if (stop - start < n) {
            if (stop > start) { /* the short-document rule: one shingle, the whole text */
                hashes[out] = poly_hash64(units, start, stop);
            }
            continue;
        }
        uint64_t t = 0;
        for (uint64_t j = start; j < start + n; ++j) {
            t = t * GD_POLY_BASE + units[j];
        }
        hashes[out] = gd_fmix64(offset_term + t);
        for (uint64_t j = start + n; j < stop; ++j) {
            t = t * GD_POLY_BASE + ((uint64_t)units[j] - (uint64_t)units[j - n] * base_power_n);
            hashes[++out] = gd_fmix64(offset_term + t);
        }
    }
}

/* word_poly, word_power: scratch of at least the most words of a document. */
static void word_loop(const uint32_t *units, const uint64_t *unit_offsets, uint64_t n_docs, uint64_t n,
                      const uint64_t *shingle_offsets, uint64_t *hashes, uint64_t *word_poly, uint64_t *word_power) {
    for (uint64_t d = 0; d < n_docs; ++d) {
        const uint64_t start = unit_offsets[d], stop = unit_offsets[d + 1];
        if (stop == start) {
            continue;
        }
        uint64_t words = 0, poly = 0, power = 1;
        for (uint64_t j = start; j < stop; ++j) {
            const uint32_t unit = units[j];
            if (unit == SPACE) {
                word_poly[words] = poly;
                word_power[words] = power;
                ++words;
                poly = 0;
                power = 1;
            } else {
                poly = poly * GD_POLY_BASE + unit;
                power *= GD_POLY_BASE;
            }
        }
        word_poly[words] = poly;
        word_power[words] = power;
        ++words;
        const uint64_t span = n < words ? n : words; /* fewer than n words: one whole-text shingle */
        uint64_t out = shingle_offsets[d];
        for (uint64_t first = 0; first + span <= words; ++first) {
            uint64_t h = GD_POLY_OFFSET * word_power[first] + word_poly[first];
            for (uint64_t w = first + 1; w < first + span; ++w) {
                h = (h * GD_POLY_BASE + SPACE) * word_power[w] + word_poly[w];
            }
            hashes[out++] = gd_fmix64(h);
        }
    }
}

/* --- sets ---------------------------------------------------------------------------------- */

/* values[:stop] sorted by insertion, unless that takes more than `budget` moves: then 0 (the
 * values all still there, in some order). */
static int insertion_sort(uint64_t *values, uint64_t stop, uint64_t budget) {
    uint64_t moves = 0;
    for (uint64_t i = 1; i < stop; ++i) {
        const uint64_t value = values[i];
        uint64_t j = i;
        while (j > 0 && values[j - 1] > value) {
            values[j] = values[j - 1];
            --j;
        }
        values[j] = value;
        moves += i - j;
        if (moves > budget) {
            return 0;
        }
    }
    return 1;
}

static int compare_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* row[:length] sorted into sorted_row: a counting sort on the top bits (gd_fmix64 outputs spread
 * evenly), then one insertion pass; qsort where the values cluster far beyond chance.
 * bucket_offsets: scratch of min(2 length, 2**MAX_BUCKET_BITS) + 1 entries at least. */
static void sort_row(const uint64_t *row, uint64_t length, uint64_t *sorted_row, uint64_t *bucket_offsets) {
    if (length <= SMALL_ROW) {
        memcpy(sorted_row, row, length * sizeof(uint64_t));
        insertion_sort(sorted_row, length, length * length);
        return;
    }
    unsigned bits = 1;
    while ((UINT64_C(1) << bits) < length && bits < MAX_BUCKET_BITS) {
        ++bits;
    }
    const unsigned shift = 64 - bits;
    const uint64_t buckets = UINT64_C(1) << bits;
    memset(bucket_offsets, 0, (buckets + 1) * sizeof(uint64_t));
    for (uint64_t i = 0; i < length; ++i) {
        ++bucket_offsets[(row[i] >> shift) + 1];
    }
    for (uint64_t bucket = 0; bucket < buckets; ++bucket) {
        bucket_offsets[bucket + 1] += bucket_offsets[bucket];
    }
    for (uint64_t i = 0; i < length; ++i) {
        sorted_row[bucket_offsets[row[i] >> shift]++] = row[i];
    }
    if (!insertion_sort(sorted_row, length, 4 * length)) {
        qsort(sorted_row, length, sizeof(uint64_t), compare_u64);
    }
}

/* Each row of hashes sorted ascending without repeats, packed in place; returns the total, or
 * -1 where the scratch cannot be had. */
static int64_t sort_unique_loop(const uint64_t *offsets, uint64_t n_docs, uint64_t *hashes, uint64_t *set_offsets) {
    uint64_t longest = 0;
    for (uint64_t d = 0; d < n_docs; ++d) {
        const uint64_t length = offsets[d + 1] - offsets[d];
        longest = length > longest ? length : longest;
    }
    uint64_t bucket_count = 2 * (longest > SMALL_ROW ? longest : SMALL_ROW);
    if (bucket_count > (UINT64_C(1) << MAX_BUCKET_BITS)) {
        bucket_count = UINT64_C(1) << MAX_BUCKET_BITS;
    }
    uint64_t *sorted_row = malloc((longest + 1) * sizeof(uint64_t));
    uint64_t *bucket_offsets = malloc((bucket_count + 1) * sizeof(uint64_t));
    if (sorted_row == NULL || bucket_offsets == NULL) {
        free(sorted_row);
        free(bucket_offsets);
        return -1;
    }
    uint64_t written = 0;
    set_offsets[0] = 0;
    for (uint64_t d = 0; d < n_docs; ++d) {
        const uint64_t start = offsets[d], stop = offsets[d + 1];
        if (stop > start) {
            sort_row(hashes + start, stop - start, sorted_row, bucket_offsets);
            uint64_t previous = sorted_row[0];
            hashes[written++] = previous;
            for (uint64_t i = 1; i < stop - start; ++i) {
                /* Written always, kept only when new (a branch on repeats would mispredict). */
                const uint64_t value = sorted_row[i];
                hashes[written] = value;
                written += value != previous;
                previous = value;
            }
        }
        set_offsets[d + 1] = written;
    }
    free(sorted_row);
    free(bucket_offsets);
    return (int64_t)written;
}

/* --- MinHash signatures -------------------------------------------------------------------- */

/* restrict: the arrays never overlap, which lets the compiler run the loop over permutations in
 * vector registers. The baseline x86-64 vectors (SSE2) have no 32-bit multiply or unsigned
 * minimum, so the loop is also compiled for AVX2 and AVX-512, and the loader picks the one the
 * machine runs (GCC's and Clang's target_clones): three times the baseline's speed or more. */
VECTOR_CLONES
static void minhash_loop(const uint64_t *restrict offsets, uint64_t n_docs, const uint32_t *restrict low_bits,
                         const uint32_t *restrict a, const uint32_t *restrict b, uint64_t permutations,
                         uint32_t *restrict signatures) {
    for (uint64_t d = 0; d < n_docs; ++d) {
        uint32_t *restrict row = signatures + d * permutations;
        for (uint64_t i = offsets[d]; i < offsets[d + 1]; ++i) {
            const uint32_t x = low_bits[i];
            for (uint64_t k = 0; k < permutations; ++k) {
                const uint32_t value = gd_permute(a[k], b[k], x);
                row[k] = value < row[k] ? value : row[k];
            }
        }
    }
}

/* --- exact verification: sorted merges over a set matrix's CSR arrays ----------------------- */

/* intersections_at_least's count for a pair that cannot reach the count needed
 * (verify_kernels.RULED_OUT). */
#define RULED_OUT (-1)

static void intersections_loop(const int64_t *indptr, const int64_t *indices, const int64_t *first,
                               const int64_t *second, int64_t pairs, int64_t *out) {
    for (int64_t p = 0; p < pairs; ++p) {
        int64_t i = indptr[first[p]], j = indptr[second[p]];
        const int64_t i_end = indptr[first[p] + 1], j_end = indptr[second[p] + 1];
        int64_t count = 0;
        while (i < i_end && j < j_end) {
            const int64_t x = indices[i], y = indices[j];
            i += x <= y;
            j += y <= x;
            count += x == y;
        }
        out[p] = count;
    }
}

/* The merge stops once more elements of a row went unmatched than its slack allows (verify.py's
 * merge bound); a pair whose count needed exceeds a row's size is not merged at all. */
static void intersections_at_least_loop(const int64_t *indptr, const int64_t *indices, const int64_t *indptr_b,
                                        const int64_t *indices_b, const int64_t *first, const int64_t *second,
                                        const int64_t *needed, int64_t pairs, int64_t *out) {
    for (int64_t p = 0; p < pairs; ++p) {
        int64_t i = indptr[first[p]], j = indptr_b[second[p]];
        const int64_t i_end = indptr[first[p] + 1], j_end = indptr_b[second[p] + 1];
        const int64_t need = needed[p];
        int64_t slack_a = (i_end - i) - need, slack_b = (j_end - j) - need;
        if (slack_a < 0 || slack_b < 0) {
            out[p] = RULED_OUT;
            continue;
        }
        int64_t count = 0;
        while (i < i_end && j < j_end) {
            const int64_t x = indices[i], y = indices_b[j];
            if (x < y) {
                ++i;
                if (--slack_a < 0) {
                    break;
                }
            } else if (x > y) {
                ++j;
                if (--slack_b < 0) {
                    break;
                }
            } else {
                ++count;
                ++i;
                ++j;
            }
        }
        out[p] = count >= need ? count : RULED_OUT;
    }
}

static void signature_agreements_loop(const uint32_t *signatures, int64_t columns, const int64_t *first,
                                      const int64_t *second, int64_t pairs, int64_t *out) {
    for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t *a = signatures + first[p] * columns, *b = signatures + second[p] * columns;
        int64_t count = 0;
        for (int64_t k = 0; k < columns; ++k) {
            count += a[k] == b[k];
        }
        out[p] = count;
    }
}

/* --- the module ---------------------------------------------------------------------------- */

/* Whether `buffer` holds at least `items` items of `size` bytes; a ValueError naming it where
 * not. */
static int holds(const Py_buffer *buffer, uint64_t items, size_t size, const char *name) {
    if ((uint64_t)buffer->len / size < items) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, fewer than %llu items of %zu bytes", name, buffer->len,
                     (unsigned long long)items, size);
        return 0;
    }
    return 1;
}

/* A "O&" converter: any integer (numpy's np.uint64 included, which numba's loops are given) as
 * an unsigned 64-bit value. */
static int to_u64(PyObject *object, void *address) {
    PyObject *index = PyNumber_Index(object);
    if (index == NULL) {
        return 0;
    }
    const unsigned long long value = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        return 0;
    }
    *(uint64_t *)address = value;
    return 1;
}

/* The documents an offsets buffer (uint64 (n_docs + 1,)) describes. */
static uint64_t documents(const Py_buffer *offsets) {
    const uint64_t entries = (uint64_t)offsets->len / sizeof(uint64_t);
    return entries ? entries - 1 : 0;
}

/* Whether every row number of `rows` (int64 (pairs,)) is below `row_count`; a ValueError naming
 * `name` where not. */
static int rows_exist(const Py_buffer *rows, int64_t pairs, int64_t row_count, const char *name) {
    const int64_t *row = rows->buf;
    for (int64_t p = 0; p < pairs; ++p) {
        if (row[p] < 0 || row[p] >= row_count) {
            PyErr_Format(PyExc_ValueError, "%s[%lld] is %lld, not a row of the %lld there are", name, (long long)p,
                         (long long)row[p], (long long)row_count);
            return 0;
        }
    }
    return 1;
}

/* Whether (indptr, indices) are the CSR arrays of rows whose entries lie inside indices; the row
 * count through *rows. */
static int csr_arrays(const Py_buffer *indptr, const Py_buffer *indices, int64_t *rows) {
    const int64_t entries = indptr->len / (Py_ssize_t)sizeof(int64_t);
    if (entries == 0) {
        PyErr_SetString(PyExc_ValueError, "indptr holds no entries (a set matrix has rows + 1)");
        return 0;
    }
    *rows = entries - 1;
    return holds(indices, (uint64_t)((const int64_t *)indptr->buf)[*rows], 8, "indices");
}

static void release(Py_buffer *buffers, int count) {
    for (int k = 0; k < count; ++k) {
        PyBuffer_Release(&buffers[k]);
    }
}

static PyObject *normalize_batch(PyObject *self, PyObject *args) {
    Py_buffer b[8];
    unsigned char strip;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*bw*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &strip, &b[5], &b[6],
                          &b[7])) {
        return NULL;
    }
    const uint64_t n_docs = documents(&b[1]);
    const uint64_t *offsets = b[1].buf;
    int ok = holds(&b[2], CODE_POINTS, 4, "lowercase")
             && holds(&b[3], CODE_POINTS, 1, "white") && holds(&b[4], CODE_POINTS, 1, "category_flags")
             && holds(&b[5], (uint64_t)b[0].len, 4, "units") && holds(&b[6], n_docs + 1, 8, "unit_offsets")
             && holds(&b[7], n_docs, 8, "word_counts");
    if (ok && n_docs > 0 && offsets[n_docs] > (uint64_t)b[0].len) {
        PyErr_SetString(PyExc_ValueError, "offsets run past the end of data");
        ok = 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        normalize_loop(b[0].buf, offsets, n_docs, b[2].buf, b[3].buf, b[4].buf, strip, b[5].buf, b[6].buf, b[7].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 8);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *char_hashes(PyObject *self, PyObject *args) {
    Py_buffer b[4];
    uint64_t n, base_power_n, offset_term;
    if (!PyArg_ParseTuple(args, "y*y*O&O&O&y*w*", &b[0], &b[1], to_u64, &n, to_u64, &base_power_n, to_u64,
                          &offset_term, &b[2], &b[3])) {
        return NULL;
    }
    const uint64_t n_docs = documents(&b[1]);
    const uint64_t *unit_offsets = b[1].buf, *shingle_offsets = b[2].buf;
    int ok = holds(&b[2], n_docs + 1, 8, "shingle_offsets")
             && (n_docs == 0 || (holds(&b[0], unit_offsets[n_docs], 4, "units")
                                 && holds(&b[3], shingle_offsets[n_docs], 8, "hashes")));
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        char_loop(b[0].buf, unit_offsets, n_docs, n, base_power_n, offset_term, shingle_offsets, b[3].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 4);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *word_hashes(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    uint64_t n;
    if (!PyArg_ParseTuple(args, "y*y*y*O&y*w*", &b[0], &b[1], &b[2], to_u64, &n, &b[3], &b[4])) {
        return NULL;
    }
    const uint64_t n_docs = documents(&b[1]);
    const uint64_t *unit_offsets = b[1].buf, *word_counts = b[2].buf, *shingle_offsets = b[3].buf;
    int ok = holds(&b[2], n_docs, 8, "word_counts") && holds(&b[3], n_docs + 1, 8, "shingle_offsets")
             && (n_docs == 0 || (holds(&b[0], unit_offsets[n_docs], 4, "units")
                                 && holds(&b[4], shingle_offsets[n_docs], 8, "hashes")));
    uint64_t most_words = 0;
    for (uint64_t d = 0; ok && d < n_docs; ++d) {
        most_words = word_counts[d] > most_words ? word_counts[d] : most_words;
    }
    uint64_t *scratch = ok ? malloc((2 * most_words + 2) * sizeof(uint64_t)) : NULL;
    if (ok && scratch == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        word_loop(b[0].buf, unit_offsets, n_docs, n, shingle_offsets, b[4].buf, scratch, scratch + most_words + 1);
        Py_END_ALLOW_THREADS
    }
    free(scratch);
    release(b, 5);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *sort_unique_rows(PyObject *self, PyObject *args) {
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "y*w*w*", &b[0], &b[1], &b[2])) {
        return NULL;
    }
    const uint64_t n_docs = documents(&b[0]);
    const uint64_t *offsets = b[0].buf;
    int64_t total = -2;
    if (holds(&b[2], n_docs + 1, 8, "set_offsets") && (n_docs == 0 || holds(&b[1], offsets[n_docs], 8, "hashes"))) {
        Py_BEGIN_ALLOW_THREADS
        total = sort_unique_loop(offsets, n_docs, b[1].buf, b[2].buf);
        Py_END_ALLOW_THREADS
        if (total == -1) {
            PyErr_NoMemory();
        }
    }
    release(b, 3);
    return total >= 0 ? PyLong_FromLongLong(total) : NULL;
}

static PyObject *minhash_rows(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4])) {
        return NULL;
    }
    const uint64_t n_docs = documents(&b[0]);
    const uint64_t *offsets = b[0].buf;
    const uint64_t permutations = (uint64_t)b[2].len / sizeof(uint32_t);
    int ok = holds(&b[3], permutations, 4, "b") && holds(&b[4], n_docs * permutations, 4, "signatures")
             && (n_docs == 0 || holds(&b[1], offsets[n_docs], 4, "low_bits"));
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        minhash_loop(offsets, n_docs, b[1].buf, b[2].buf, b[3].buf, permutations, b[4].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 5);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *intersections(PyObject *self, PyObject *args) {
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4])) {
        return NULL;
    }
    const int64_t pairs = b[2].len / (Py_ssize_t)sizeof(int64_t);
    int64_t rows = 0;
    const int ok = csr_arrays(&b[0], &b[1], &rows) && holds(&b[3], pairs, 8, "second") && holds(&b[4], pairs, 8, "out")
                   && rows_exist(&b[2], pairs, rows, "first") && rows_exist(&b[3], pairs, rows, "second");
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        intersections_loop(b[0].buf, b[1].buf, b[2].buf, b[3].buf, pairs, b[4].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 5);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *intersections_at_least(PyObject *self, PyObject *args) {
    Py_buffer b[8];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7])) {
        return NULL;
    }
    const int64_t pairs = b[4].len / (Py_ssize_t)sizeof(int64_t);
    int64_t rows_a = 0, rows_b = 0;
    const int ok = csr_arrays(&b[0], &b[1], &rows_a) && csr_arrays(&b[2], &b[3], &rows_b)
                   && holds(&b[5], pairs, 8, "second") && holds(&b[6], pairs, 8, "needed")
                   && holds(&b[7], pairs, 8, "out") && rows_exist(&b[4], pairs, rows_a, "first")
                   && rows_exist(&b[5], pairs, rows_b, "second");
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        intersections_at_least_loop(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, b[6].buf, pairs,
                                    b[7].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 8);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyObject *signature_agreements(PyObject *self, PyObject *args) {
    PyObject *signatures_object;
    Py_buffer b[4];
    if (!PyArg_ParseTuple(args, "Oy*y*w*", &signatures_object, &b[1], &b[2], &b[3])) {
        return NULL;
    }
    /* The signatures' shape, (rows, columns), from a C-contiguous two-dimensional buffer. */
    if (PyObject_GetBuffer(signatures_object, &b[0], PyBUF_C_CONTIGUOUS) < 0) {
        release(b + 1, 3);
        return NULL;
    }
    const int64_t pairs = b[1].len / (Py_ssize_t)sizeof(int64_t);
    int ok = b[0].ndim == 2 && b[0].itemsize == 4;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "signatures must be a C-contiguous uint32 array of two dimensions");
    }
    const int64_t rows = ok ? b[0].shape[0] : 0, columns = ok ? b[0].shape[1] : 0;
    ok = ok && holds(&b[2], pairs, 8, "second") && holds(&b[3], pairs, 8, "out")
         && rows_exist(&b[1], pairs, rows, "first") && rows_exist(&b[2], pairs, rows, "second");
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        signature_agreements_loop(b[0].buf, columns, b[1].buf, b[2].buf, pairs, b[3].buf);
        Py_END_ALLOW_THREADS
    }
    release(b, 4);
    return ok ? Py_NewRef(Py_None) : NULL;
}

static PyMethodDef methods[] = {
    {"normalize_batch", normalize_batch, METH_VARARGS,
     "normalize_batch(data, offsets, lowercase, white, category_flags, strip, units, unit_offsets, word_counts)"},
    {"char_hashes", char_hashes, METH_VARARGS,
     "char_hashes(units, unit_offsets, n, base_power_n, offset_term, shingle_offsets, hashes)"},
    {"word_hashes", word_hashes, METH_VARARGS,
     "word_hashes(units, unit_offsets, word_counts, n, shingle_offsets, hashes)"},
    {"sort_unique_rows", sort_unique_rows, METH_VARARGS, "sort_unique_rows(offsets, hashes, set_offsets) -> int"},
    {"minhash_rows", minhash_rows, METH_VARARGS, "minhash_rows(offsets, low_bits, a, b, signatures)"},
    {"intersections", intersections, METH_VARARGS, "intersections(indptr, indices, first, second, out)"},
    {"intersections_at_least", intersections_at_least, METH_VARARGS,
     "intersections_at_least(indptr, indices, indptr_b, indices_b, first, second, needed, out)"},
    {"signature_agreements", signature_agreements, METH_VARARGS,
     "signature_agreements(signatures, first, second, out)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cpu_kernels",
    "The CPU's compiled loops (shingling, MinHash, exact verification), built at install from kernels/cpu_kernels.c.",
    -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
