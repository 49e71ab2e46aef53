/* tpshard.json: writing and strict loading.  The loader treats the manifest as untrusted
 * input (a shard set may come from anywhere): every field is type-checked, names are
 * bounded, partitions are re-validated against shapes and tp. */
#include "manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/buf.h"
#include "../base/checked.h"
#include "../base/json.h"
#include "../layout/layout.h" /* tps_glob_match, for "skipped" */
#include "grid_json.h"
#include "grid_stages.h"

static void jw_crc(tps_jw *w, uint32_t crc)
{
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", crc);
    tps_jw_string(w, hex);
}

static void jw_partition(tps_jw *w, const tps_partition *p)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "replicated");
    tps_jw_bool(w, p->replicated);
    if (!p->replicated) {
        tps_jw_key(w, "dim");
        tps_jw_u64(w, (uint64_t)p->dim);
        tps_jw_key(w, "pad");
        tps_jw_bool(w, p->pad);
        if (p->pad && p->pad_multiple) { /* only a serving engine's padding says it */
            tps_jw_key(w, "pad_multiple");
            tps_jw_u64(w, p->pad_multiple);
        }
        if (p->groups > 1) { /* only grouped partitions say it: older manifests stay as they were */
            tps_jw_key(w, "groups");
            tps_jw_u64(w, p->groups);
        }
        if (p->block > 1) { /* a quantized tensor's block (lib/quant/scheme.h): only those say it */
            tps_jw_key(w, "block");
            tps_jw_u64(w, p->block);
        }
        if (p->uneven) { /* the engine's ceil-division cut (lib/partition/partition.h): only those say it */
            tps_jw_key(w, "uneven");
            tps_jw_bool(w, true);
        }
        if (p->owners) { /* whole on one rank (lib/partition/partition.h): only those say it */
            tps_jw_key(w, "owners");
            tps_jw_u64(w, p->owners);
            tps_jw_key(w, "owner");
            tps_jw_u64(w, p->owner);
        }
        tps_jw_key(w, "segments");
        tps_jw_array_begin(w);
        for (int s = 0; s < p->nseg; s++) {
            tps_jw_object_begin(w);
            tps_jw_key(w, "name");
            tps_jw_string(w, p->seg[s].name);
            tps_jw_key(w, "length");
            tps_jw_u64(w, p->seg[s].length);
            tps_jw_key(w, "unit");
            tps_jw_u64(w, p->seg[s].unit);
            tps_jw_key(w, "replicate");
            tps_jw_bool(w, p->seg[s].may_replicate);
            tps_jw_object_end(w);
        }
        tps_jw_array_end(w);
    }
    tps_jw_object_end(w);
}

void tps_manifest_skipped_json(tps_jw *w, const tps_manifest *m)
{
    tps_jw_array_begin(w);
    for (size_t i = 0; i < m->nskipped; i++) {
        tps_jw_object_begin(w);
        tps_jw_key(w, "glob");
        tps_jw_string(w, m->skipped[i].glob);
        tps_jw_key(w, "count");
        tps_jw_u64(w, m->skipped[i].count);
        tps_jw_key(w, "reason");
        tps_jw_string(w, m->skipped[i].reason);
        tps_jw_object_end(w);
    }
    tps_jw_array_end(w);
}

