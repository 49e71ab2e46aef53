/* Rank files of a target (lib/targets/target_files.h). */
#include "target_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/crc.h"
#include "../set/parts.h"
#include "target_blocks.h"

/* ---- runs of members ---- */

static size_t run_end(const tps_manifest *m, size_t i)
{
    const char *n = m->tensors[i].target_name;
    size_t j = i + 1;
    while (n && j < m->ntensors && m->tensors[j].target_name && strcmp(m->tensors[j].target_name, n) == 0) j++;
    return j;
}

/* Whether rank r's files hold any of t (a tensor whole on another rank holds nothing there). */
static bool held(const tps_manifest *m, const tps_manifest_tensor *t, uint64_t r)
{
    return !t->part->owners || t->part->replicated || tps_partition_owner_rank(t->part, m->tp) == r;
}

/* The shape rank r's files give run [i, j).  A stacked group whole on another rank
 * (expert parallelism: lib/partition/partition.h, owners) is not in r's stack; its members all
 * go to one rank or the run is refused. */
static tps_status run_shape(const tps_manifest *m, size_t i, size_t j, uint64_t r, uint64_t *out, int *nd,
                            tps_error *err)
{
    const tps_manifest_tensor *h = &m->tensors[i];
    uint64_t S = h->target_stack ? h->target_stack : 1;
    if ((j - i) % S != 0)
        return tps_fail(err, TPS_EINVALID, "target tensor '%s': %zu members do not make %llu equal groups",
                        h->target_name, j - i, (unsigned long long)S);
    size_t per = (j - i) / S;
    uint64_t base[TPS_MAX_DIMS] = {0}, Sr = 0;
    int bnd = 0;
    for (uint64_t s = 0; s < S; s++) {
        uint64_t g[TPS_MAX_DIMS] = {0};
        int gnd = 0;
        bool here = held(m, &m->tensors[i + s * per], r);
        for (size_t k = 0; k < per; k++) {
            const tps_manifest_tensor *t = &m->tensors[i + s * per + k];
            if (held(m, t, r) != here)
                return tps_fail(err, TPS_EINVALID,
                                "target tensor '%s': '%s' and '%s' are one stacked group but not on the same rank",
                                h->target_name, t->name, m->tensors[i + s * per].name);
            if (!here) continue;
            uint64_t rs[TPS_MAX_DIMS];
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, rs);
            int tnd = tps_target_header_shape(t, rs);
            if (t->dtype != h->dtype || t->target_stack != h->target_stack || tnd < 1 ||
                (k && (tnd != gnd || memcmp(rs + 1, g + 1, sizeof *rs * (size_t)(gnd - 1)))))
                return tps_fail(err, TPS_EINVALID,
                                "target tensor '%s': '%s' does not concatenate with '%s' along dimension 0 "
                                "(dtype, stack or trailing dimensions differ)",
                                h->target_name, t->name, m->tensors[i].name);
            if (!k) {
                memcpy(g, rs, sizeof *rs * (size_t)tnd);
                gnd = tnd;
            } else {
                g[0] += rs[0];
            }
        }
        if (!here) continue;
        if (Sr && (gnd != bnd || memcmp(g, base, sizeof *g * (size_t)gnd)))
            return tps_fail(err, TPS_EINVALID, "target tensor '%s': its stacked groups differ in shape",
                            h->target_name);
        memcpy(base, g, sizeof g);
        bnd = gnd;
        Sr++;
    }
    if (!Sr)
        return tps_fail(err, TPS_EINVALID, "target tensor '%s': rank %llu holds none of its %llu groups",
                        h->target_name, (unsigned long long)r, (unsigned long long)S);
    if (h->target_stack) {
        if (bnd + 1 > TPS_MAX_DIMS)
            return tps_fail(err, TPS_EINVALID, "target tensor '%s': too many dimensions", h->target_name);
        out[0] = Sr;
        memcpy(out + 1, base, sizeof *base * (size_t)bnd);
        *nd = bnd + 1;
    } else {
        memcpy(out, base, sizeof *base * (size_t)bnd);
        *nd = bnd;
    }
    return TPS_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

tps_status tps_target_manifest_load(const char *dir, tps_manifest **out, tps_error *err)
{
    tps_status st = tps_manifest_load(dir, out, err);
    if (st) return st;
    char what[4096];
    snprintf(what, sizeof what, "%s/%s", dir, TPS_MANIFEST_NAME);
    st = tps_target_check_manifest(*out, what, err);
    if (st) {
        tps_manifest_free(*out);
        *out = NULL;
    }
    return st;
}

