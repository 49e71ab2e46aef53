#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"
#include "../view.h"

typedef struct hparser {
    const char *s;
    size_t n, pos;
    const char *what;
    size_t base; /* file offset of s[0], for messages */
    tps_error *err;
} hparser;

static tps_status hfail(hparser *p, const char *msg)
{
    return tps_fail(p->err, TPS_EINVALID, "%s: .npy header: %s at byte %zu", p->what, msg, p->base + p->pos);
}

static void skip_ws(hparser *p)
{
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t')) p->pos++;
}

static bool eat(hparser *p, char c)
{
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == c) {
        p->pos++;
        return true;
    }
    return false;
}

/* A quoted string without escapes; *s points into the header. */
static tps_status parse_str(hparser *p, const char **s, size_t *len)
{
    skip_ws(p);
    if (p->pos >= p->n || (p->s[p->pos] != '\'' && p->s[p->pos] != '"')) return hfail(p, "expected a quoted string");
    char q = p->s[p->pos++];
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] != q) {
        if (p->s[p->pos] == '\\' || p->s[p->pos] == '\n') return hfail(p, "escape or newline inside a string");
        p->pos++;
    }
    if (p->pos >= p->n) return hfail(p, "unterminated string");
    *s = p->s + start;
    *len = p->pos - start;
    p->pos++;
    return TPS_OK;
}

static bool word(hparser *p, const char *w)
{
    size_t l = strlen(w);
    skip_ws(p);
    if (p->n - p->pos >= l && memcmp(p->s + p->pos, w, l) == 0) {
        p->pos += l;
        return true;
    }
    return false;
}

static tps_status parse_shape(hparser *p, tps_npy_header *h)
{
    if (!eat(p, '(')) return hfail(p, "'shape' is not a tuple");
    h->ndim = 0;
    for (;;) {
        if (eat(p, ')')) break;
        skip_ws(p);
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return hfail(p, "expected a non-negative integer in 'shape'");
        uint64_t v = 0;
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            if (!tps_mul_u64(v, 10, &v) || !tps_add_u64(v, (uint64_t)(p->s[p->pos++] - '0'), &v))
                return hfail(p, "'shape' dimension overflows 64 bits");
        if (p->pos < p->n && p->s[p->pos] == 'L') p->pos++;
        if (h->ndim >= TPS_MAX_DIMS) return hfail(p, "'shape' has too many dimensions");
        h->shape[h->ndim++] = v;
        if (eat(p, ',')) continue;
        if (eat(p, ')')) break;
        return hfail(p, "expected ',' or ')' in 'shape'");
    }
    return TPS_OK;
}

static tps_status parse_descr(hparser *p, const char *d, size_t len, tps_npy_header *h)
{
    static const struct {
        const char *code;
        tps_dtype dt;
        unsigned esize, swap;
    } types[] = {
        {"b1", TPS_DT_BOOL, 1, 0}, {"i1", TPS_DT_I8, 1, 0},  {"u1", TPS_DT_U8, 1, 0},   {"i2", TPS_DT_I16, 2, 2},
        {"u2", TPS_DT_U16, 2, 2},  {"i4", TPS_DT_I32, 4, 4}, {"u4", TPS_DT_U32, 4, 4},  {"i8", TPS_DT_I64, 8, 8},
        {"u8", TPS_DT_U64, 8, 8},  {"f2", TPS_DT_F16, 2, 2}, {"f4", TPS_DT_F32, 4, 4},  {"f8", TPS_DT_F64, 8, 8},
        {"c8", TPS_DT_C64, 8, 4},
    };
    char msg[96];
    if (len >= 2 && strchr("<>|=", d[0]) && d[1] == 'O') return hfail(p, "object arrays ('O' descr, pickled data) are refused");
    if (len == 3 && strchr("<>|=", d[0]))
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (memcmp(d + 1, types[i].code, 2) == 0) {
                h->dtype = types[i].dt;
                h->esize = types[i].esize;
                h->swap = d[0] == '>' ? types[i].swap : 0;
                return TPS_OK;
            }
    snprintf(msg, sizeof msg, "unsupported descr '%.*s'", (int)(len > 32 ? 32 : len), d);
    return hfail(p, msg);
}