tps_status tps_manifest_to_json(const tps_manifest *m, tps_buf *buf, tps_error *err)
{
    tps_jw w;
    tps_jw_init(&w, buf, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "format");
    tps_jw_string(&w, "tpshard");
    tps_jw_key(&w, "version");
    tps_jw_u64(&w, m->version);
    tps_jw_key(&w, "tool");
    tps_jw_string(&w, m->tool ? m->tool : "");
    tps_jw_key(&w, "tp");
    tps_jw_u64(&w, m->tp);
    if (!tps_manifest_holds_all(m)) {
        tps_jw_key(&w, "ranks_held");
        tps_jw_array_begin(&w);
        for (uint64_t r = 0; r < m->tp; r++)
            if (m->held[r]) tps_jw_u64(&w, r);
        tps_jw_array_end(&w);
    }
    tps_grid_json_top(&w, m->pp, m->pp_first);
    if (m->target) { /* only a serving engine's set says it: tpshard's own stay as they were */
        tps_jw_key(&w, "target");
        tps_jw_string(&w, m->target);
    }
    if (m->target_version) {
        tps_jw_key(&w, "target_version");
        tps_jw_string(&w, m->target_version);
    }
    if (m->nextras) {
        tps_jw_key(&w, "target_extras");
        tps_jw_array_begin(&w);
        for (size_t i = 0; i < m->nextras; i++) {
            tps_jw_object_begin(&w);
            tps_jw_key(&w, "name");
            tps_jw_string(&w, m->extras[i].name);
            tps_jw_key(&w, "value");
            tps_jw_double(&w, m->extras[i].value);
            tps_jw_object_end(&w);
        }
        tps_jw_array_end(&w);
    }
    tps_jw_key(&w, "layout");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "name");
    tps_jw_string(&w, m->layout_name ? m->layout_name : "");
    tps_jw_key(&w, "text");
    tps_jw_string(&w, m->layout_text ? m->layout_text : "");
    tps_jw_object_end(&w);
    if (m->config_keys) {
        /* Pretty like the rest: the recorded object is our own compact text, parsed again. */
        tps_json_doc *doc = NULL;
        tps_status st = tps_json_parse(m->config_keys, strlen(m->config_keys), "the recorded config", &doc, err);
        if (st) return st;
        tps_jw_key(&w, "config");
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "path");
        tps_jw_string(&w, m->config_path ? m->config_path : "");
        tps_jw_key(&w, "keys");
        tps_jw_value(&w, tps_json_root(doc));
        tps_jw_object_end(&w);
        tps_json_doc_free(doc);
    }
    if (m->nskipped) {
        tps_jw_key(&w, "skipped");
        tps_manifest_skipped_json(&w, m);
    }
    tps_jw_key(&w, "source");
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "path");
    tps_jw_string(&w, m->source.path ? m->source.path : "");
    tps_jw_key(&w, "format");
    tps_jw_string(&w, m->source.format ? m->source.format : "");
    tps_jw_key(&w, "bytes");
    tps_jw_u64(&w, m->source.bytes);
    tps_jw_key(&w, "files");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < m->source.nfiles; i++) {
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "name");
        tps_jw_string(&w, m->source.files[i].name);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, m->source.files[i].size);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    tps_jw_key(&w, "files");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < m->nfiles; i++) {
        const tps_manifest_file *f = &m->files[i];
        tps_jw_object_begin(&w);
        tps_jw_key(&w, "name");
        tps_jw_string(&w, f->name);
        tps_jw_key(&w, "rank");
        tps_jw_u64(&w, f->rank);
        tps_jw_key(&w, "part");
        tps_jw_u64(&w, f->part);
        tps_grid_json_stage(&w, "pp_rank", m->pp, f->pp_rank);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, f->size);
        tps_jw_key(&w, "crc32");
        jw_crc(&w, f->crc);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_key(&w, "tensors");
    tps_jw_array_begin(&w);
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        tps_jw_object_begin(&w);
        tps_jw_tensor_head(&w, t->name, t->dtype, t->ndim, t->shape);
        tps_jw_key(&w, "bytes");
        tps_jw_u64(&w, t->nbytes);
        tps_jw_key(&w, "crc32");
        jw_crc(&w, t->crc);
        tps_jw_key(&w, "rule");
        tps_jw_string(&w, t->rule ? t->rule : "");
        tps_jw_key(&w, "partition");
        jw_partition(&w, t->part);
        if (t->target_name) {
            tps_jw_key(&w, "target_name");
            tps_jw_string(&w, t->target_name);
            if (t->target_stack) {
                tps_jw_key(&w, "target_stack");
                tps_jw_u64(&w, t->target_stack);
            }
        }
        if (t->target_blocks) {
            tps_jw_key(&w, "target_blocks");
            tps_jw_u64(&w, t->target_blocks);
        }
        if (t->target_transpose) {
            tps_jw_key(&w, "target_transpose");
            tps_jw_bool(&w, true);
        }
        if (t->target_flatten) {
            tps_jw_key(&w, "target_flatten");
            tps_jw_bool(&w, true);
        }
        if (t->target_rank0) {
            tps_jw_key(&w, "target_rank0");
            tps_jw_bool(&w, true);
        }
        if (t->target_rope_halves) {
            tps_jw_key(&w, "target_rope_halves");
            tps_jw_bool(&w, true);
        }
        tps_grid_json_stage(&w, "pp_stage", m->pp, t->pp_stage);
        tps_jw_key(&w, "rank_shapes");
        tps_jw_array_begin(&w);
        for (uint64_t r = 0; r < m->tp; r++) {
            uint64_t rs[TPS_MAX_DIMS];
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, rs);
            tps_jw_u64_array(&w, rs, (size_t)t->ndim);
        }
        tps_jw_array_end(&w);
        tps_jw_object_end(&w);
    }
    tps_jw_array_end(&w);
    tps_jw_object_end(&w);
    tps_buf_putc(buf, '\n');
    if (buf->oom) return tps_fail_oom(err, "writing the manifest");
    return TPS_OK;
}

/* ---- loading ---- */

typedef struct loader {
    const char *path;
    tps_error *err;
    const char *text; /* the manifest's text: its tensor list is parsed one entry at a time */
    size_t len;
    tps_manifest *m;
    size_t cap; /* entries m->tensors has room for (one more, zeroed, at its end) */
} loader;

/* "PATH: byte N: FIELD: MSG", or without "FIELD: " when field is empty. */
static tps_status bad(loader *L, const tps_json *at, const char *msg, const char *field)
{
    return tps_fail(L->err, TPS_EINVALID, "%s: byte %zu: %s%s%s", L->path, at ? at->offset : 0, field,
                    *field ? ": " : "", msg);
}

static const tps_json *field(loader *L, const tps_json *obj, const char *key, tps_json_type type, tps_status *st)
{
    const tps_json *v = tps_json_get(obj, key);
    if (!v) {
        *st = tps_fail(L->err, TPS_EINVALID, "%s: byte %zu: missing field '%s'", L->path, obj->offset, key);
        return NULL;
    }
    if (v->type != type) {
        *st = tps_fail(L->err, TPS_EINVALID, "%s: byte %zu: field '%s' has the wrong type", L->path, v->offset, key);
        return NULL;
    }
    return v;
}

static char *dup_json_string(loader *L, const tps_json *v, tps_status *st)
{
    if (strlen(v->u.string.s) != v->u.string.len) {
        *st = bad(L, v, "a string contains a NUL byte", "");
        return NULL;
    }
    char *s = strdup(v->u.string.s);
    if (!s) *st = tps_fail_oom(L->err, "loading the manifest");
    return s;
}

/* A tensor's name (intern false) or rule (intern true), in the manifest's string pool. */
static char *pool_json_string(loader *L, const tps_json *v, bool intern, tps_status *st)
{
    if (strlen(v->u.string.s) != v->u.string.len) {
        *st = bad(L, v, "a string contains a NUL byte", "");
        return NULL;
    }
    char *s = intern ? tps_strpool_intern(L->m->strings, v->u.string.s, v->u.string.len)
                     : tps_strpool_add(L->m->strings, v->u.string.s, v->u.string.len);
    if (!s) *st = tps_fail_oom(L->err, "loading the manifest");
    return s;
}

#define NEED(v) \
    do {        \
        if (!(v)) goto cleanup; \
    } while (0)

static tps_status get_u64(loader *L, const tps_json *obj, const char *key, uint64_t *out)
{
    tps_status st = TPS_OK;
    const tps_json *v = field(L, obj, key, TPS_JSON_NUMBER, &st);
    if (!v) return st;
    if (!v->u.number.is_u64) return bad(L, v, "not a non-negative integer", key);
    *out = v->u.number.u64;
    return TPS_OK;
}