tps_status tps_target_check_manifest(const tps_manifest *m, const char *what, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        tps_error e;
        tps_error_clear(&e);
        if (t->target_flatten && (!m->target || t->ndim < 2 || t->target_transpose || t->target_blocks))
            return tps_fail(err, TPS_EINVALID,
                            "%s: tensor '%s': flattened (target_flatten) needs a target and 2 or more dimensions, "
                            "not transposed or blocked",
                            what, t->name);
        if (!tps_target_permuted(t)) continue;
        if (!m->target)
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is reordered for a target but the manifest names none",
                            what, t->name);
        if (tps_target_permute_check(t, m->tp, &e)) return tps_fail(err, TPS_EINVALID, "%s: %s", what, e.msg);
    }
    size_t nruns = 0;
    for (size_t i = 0; i < m->ntensors; i++)
        if (m->tensors[i].target_name) nruns++;
    if (!nruns) return TPS_OK;
    if (!m->target)
        return tps_fail(err, TPS_EINVALID, "%s: tensors carry target names but the manifest names no target", what);
    char **names = calloc(nruns, sizeof *names);
    if (!names) return tps_fail_oom(err, "loading the manifest");
    tps_status st = TPS_OK;
    size_t k = 0;
    for (size_t i = 0; i < m->ntensors;) {
        const tps_manifest_tensor *t = &m->tensors[i];
        if (!t->target_name) {
            i++;
            continue;
        }
        size_t j = run_end(m, i);
        const tps_manifest_tensor *same = tps_manifest_find(m, t->target_name);
        if (same && (same < t || same >= m->tensors + j)) {
            st = tps_fail(err, TPS_EINVALID, "%s: target name '%s' is also a tensor's own name", what,
                          t->target_name);
            goto cleanup;
        }
        for (uint64_t r = 0; r < m->tp; r++) {
            uint64_t shape[TPS_MAX_DIMS];
            int nd;
            tps_error e;
            tps_error_clear(&e);
            if (run_shape(m, i, j, r, shape, &nd, &e)) {
                st = tps_fail(err, TPS_EINVALID, "%s: %s", what, e.msg);
                goto cleanup;
            }
            /* only padding and whole-on-one-rank placement make ranks differ */
            if ((!t->part->pad || t->part->replicated) && !t->part->owners) break;
        }
        names[k++] = t->target_name;
        i = j;
    }
    qsort(names, k, sizeof *names, cmp_str);
    for (size_t i = 1; i < k; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: target tensor '%s' is split into runs that are not consecutive",
                          what, names[i]);
            goto cleanup;
        }
cleanup:
    free(names);
    return st;
}

/* ---- writing and reading rank files ---- */

size_t tps_target_file_tensors(const tps_manifest *m, size_t i0, size_t n, uint64_t r, tps_sink_tensor *e,
                               uint64_t *shapes)
{
    size_t out = 0;
    for (size_t k = 0; k < n;) {
        const tps_manifest_tensor *t = &m->tensors[i0 + k];
        if (!t->target_name) {
            e[out++] = e[k++];
            continue;
        }
        size_t j = run_end(m, i0 + k) - i0;
        if (j > n) j = n; /* the parts keep runs whole; never cut one here */
        uint64_t shape[TPS_MAX_DIMS];
        int nd = 0;
        tps_error ignored;
        if (run_shape(m, i0 + k, i0 + j, r, shape, &nd, &ignored) == TPS_OK) { /* checked when applied or loaded */
            memcpy(shapes + k * TPS_MAX_DIMS, shape, sizeof shape);
            e[out++] = (tps_sink_tensor){t->target_name, t->dtype, nd, shapes + k * TPS_MAX_DIMS};
        }
        k = j;
    }
    return out;
}

tps_status tps_target_parts(const tps_manifest *m, const uint64_t *bytes, uint64_t max, size_t *first,
                            size_t *nparts, tps_error *err)
{
    size_t N = m->ntensors;
    uint64_t *rb = calloc(N + 1, sizeof *rb);
    size_t *head = calloc(N + 1, sizeof *head), *rfirst = calloc(N + 2, sizeof *rfirst);
    tps_status st = TPS_OK;
    if (!rb || !head || !rfirst) {
        st = tps_fail_oom(err, "planning parts");
        goto cleanup;
    }
    size_t nr = 0;
    for (size_t i = 0; i < N;) {
        size_t j = m->tensors[i].target_name ? run_end(m, i) : i + 1;
        head[nr] = i;
        for (size_t k = i; k < j; k++) rb[nr] += bytes[k];
        nr++;
        i = j;
    }
    tps_parts_greedy(rb, nr, max, rfirst, nparts);
    for (size_t p = 0; p < *nparts; p++) first[p] = head[rfirst[p]];
    first[*nparts] = N;
cleanup:
    free(rb);
    free(head);
    free(rfirst);
    return st;
}