tps_status tps_npy_parse_header(const unsigned char *b, size_t avail, const char *what, tps_npy_header *h, size_t *need,
                                tps_error *err)
{
    memset(h, 0, sizeof *h);
    if (avail < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return tps_fail(err, TPS_EINVALID, "%s: not a .npy array (no \\x93NUMPY magic)", what);
    unsigned major = b[6], minor = b[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return tps_fail(err, TPS_EINVALID, "%s: .npy format version %u.%u; only 1.0, 2.0 and 3.0 exist", what, major, minor);
    size_t lenfield = major == 1 ? 2 : 4;
    if (avail < 8 + lenfield) return tps_fail(err, TPS_EINVALID, "%s: .npy header truncated", what);
    uint64_t hlen = major == 1 ? (uint64_t)(b[8] | b[9] << 8)
                               : ((uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24);
    if (hlen > TPS_NPY_MAX_HEADER)
        return tps_fail(err, TPS_EINVALID, "%s: .npy header of %llu bytes exceeds the %u-byte limit", what,
                        (unsigned long long)hlen, TPS_NPY_MAX_HEADER);
    size_t total = 8 + lenfield + (size_t)hlen;
    if (avail < total) {
        if (need) {
            *need = total;
            return TPS_OK;
        }
        return tps_fail(err, TPS_EINVALID, "%s: .npy header needs %zu bytes but only %zu exist", what, total, avail);
    }
    hparser p = {(const char *)b + 8 + lenfield, (size_t)hlen, 0, what, 8 + lenfield, err};
    if (hlen == 0 || p.s[hlen - 1] != '\n') return hfail(&p, "does not end with a newline");
    p.n--;
    /* latin1 (v1, v2) admits any byte and UTF-8 (v3) only matters inside strings, and every
     * accepted string is ASCII: bytes >= 0x80 can only make a parse error below. */
    if (!eat(&p, '{')) return hfail(&p, "expected '{'");
    bool seen[3] = {false, false, false};
    tps_status st;
    for (;;) {
        if (eat(&p, '}')) break;
        const char *k, *sv;
        size_t kl, svl;
        if ((st = parse_str(&p, &k, &kl))) return st;
        if (!eat(&p, ':')) return hfail(&p, "expected ':'");
        int which = kl == 5 && !memcmp(k, "descr", 5) ? 0 : kl == 13 && !memcmp(k, "fortran_order", 13) ? 1 : kl == 5 && !memcmp(k, "shape", 5) ? 2 : -1;
        if (which < 0) return hfail(&p, "unexpected key (only 'descr', 'fortran_order', 'shape')");
        if (seen[which]) return hfail(&p, "duplicate key");
        seen[which] = true;
        if (which == 0) {
            skip_ws(&p);
            if (p.pos < p.n && p.s[p.pos] == '[') return hfail(&p, "structured dtypes (descr lists) are refused");
            if ((st = parse_str(&p, &sv, &svl)) || (st = parse_descr(&p, sv, svl, h))) return st;
        } else if (which == 1) {
            if (word(&p, "True")) h->fortran = true;
            else if (word(&p, "False")) h->fortran = false;
            else return hfail(&p, "'fortran_order' is not True or False");
        } else if ((st = parse_shape(&p, h))) {
            return st;
        }
        if (eat(&p, ',')) continue;
        if (eat(&p, '}')) break;
        return hfail(&p, "expected ',' or '}'");
    }
    skip_ws(&p);
    if (p.pos != p.n) return hfail(&p, "unexpected text after the dict");
    if (!seen[0] || !seen[1] || !seen[2]) return hfail(&p, "missing 'descr', 'fortran_order' or 'shape'");
    uint64_t nelem;
    if (!tps_prod_u64(h->shape, h->ndim, &nelem) || !tps_mul_u64(nelem, h->esize, &h->nbytes))
        return tps_fail(err, TPS_EINVALID, "%s: .npy shape's byte count overflows 64 bits", what);
    h->data_ofs = total;
    return TPS_OK;
}

static tps_view make_view(const tps_npy_header *h)
{
    tps_view v = {.esize = h->esize, .swap = h->swap, .ndim = h->ndim};
    memcpy(v.shape, h->shape, sizeof v.shape);
    tps_view_c_strides(&v);
    if (h->fortran) {
        uint64_t s = 1;
        for (int i = 0; i < v.ndim; i++) {
            v.stride[i] = s;
            s *= v.shape[i] ? v.shape[i] : 1;
        }
    }
    return v;
}

/* Adds a tensor for header h whose data is the view source v (zip/entry or file set). */
static tps_status add_array(tps_index *ix, const char *name, size_t name_len, const tps_npy_header *h, tps_view *v,
                            uint64_t plain_ofs, uint32_t file, tps_error *err)
{
    const tps_view *rd = NULL;
    if (!tps_view_is_plain(v)) {
        tps_status st = tps_view_state_add(ix, v, &rd, err);
        if (st) return st;
    }
    return tps_index_add_tensor(ix, name, name_len, h->dtype, h->ndim, h->shape, file, rd ? 0 : plain_ofs, rd, err);
}

tps_status tps_npz_read(tps_index *ix, tps_zip *z, uint32_t file, tps_error *err)
{
    const char *path = ix->files[file].path;
    tps_status st = TPS_OK;
    unsigned char *hb = malloc(TPS_NPY_PREFIX + TPS_NPY_MAX_HEADER);
    if (!hb) return tps_fail_oom(err, "reading .npz members");
    for (size_t i = 0; i < tps_zip_count(z); i++) {
        const tps_zip_entry *e = tps_zip_entry_at(z, i);
        char what[512];
        snprintf(what, sizeof what, "%s: member '%s'", path, e->name);
        size_t avail = e->usize < TPS_NPY_PREFIX ? (size_t)e->usize : TPS_NPY_PREFIX, need = 0;
        tps_npy_header h;
        TPS_CHECK(tps_zip_read(z, e, 0, hb, avail, err));
        TPS_CHECK(tps_npy_parse_header(hb, avail, what, &h, &need, err));
        if (!h.data_ofs) {
            if (need > e->usize) {
                st = tps_fail(err, TPS_EINVALID, "%s: .npy header needs %zu bytes but the member has %llu", what, need,
                              (unsigned long long)e->usize);
                goto cleanup;
            }
            TPS_CHECK(tps_zip_read(z, e, 0, hb, need, err));
            TPS_CHECK(tps_npy_parse_header(hb, need, what, &h, NULL, err));
        }
        uint64_t total;
        if (!tps_add_u64(h.data_ofs, h.nbytes, &total) || total != e->usize) {
            st = tps_fail(err, TPS_EINVALID, "%s: header + data should be %llu + %llu bytes but the member has %llu", what,
                          (unsigned long long)h.data_ofs, (unsigned long long)h.nbytes, (unsigned long long)e->usize);
            goto cleanup;
        }
        tps_view v = make_view(&h);
        v.zip = z;
        v.entry = e;
        v.base = h.data_ofs;
        TPS_CHECK(add_array(ix, e->name, strlen(e->name) - 4, &h, &v, e->data_ofs + h.data_ofs, file, err));
    }
    if (ix->files[file].size <= TPS_EAGER_CRC_MAX)
        for (size_t i = 0; i < tps_zip_count(z); i++) TPS_CHECK(tps_zip_verify(z, tps_zip_entry_at(z, i), err));
cleanup:
    free(hb);
    return st;
}

tps_status tps_npy_open(const char *path, tps_index **out, tps_error *err)
{
    *out = NULL;
    tps_index *ix = NULL;
    unsigned char *hb = NULL;
    uint32_t file;
    tps_status st = tps_index_new(path, "npy", &ix, err);
    if (st) return st;
    TPS_CHECK(tps_view_state_init(ix, err));
    TPS_CHECK(tps_index_add_file(ix, path, &file, err));
    const tps_source_file *f = &ix->files[file];
    size_t avail = f->size < TPS_NPY_PREFIX + TPS_NPY_MAX_HEADER ? (size_t)f->size : TPS_NPY_PREFIX + TPS_NPY_MAX_HEADER;
    if (!(hb = malloc(avail ? avail : 1))) {
        st = tps_fail_oom(err, "reading a .npy header");
        goto cleanup;
    }
    TPS_CHECK(tps_pread_full(f->fd, f->path, 0, hb, avail, err));
    tps_npy_header h;
    TPS_CHECK(tps_npy_parse_header(hb, avail, f->path, &h, NULL, err));
    uint64_t total;
    if (!tps_add_u64(h.data_ofs, h.nbytes, &total) || total != f->size) {
        st = tps_fail(err, TPS_EINVALID, "%s: header + data should be %llu + %llu bytes but the file has %llu", f->path,
                      (unsigned long long)h.data_ofs, (unsigned long long)h.nbytes, (unsigned long long)f->size);
        goto cleanup;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t blen = strlen(base);
    if (blen > 4 && strcmp(base + blen - 4, ".npy") == 0) blen -= 4;
    tps_view v = make_view(&h);
    v.file = file;
    v.base = h.data_ofs;
    TPS_CHECK(add_array(ix, base, blen, &h, &v, h.data_ofs, file, err));
    *out = ix;
    ix = NULL;
cleanup:
    free(hb);
    tps_index_free(ix);
    return st;
}