static tps_status get_bool(loader *L, const tps_json *obj, const char *key, bool *out)
{
    tps_status st = TPS_OK;
    const tps_json *v = field(L, obj, key, TPS_JSON_BOOL, &st);
    if (!v) return st;
    *out = v->u.boolean;
    return TPS_OK;
}

static tps_status get_crc(loader *L, const tps_json *obj, uint32_t *out)
{
    tps_status st = TPS_OK;
    const tps_json *v = field(L, obj, "crc32", TPS_JSON_STRING, &st);
    if (!v) return st;
    unsigned x = 0;
    if (v->u.string.len != 8) return bad(L, v, "crc32 must be 8 hex digits", "");
    for (int i = 0; i < 8; i++) {
        char c = v->u.string.s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return bad(L, v, "crc32 must be 8 lowercase hex digits", "");
        x = x * 16 + (unsigned)d;
    }
    *out = x;
    return TPS_OK;
}

static tps_status get_shape(loader *L, const tps_json *v, uint64_t *shape, int *ndim)
{
    if (v->type != TPS_JSON_ARRAY || v->u.array.n > TPS_MAX_DIMS) return bad(L, v, "a shape must be an array of at most 16 integers", "");
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64) return bad(L, e, "bad shape entry", "");
        shape[i] = e->u.number.u64;
    }
    *ndim = (int)v->u.array.n;
    return TPS_OK;
}

static bool plain_file_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

static tps_status load_partition(loader *L, const tps_json *pj, tps_partition *p)
{
    tps_status st = TPS_OK;
    memset(p, 0, sizeof *p);
    if (pj->type != TPS_JSON_OBJECT) return bad(L, pj, "partition must be an object", "");
    TPS_CHECK(get_bool(L, pj, "replicated", &p->replicated));
    if (p->replicated) return TPS_OK;
    uint64_t dim;
    TPS_CHECK(get_u64(L, pj, "dim", &dim));
    if (dim >= TPS_MAX_DIMS) return bad(L, pj, "dim out of range", "");
    p->dim = (int)dim;
    TPS_CHECK(get_bool(L, pj, "pad", &p->pad));
    if (tps_json_get(pj, "pad_multiple")) { /* optional: a serving engine's vocabulary quantum */
        TPS_CHECK(get_u64(L, pj, "pad_multiple", &p->pad_multiple));
        if (!p->pad || p->pad_multiple < 1 || p->pad_multiple > (1u << 20))
            return bad(L, tps_json_get(pj, "pad_multiple"), "must be 1 to 1048576, with pad", "pad_multiple");
    }
    if (tps_json_get(pj, "groups")) { /* optional: a grouped partition's group count, at least 2 */
        TPS_CHECK(get_u64(L, pj, "groups", &p->groups));
        if (p->groups < 2) return bad(L, tps_json_get(pj, "groups"), "must be at least 2", "groups");
    }
    if (tps_json_get(pj, "block")) { /* optional: a quantization block, at least 2 */
        TPS_CHECK(get_u64(L, pj, "block", &p->block));
        if (p->block < 2) return bad(L, tps_json_get(pj, "block"), "must be at least 2", "block");
    }
    if (tps_json_get(pj, "uneven")) TPS_CHECK(get_bool(L, pj, "uneven", &p->uneven)); /* optional */
    if (tps_json_get(pj, "owners")) { /* optional: whole on one rank, item owner of owners */
        TPS_CHECK(get_u64(L, pj, "owners", &p->owners));
        TPS_CHECK(get_u64(L, pj, "owner", &p->owner));
        if (p->owners < 1 || p->owner >= p->owners)
            return bad(L, tps_json_get(pj, "owner"), "must be below owners (at least 1)", "owner");
    }
    const tps_json *segs = field(L, pj, "segments", TPS_JSON_ARRAY, &st);
    NEED(segs);
    if (segs->u.array.n < 1 || segs->u.array.n > TPS_MAX_SEGMENTS) return bad(L, segs, "1 to 8 segments", "");
    p->nseg = (int)segs->u.array.n;
    for (int s = 0; s < p->nseg; s++) {
        const tps_json *sj = segs->u.array.items[s];
        if (sj->type != TPS_JSON_OBJECT) return bad(L, sj, "segment must be an object", "");
        const tps_json *nm = field(L, sj, "name", TPS_JSON_STRING, &st);
        NEED(nm);
        if (nm->u.string.len >= sizeof p->seg[s].name) return bad(L, nm, "segment name too long", "");
        memcpy(p->seg[s].name, nm->u.string.s, nm->u.string.len + 1);
        TPS_CHECK(get_u64(L, sj, "length", &p->seg[s].length));
        TPS_CHECK(get_u64(L, sj, "unit", &p->seg[s].unit));
        TPS_CHECK(get_bool(L, sj, "replicate", &p->seg[s].may_replicate));
    }
cleanup:
    return st;
}