tps_status tps_target_member_index(const tps_manifest *m, uint64_t r, tps_index *files, tps_index **out,
                                   tps_error *err)
{
    *out = NULL;
    tps_index *vx = NULL;
    tps_status st = TPS_OK;
    TPS_CHECK(tps_index_new(files->path, files->format, &vx, err));
    for (size_t f = 0; f < files->nfiles; f++) {
        uint32_t id;
        TPS_CHECK(tps_index_add_file(vx, files->files[f].path, &id, err));
    }
    for (size_t k = 0; k < files->nmeta; k++) TPS_CHECK(tps_index_add_meta(vx, files->meta[k].key, files->meta[k].value, err));
    size_t seen = 0;
    for (size_t i = 0; i < m->ntensors;) {
        const tps_manifest_tensor *t = &m->tensors[i];
        const char *name = t->target_name ? t->target_name : t->name;
        size_t j = t->target_name ? run_end(m, i) : i + 1;
        uint64_t want[TPS_MAX_DIMS];
        int nd = t->ndim;
        if (t->target_name) {
            TPS_CHECK(run_shape(m, i, j, r, want, &nd, err));
        } else {
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, want);
            nd = tps_target_header_shape(t, want);
        }
        const tps_tensor *x = tps_index_find(files, name);
        if (!x) {
            st = tps_fail(err, TPS_EINVALID, "%s: rank %llu lacks tensor '%s'", files->path, (unsigned long long)r,
                          name);
            goto cleanup;
        }
        if (x->dtype != t->dtype || x->ndim != nd || memcmp(x->shape, want, sizeof *want * (size_t)nd) || x->reader_data) {
            char a[256], b[256];
            tps_shape_str(x->shape, x->ndim, a, sizeof a);
            tps_shape_str(want, nd, b, sizeof b);
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is %s %s, but the manifest gives rank %llu %s %s",
                          files->files[x->file].path, name, tps_dtype_name(x->dtype), a, (unsigned long long)r,
                          tps_dtype_name(t->dtype), b);
            goto cleanup;
        }
        uint64_t off = x->offset;
        for (size_t k = i; k < j; k++) {
            const tps_manifest_tensor *y = &m->tensors[k];
            uint64_t rs[TPS_MAX_DIMS];
            tps_partition_rank_shape(y->part, y->ndim, y->shape, m->tp, r, rs);
            if (tps_target_permuted(y)) /* read back in the source's order */
                TPS_CHECK(tps_target_blocked_member(vx, y, m->tp, rs, x->file, off, err));
            else
                TPS_CHECK(tps_index_add_tensor(vx, y->name, strlen(y->name), y->dtype, y->ndim, rs, x->file, off, NULL, err));
            off += vx->tensors[vx->ntensors - 1].nbytes;
        }
        seen++;
        i = j;
    }
    for (size_t k = 0; k < m->nextras; k++) {
        const tps_tensor *x = tps_index_find(files, m->extras[k].name);
        if (!x || x->dtype != TPS_DT_F32 || x->ndim != 0 || x->reader_data) {
            st = tps_fail(err, TPS_EINVALID, "%s: rank %llu %s '%s' (F32 [], the engine's constant %g)", files->path,
                          (unsigned long long)r, x ? "holds another shape or dtype for" : "lacks", m->extras[k].name,
                          m->extras[k].value);
            goto cleanup;
        }
        seen++;
    }
    if (files->ntensors != seen) {
        st = tps_fail(err, TPS_EINVALID, "%s: rank %llu files hold %zu tensors, the target set has %zu", files->path,
                      (unsigned long long)r, files->ntensors, seen);
        goto cleanup;
    }
    *out = vx;
    vx = NULL;
cleanup:
    tps_index_free(vx);
    tps_index_free(files);
    return st;
}

/* ---- the extras' bytes ---- */

void tps_target_extra_bytes(double value, unsigned char out[4])
{
    float v = (float)value;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    for (int b = 0; b < 4; b++) out[b] = (unsigned char)(bits >> (8 * b));
}

uint32_t tps_target_extras_crc(const tps_manifest *m, uint64_t *len)
{
    uint32_t crc = 0;
    for (size_t k = 0; k < m->nextras; k++) {
        unsigned char le[4];
        tps_target_extra_bytes(m->extras[k].value, le);
        crc = tps_crc32(crc, le, sizeof le);
    }
    *len = 4 * (uint64_t)m->nextras;
    return crc;
}