static tps_status load_tensor(loader *L, const tps_json *tj, uint64_t tp, tps_manifest_tensor *t)
{
    tps_status st = TPS_OK;
    if (tj->type != TPS_JSON_OBJECT) return bad(L, tj, "tensor entry must be an object", "");
    const tps_json *v = field(L, tj, "name", TPS_JSON_STRING, &st);
    NEED(v);
    NEED(t->name = pool_json_string(L, v, false, &st));
    v = field(L, tj, "dtype", TPS_JSON_STRING, &st);
    NEED(v);
    if (!tps_dtype_parse(v->u.string.s, v->u.string.len, &t->dtype))
        return tps_fail(L->err, TPS_EINVALID, "%s: byte %zu: unknown dtype '%.40s'", L->path, v->offset, v->u.string.s);
    v = field(L, tj, "shape", TPS_JSON_ARRAY, &st);
    NEED(v);
    TPS_CHECK(get_shape(L, v, t->shape, &t->ndim));
    TPS_CHECK(get_u64(L, tj, "bytes", &t->nbytes));
    TPS_CHECK(get_crc(L, tj, &t->crc));
    v = field(L, tj, "rule", TPS_JSON_STRING, &st);
    NEED(v);
    NEED(t->rule = pool_json_string(L, v, true, &st));
    v = field(L, tj, "partition", TPS_JSON_OBJECT, &st);
    NEED(v);
    tps_partition part;
    TPS_CHECK(load_partition(L, v, &part));
    TPS_CHECK(tps_manifest_set_part(L->m, t, &part, L->err));
    if (tps_json_get(tj, "target_name")) { /* optional: a serving engine's name (lib/targets/target.h) */
        NEED(v = field(L, tj, "target_name", TPS_JSON_STRING, &st));
        NEED(t->target_name = dup_json_string(L, v, &st));
        if (tps_json_get(tj, "target_stack")) TPS_CHECK(get_u64(L, tj, "target_stack", &t->target_stack));
    }
    if (tps_json_get(tj, "target_blocks")) TPS_CHECK(get_u64(L, tj, "target_blocks", &t->target_blocks));
    if ((v = tps_json_get(tj, "target_transpose"))) {
        if (v->type != TPS_JSON_BOOL)
            return tps_fail(L->err, TPS_EINVALID, "%s: tensor '%s': target_transpose is true or false", L->path, t->name);
        t->target_transpose = v->u.boolean;
    }
    if ((v = tps_json_get(tj, "target_flatten"))) {
        if (v->type != TPS_JSON_BOOL)
            return tps_fail(L->err, TPS_EINVALID, "%s: tensor '%s': target_flatten is true or false", L->path, t->name);
        t->target_flatten = v->u.boolean;
    }
    if ((v = tps_json_get(tj, "target_rank0"))) {
        if (v->type != TPS_JSON_BOOL)
            return tps_fail(L->err, TPS_EINVALID, "%s: tensor '%s': target_rank0 is true or false", L->path, t->name);
        t->target_rank0 = v->u.boolean;
    }
    if ((v = tps_json_get(tj, "target_rope_halves"))) {
        if (v->type != TPS_JSON_BOOL)
            return tps_fail(L->err, TPS_EINVALID, "%s: tensor '%s': target_rope_halves is true or false", L->path,
                            t->name);
        t->target_rope_halves = v->u.boolean;
    }
    char stage_of[1200];
    snprintf(stage_of, sizeof stage_of, "tensor '%.1000s'", t->name);
    TPS_CHECK(tps_grid_json_load_stage(tj, "pp_stage", L->m->pp, stage_of, L->path, &t->pp_stage, L->err));
    uint64_t nelem, nbytes;
    char what[2600];
    snprintf(what, sizeof what, "%.2000s: tensor '%.400s'", L->path, t->name);
    if (!tps_prod_u64(t->shape, t->ndim, &nelem)) return tps_fail(L->err, TPS_EINVALID, "%s: shape overflows", what);
    TPS_CHECK(tps_dtype_nbytes(t->dtype, nelem, &nbytes, what, L->err));
    if (nbytes != t->nbytes)
        return tps_fail(L->err, TPS_EINVALID, "%s: bytes %llu but dtype and shape give %llu", what,
                        (unsigned long long)t->nbytes, (unsigned long long)nbytes);
    tps_error perr;
    tps_error_clear(&perr);
    if (tps_partition_check(t->part, t->name, t->dtype, t->ndim, t->shape, tp, &perr))
        return tps_fail(L->err, perr.code, "%s: %s", L->path, perr.msg);
    v = field(L, tj, "rank_shapes", TPS_JSON_ARRAY, &st);
    NEED(v);
    if (v->u.array.n != tp) return tps_fail(L->err, TPS_EINVALID, "%s: rank_shapes has %zu entries for tp %llu", what, v->u.array.n, (unsigned long long)tp);
    for (uint64_t r = 0; r < tp; r++) {
        uint64_t got[TPS_MAX_DIMS], want[TPS_MAX_DIMS];
        int nd;
        TPS_CHECK(get_shape(L, v->u.array.items[r], got, &nd));
        tps_partition_rank_shape(t->part, t->ndim, t->shape, tp, r, want);
        if (nd != t->ndim || memcmp(got, want, sizeof(uint64_t) * (size_t)nd) != 0) {
            char gs[256], ws[256];
            tps_shape_str(got, nd, gs, sizeof gs);
            tps_shape_str(want, t->ndim, ws, sizeof ws);
            return tps_fail(L->err, TPS_EINVALID, "%s: rank %llu shape %s disagrees with its partition, which gives %s",
                            what, (unsigned long long)r, gs, ws);
        }
    }
cleanup:
    return st;
}

/* Tensor entry i, as tps_json_each hands it over (its parse tree is freed after it). */
static tps_status load_tensor_at(void *ctx, size_t i, const tps_json *tj)
{
    loader *L = ctx;
    tps_manifest *m = L->m;
    if (i >= L->cap) {
        size_t cap = 2 * L->cap + 16;
        tps_manifest_tensor *t = cap < SIZE_MAX / sizeof *t ? realloc(m->tensors, (cap + 1) * sizeof *t) : NULL;
        if (!t) return tps_fail_oom(L->err, "loading the manifest");
        memset(t + L->cap + 1, 0, (cap - L->cap) * sizeof *t);
        m->tensors = t;
        L->cap = cap;
    }
    m->ntensors = i + 1;
    return load_tensor(L, tj, m->tp, &m->tensors[i]);
}

static int cmp_file(const void *a, const void *b)
{
    const tps_manifest_file *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->part < y->part ? -1 : x->part > y->part;
}

/* "config": {"path": "...", "keys": {...}}; the keys are checked when verify applies them,
 * by the code that reads a config.json. */
static tps_status load_config(loader *L, const tps_json *root, tps_manifest *m)
{
    tps_status st = TPS_OK;
    const tps_json *cfg = field(L, root, "config", TPS_JSON_OBJECT, &st), *v, *keys;
    NEED(cfg);
    NEED(v = field(L, cfg, "path", TPS_JSON_STRING, &st));
    NEED(m->config_path = dup_json_string(L, v, &st));
    NEED(keys = field(L, cfg, "keys", TPS_JSON_OBJECT, &st));
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_value(&w, keys);
    if (!tps_buf_cstr(&b)) {
        tps_buf_release(&b);
        return tps_fail_oom(L->err, "loading the manifest");
    }
    m->config_keys = b.data;
cleanup:
    return st;
}

/* "skipped": [{"glob": "...", "count": N, "reason": "..."}, ...]: optional, and when there a
 * non-empty list whose counts are at least 1 (the writer records only globs that matched). */
static tps_status load_skipped(loader *L, const tps_json *root, tps_manifest *m)
{
    tps_status st = TPS_OK;
    const tps_json *v = tps_json_get(root, "skipped");
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_ARRAY || v->u.array.n == 0)
        return bad(L, v, "must be a non-empty array of {glob, count, reason}", "skipped");
    if (!(m->skipped = calloc(v->u.array.n, sizeof *m->skipped))) return tps_fail_oom(L->err, "loading the manifest");
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i], *f;
        tps_manifest_skip *sk = &m->skipped[i];
        if (e->type != TPS_JSON_OBJECT) return bad(L, e, "each entry must be an object", "skipped");
        m->nskipped = i + 1;
        NEED(f = field(L, e, "glob", TPS_JSON_STRING, &st));
        NEED(sk->glob = dup_json_string(L, f, &st));
        TPS_CHECK(get_u64(L, e, "count", &sk->count));
        if (sk->count == 0) return bad(L, tps_json_get(e, "count"), "must be at least 1", "skipped: count");
        NEED(f = field(L, e, "reason", TPS_JSON_STRING, &st));
        NEED(sk->reason = dup_json_string(L, f, &st));
    }
cleanup:
    return st;
}

/* "ranks_held": the ranks of a partial set, ascending, each once, at least one; a list of
 * every rank is a full set (held stays NULL). */
/* "target_version" and "target_extras" (optional; only beside "target"). */
static tps_status load_target_extras(loader *L, const tps_json *root, tps_manifest *m)
{
    tps_status st = TPS_OK;
    const tps_json *v, *x = tps_json_get(root, "target_extras");
    if (tps_json_get(root, "target_version")) {
        NEED(v = field(L, root, "target_version", TPS_JSON_STRING, &st));
        NEED(m->target_version = dup_json_string(L, v, &st));
    }
    if (!x) return TPS_OK;
    if (!tps_json_get(root, "target")) return bad(L, x, "extras without a target", "target_extras");
    NEED(x = field(L, root, "target_extras", TPS_JSON_ARRAY, &st));
    if (!(m->extras = calloc(x->u.array.n + 1, sizeof *m->extras))) return tps_fail_oom(L->err, "loading the manifest");
    for (size_t i = 0; i < x->u.array.n; i++) {
        const tps_json *e = x->u.array.items[i];
        if (e->type != TPS_JSON_OBJECT) return bad(L, e, "each entry is {name, value}", "target_extras");
        m->nextras = i + 1;
        NEED(v = field(L, e, "name", TPS_JSON_STRING, &st));
        NEED(m->extras[i].name = dup_json_string(L, v, &st));
        NEED(v = field(L, e, "value", TPS_JSON_NUMBER, &st));
        m->extras[i].value = v->u.number.f64;
    }
cleanup:
    return st;
}

static tps_status load_held(loader *L, const tps_json *root, tps_manifest *m)
{
    const tps_json *v = tps_json_get(root, "ranks_held");
    if (!v) return TPS_OK;
    if (v->type != TPS_JSON_ARRAY || v->u.array.n == 0)
        return bad(L, v, "must be a non-empty array of ranks", "ranks_held");
    if (!(m->held = calloc(m->tp, sizeof *m->held))) return tps_fail_oom(L->err, "loading the manifest");
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_NUMBER || !e->u.number.is_u64 || e->u.number.u64 >= m->tp)
            return bad(L, e, "each entry must be a rank below tp", "ranks_held");
        if (i > 0 && e->u.number.u64 <= v->u.array.items[i - 1]->u.number.u64)
            return bad(L, e, "ranks must be ascending, each listed once", "ranks_held");
        m->held[e->u.number.u64] = true;
    }
    if (v->u.array.n == m->tp) {
        free(m->held);
        m->held = NULL;
    }
    return TPS_OK;
}

/* A TP x PP grid's facts against each other (lib/set/grid_json.h): each tensor on its layer's
 * stage, tensors stage by stage, every rank with files for every stage in order. */
static tps_status grid_validate(const tps_manifest *m, const char *path, tps_error *err)
{
    if (m->pp <= 1) return TPS_OK;
    uint64_t layer;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        uint64_t want = tps_grid_stage_of(m->pp, m->pp_first, t->name);
        if (tps_grid_layer_of(t->name, &layer) && layer >= m->pp_first[m->pp])
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is of layer %llu but pp_layers hold %llu", path,
                            t->name, (unsigned long long)layer, (unsigned long long)m->pp_first[m->pp]);
        if (t->pp_stage != want)
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is on stage %llu but pp_layers put it on stage %llu",
                            path, t->name, (unsigned long long)t->pp_stage, (unsigned long long)want);
        if (i && t->pp_stage < m->tensors[i - 1].pp_stage)
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' (stage %llu) follows one of stage %llu: a grid's "
                            "tensors go stage by stage", path, t->name, (unsigned long long)t->pp_stage,
                            (unsigned long long)m->tensors[i - 1].pp_stage);
    }
    for (size_t i = 0; i < m->nfiles; i++) { /* sorted by (rank, part) */
        const tps_manifest_file *f = &m->files[i];
        bool first = i == 0 || m->files[i - 1].rank != f->rank;
        uint64_t prev = first ? 0 : m->files[i - 1].pp_rank;
        if (first ? f->pp_rank != 0 : (f->pp_rank != prev && f->pp_rank != prev + 1))
            return tps_fail(err, TPS_EINVALID, "%s: rank %llu has no file for stage %llu (next: '%s', stage %llu)",
                            path, (unsigned long long)f->rank, (unsigned long long)(first ? 0 : prev + 1), f->name,
                            (unsigned long long)f->pp_rank);
        bool last = i + 1 == m->nfiles || m->files[i + 1].rank != f->rank;
        if (last && f->pp_rank != m->pp - 1)
            return tps_fail(err, TPS_EINVALID, "%s: rank %llu has no file for stage %llu", path,
                            (unsigned long long)f->rank, (unsigned long long)(f->pp_rank + 1));
    }
    return TPS_OK;
}

static tps_status load_doc(loader *L, const tps_json *root, tps_manifest *m)
{
    tps_status st = TPS_OK;
    if (root->type != TPS_JSON_OBJECT) return bad(L, root, "the manifest must be a JSON object", "");
    const tps_json *v = field(L, root, "format", TPS_JSON_STRING, &st);
    NEED(v);
    if (strcmp(v->u.string.s, "tpshard") != 0) return bad(L, v, "format is not \"tpshard\"", "");
    TPS_CHECK(get_u64(L, root, "version", &m->version));
    if (m->version != TPS_MANIFEST_VERSION)
        return tps_fail(L->err, TPS_EINVALID, "%s: manifest version %llu; this tpshard reads version %d", L->path,
                        (unsigned long long)m->version, TPS_MANIFEST_VERSION);
    TPS_CHECK(get_u64(L, root, "tp", &m->tp));
    if (m->tp < 1 || m->tp > TPS_MAX_TP) return bad(L, tps_json_get(root, "tp"), "must be 1 to 65536", "tp");
    TPS_CHECK(load_held(L, root, m));
    TPS_CHECK(tps_grid_json_load_top(root, L->path, &m->pp, &m->pp_first, L->err));
    if (tps_json_get(root, "target")) { /* optional: absent for tpshard's own sets */
        NEED(v = field(L, root, "target", TPS_JSON_STRING, &st));
        NEED(m->target = dup_json_string(L, v, &st));
    }
    TPS_CHECK(load_target_extras(L, root, m));
    v = field(L, root, "tool", TPS_JSON_STRING, &st);
    NEED(v);
    NEED(m->tool = dup_json_string(L, v, &st));
    const tps_json *lay = field(L, root, "layout", TPS_JSON_OBJECT, &st);
    NEED(lay);
    NEED(v = field(L, lay, "name", TPS_JSON_STRING, &st));
    NEED(m->layout_name = dup_json_string(L, v, &st));
    NEED(v = field(L, lay, "text", TPS_JSON_STRING, &st));
    NEED(m->layout_text = dup_json_string(L, v, &st));
    if (tps_json_get(root, "config")) /* optional: absent when the split read no config.json */
        TPS_CHECK(load_config(L, root, m));
    TPS_CHECK(load_skipped(L, root, m));
    const tps_json *src = field(L, root, "source", TPS_JSON_OBJECT, &st);
    NEED(src);
    NEED(v = field(L, src, "path", TPS_JSON_STRING, &st));
    NEED(m->source.path = dup_json_string(L, v, &st));
    NEED(v = field(L, src, "format", TPS_JSON_STRING, &st));
    NEED(m->source.format = dup_json_string(L, v, &st));
    TPS_CHECK(get_u64(L, src, "bytes", &m->source.bytes));
    const tps_json *sf = field(L, src, "files", TPS_JSON_ARRAY, &st);
    NEED(sf);
    m->source.files = calloc(sf->u.array.n + 1, sizeof *m->source.files);
    if (!m->source.files) return tps_fail_oom(L->err, "loading the manifest");
    for (size_t i = 0; i < sf->u.array.n; i++) {
        const tps_json *fj = sf->u.array.items[i];
        if (fj->type != TPS_JSON_OBJECT) return bad(L, fj, "source file entry must be an object", "");
        NEED(v = field(L, fj, "name", TPS_JSON_STRING, &st));
        m->source.nfiles = i + 1;
        NEED(m->source.files[i].name = dup_json_string(L, v, &st));
        TPS_CHECK(get_u64(L, fj, "bytes", &m->source.files[i].size));
    }
    const tps_json *files = field(L, root, "files", TPS_JSON_ARRAY, &st);
    NEED(files);
    m->files = calloc(files->u.array.n + 1, sizeof *m->files);
    if (!m->files) return tps_fail_oom(L->err, "loading the manifest");
    for (size_t i = 0; i < files->u.array.n; i++) {
        const tps_json *fj = files->u.array.items[i];
        tps_manifest_file *f = &m->files[i];
        if (fj->type != TPS_JSON_OBJECT) return bad(L, fj, "file entry must be an object", "");
        NEED(v = field(L, fj, "name", TPS_JSON_STRING, &st));
        m->nfiles = i + 1;
        NEED(f->name = dup_json_string(L, v, &st));
        if (!plain_file_name(f->name))
            return tps_fail(L->err, TPS_EINVALID, "%s: file name '%s' is not a plain name inside the shard set",
                            L->path, f->name);
        TPS_CHECK(get_u64(L, fj, "rank", &f->rank));
        TPS_CHECK(get_u64(L, fj, "part", &f->part));
        char stage_of[1200];
        snprintf(stage_of, sizeof stage_of, "file '%.1000s'", f->name);
        TPS_CHECK(tps_grid_json_load_stage(fj, "pp_rank", m->pp, stage_of, L->path, &f->pp_rank, L->err));
        TPS_CHECK(get_u64(L, fj, "bytes", &f->size));
        TPS_CHECK(get_crc(L, fj, &f->crc));
        if (f->rank >= m->tp)
            return tps_fail(L->err, TPS_EINVALID, "%s: file '%s' is for rank %llu but tp is %llu", L->path, f->name,
                            (unsigned long long)f->rank, (unsigned long long)m->tp);
    }
    qsort(m->files, m->nfiles, sizeof *m->files, cmp_file);
    for (size_t i = 1; i < m->nfiles; i++) { /* sorted: a repeated (rank, part) is adjacent */
        const tps_manifest_file *f = &m->files[i];
        if (m->files[i - 1].rank == f->rank && m->files[i - 1].part == f->part)
            return tps_fail(L->err, TPS_EINVALID, "%s: file '%s' (rank %llu part %llu) is listed twice", L->path,
                            f->name, (unsigned long long)f->rank, (unsigned long long)f->part);
    }
    for (uint64_t r = 0, i = 0; r < m->tp; r++) {
        uint64_t part = 0;
        for (; i < m->nfiles && m->files[i].rank == r; i++, part++)
            if (m->files[i].part != part)
                return tps_fail(L->err, TPS_EINVALID, "%s: rank %llu lacks part %llu", L->path, (unsigned long long)r,
                                (unsigned long long)part);
        if (part == 0)
            return tps_fail(L->err, TPS_EINVALID, "%s: no file for rank %llu of %llu", L->path, (unsigned long long)r,
                            (unsigned long long)m->tp);
    }
    const tps_json *tensors = field(L, root, "tensors", TPS_JSON_ARRAY, &st);
    NEED(tensors);
    /* The count is the scan's, from commas: a valid entry takes well over 32 bytes of text,
     * so more than that is room for entries that are not there (a run of commas), and the
     * array grows as entries are loaded instead; a valid manifest gets its exact size. */
    L->cap = tensors->u.array.n <= L->len / 32 ? tensors->u.array.n : L->len / 32;
    m->tensors = calloc(L->cap + 1, sizeof *m->tensors);
    if (!m->tensors) return tps_fail_oom(L->err, "loading the manifest");
    TPS_CHECK(tps_json_each(L->text, L->len, L->path, tensors, load_tensor_at, L, L->err));
    TPS_CHECK(grid_validate(m, L->path, L->err));
    TPS_CHECK(tps_manifest_index(m, L->path, L->err));
cleanup:
    return st;
}

tps_status tps_manifest_parse(const char *text, size_t len, const char *what, tps_manifest **out, tps_error *err)
{
    *out = NULL;
    tps_json_doc *doc = NULL;
    tps_manifest *m = NULL;
    tps_status st = TPS_OK;
    /* The tensor list is most of the text, and its parse tree would be several times what
     * is kept of it: it is parsed one entry at a time (docs/design.md, "The manifest in memory"). */
    TPS_CHECK(tps_json_parse_lazy(text, len, what, "tensors", &doc, err));
    m = calloc(1, sizeof *m);
    if (!m || !(m->strings = tps_strpool_new())) {
        st = tps_fail_oom(err, "loading the manifest");
        goto cleanup;
    }
    loader L = {what, err, text, len, m, 0};
    TPS_CHECK(load_doc(&L, tps_json_root(doc), m));
    *out = m;
    m = NULL;
cleanup:
    tps_manifest_free(m);
    tps_json_doc_free(doc);
    return st;
}

/* Whether dir's last component is an output directory still being written, or left by a
 * killed run: ".NAME.tpshard-tmp.PID" (lib/engine/outdir.c), or its ".old" aside copy. */
static bool is_unpublished_dir(const char *dir, long *pid)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    const char *base = dir + b, *tag = ".tpshard-tmp.";
    if (base[0] != '.') return false;
    for (const char *p = base + 1; p < dir + n; p++) {
        if (strncmp(p, tag, strlen(tag)) != 0) continue;
        char *end;
        *pid = strtol(p + strlen(tag), &end, 10);
        if (end > p + strlen(tag) && (end == dir + n || (strncmp(end, ".old", 4) == 0 && end + 4 == dir + n)))
            return true;
    }
    return false;
}

bool tps_is_shard_set(const char *dir)
{
    char path[4096];
    struct stat sb;
    return snprintf(path, sizeof path, "%s/%s", dir, TPS_MANIFEST_NAME) < (int)sizeof path && stat(path, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

tps_status tps_manifest_load(const char *dir, tps_manifest **out, tps_error *err)
{
    *out = NULL;
    long pid;
    if (is_unpublished_dir(dir, &pid))
        return tps_fail(err, TPS_EINVALID,
                        "%s: not a shard set: the temporary directory of a tpshard run (process %ld) that was never "
                        "published, or was interrupted", dir, pid);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, TPS_MANIFEST_NAME) >= (int)sizeof path)
        return tps_fail(err, TPS_EINVALID, "%s: path too long", dir);
    tps_index *holder = NULL;
    char *text = NULL;
    uint32_t fid;
    tps_status st = TPS_OK;
    struct stat sb;
    if (stat(path, &sb) != 0 && stat(dir, &sb) == 0)
        return tps_fail(err, TPS_EINVALID, "%s: not a tpshard shard set (no %s)", dir, TPS_MANIFEST_NAME);
    TPS_CHECK(tps_index_new(path, "manifest", &holder, err));
    TPS_CHECK(tps_index_add_file(holder, path, &fid, err));
    uint64_t size = holder->files[0].size;
    if (size > 1ull << 30) {
        st = tps_fail(err, TPS_EINVALID, "%s: manifest of %llu bytes is implausibly large", path, (unsigned long long)size);
        goto cleanup;
    }
    text = malloc((size_t)size + 1);
    if (!text) {
        st = tps_fail_oom(err, "reading the manifest");
        goto cleanup;
    }
    TPS_CHECK(tps_pread_full(holder->files[0].fd, path, 0, text, (size_t)size, err));
    TPS_CHECK(tps_manifest_parse(text, (size_t)size, path, out, err));
cleanup:
    free(text);
    tps_index_free(holder);
    return st;
}

tps_status tps_manifest_index(tps_manifest *m, const char *what, tps_error *err)
{
    tps_name_hash_free(&m->tensor_names);
    tps_name_hash_free(&m->file_names);
    m->tensor_names = (tps_name_hash)TPS_NAME_HASH_INIT(tps_manifest_tensor, name);
    m->file_names = (tps_name_hash)TPS_NAME_HASH_INIT(tps_manifest_file, name);
    size_t dup;
    for (size_t i = 0; i < m->nfiles; i++) {
        if (!tps_name_hash_add(&m->file_names, m->files, i, &dup)) return tps_fail_oom(err, "indexing the manifest");
        if (dup != SIZE_MAX)
            return tps_fail(err, TPS_EINVALID, "%s: file '%s' (rank %llu part %llu) is listed twice", what,
                            m->files[i].name, (unsigned long long)m->files[i].rank, (unsigned long long)m->files[i].part);
    }
    for (size_t i = 0; i < m->ntensors; i++) {
        if (!tps_name_hash_add(&m->tensor_names, m->tensors, i, &dup)) return tps_fail_oom(err, "indexing the manifest");
        if (dup != SIZE_MAX) return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is listed twice", what, m->tensors[i].name);
    }
    return TPS_OK;
}

const tps_manifest_tensor *tps_manifest_find(const tps_manifest *m, const char *name)
{
    if (!m->tensor_names.cap) {
        for (size_t i = 0; i < m->ntensors; i++)
            if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
        return NULL;
    }
    size_t i = tps_name_hash_find(&m->tensor_names, m->tensors, name);
    return i == SIZE_MAX ? NULL : &m->tensors[i];
}

const tps_manifest_file *tps_manifest_find_file(const tps_manifest *m, const char *name)
{
    if (!m->file_names.cap) {
        for (size_t i = 0; i < m->nfiles; i++)
            if (strcmp(m->files[i].name, name) == 0) return &m->files[i];
        return NULL;
    }
    size_t i = tps_name_hash_find(&m->file_names, m->files, name);
    return i == SIZE_MAX ? NULL : &m->files[i];
}

void tps_manifest_free(tps_manifest *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->ntensors; i++) {
        if (!m->strings) {
            free(m->tensors[i].name);
            free(m->tensors[i].rule);
        }
        free(m->tensors[i].target_name);
    }
    tps_strpool_unref(m->strings);
    free(m->target);
    free(m->target_version);
    for (size_t i = 0; i < m->nextras; i++) free(m->extras[i].name);
    free(m->extras);
    free(m->pp_first);
    for (size_t i = 0; i < m->nfiles; i++) free(m->files[i].name);
    for (size_t i = 0; i < m->source.nfiles; i++) free(m->source.files[i].name);
    free(m->source.files);
    free(m->source.path);
    free(m->source.format);
    free(m->tensors);
    free(m->files);
    free(m->tool);
    free(m->layout_name);
    free(m->layout_text);
    free(m->config_path);
    free(m->config_keys);
    for (size_t i = 0; i < m->nskipped; i++) {
        free(m->skipped[i].glob);
        free(m->skipped[i].reason);
    }
    free(m->skipped);
    free(m->held);
    tps_name_hash_free(&m->tensor_names);
    tps_name_hash_free(&m->file_names);
    tps_partpool_unref(m->parts);
    free(m);
}

const tps_manifest_skip *tps_manifest_skipped(const tps_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->nskipped; i++)
        if (tps_glob_match(m->skipped[i].glob, name)) return &m->skipped[i];
    return NULL;
}

bool tps_manifest_holds_all(const tps_manifest *m)
{
    for (uint64_t r = 0; m->held && r < m->tp; r++)
        if (!m->held[r]) return false;
    return true;
}

bool tps_manifest_holds(const tps_manifest *m, uint64_t r)
{
    return r < m->tp && (!m->held || m->held[r]);
}

void tps_manifest_held_str(const tps_manifest *m, char *out, size_t size)
{
    size_t len = 0;
    out[0] = '\0';
    for (uint64_t r = 0; r < m->tp && len < size; r++) {
        if (!tps_manifest_holds(m, r)) continue;
        uint64_t e = r;
        while (e + 1 < m->tp && tps_manifest_holds(m, e + 1)) e++;
        int n = e == r ? snprintf(out + len, size - len, "%s%llu", len ? "," : "", (unsigned long long)r)
                       : snprintf(out + len, size - len, "%s%llu-%llu", len ? "," : "", (unsigned long long)r,
                                  (unsigned long long)e);
        if (n < 0) break;
        len += (size_t)n;
        r = e;
    }
}

tps_status tps_manifest_set_part(tps_manifest *m, tps_manifest_tensor *t, const tps_partition *p, tps_error *err)
{
    if (!m->parts && !(m->parts = tps_partpool_new())) return tps_fail_oom(err, "storing a partition");
    const tps_partition *pooled = tps_partpool_intern(m->parts, p);
    if (!pooled) return tps_fail_oom(err, "storing a partition");
    t->part = pooled;
    return TPS_OK;
}

tps_status tps_manifest_set_pad_multiple(tps_manifest *m, tps_manifest_tensor *t, uint64_t q, tps_error *err)
{
    if (!t->part->pad || t->part->replicated || t->part->pad_multiple == q) return TPS_OK;
    tps_partition p = *t->part;
    p.pad_multiple = q;
    return tps_manifest_set_part(m, t, &p, err);
}

tps_status tps_manifest_rank_bytes(const tps_manifest *m, size_t i, uint64_t r, uint64_t *out, tps_error *err)
{
    const tps_manifest_tensor *t = &m->tensors[i];
    uint64_t shape[TPS_MAX_DIMS], nelem;
    tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, shape);
    if (!tps_prod_u64(shape, t->ndim, &nelem)) return tps_fail(err, TPS_EINVALID, "tensor '%s' is too large", t->name);
    return tps_dtype_nbytes(t->dtype, nelem, out, t->name, err);
}
