#include "convert.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/checked.h"

/* Source elements converted per batch: bounds the scratch memory of one read (8 MiB of F64). */
#define BATCH_ELEMS (1u << 20)

struct tps_convert {
    tps_global_read_fn inner;
    void *inner_ctx;
    tps_dtype *from; /* per tensor, the source dtype */
    const tps_manifest *m;
};

bool tps_convert_parse_dtype(const char *s, tps_dtype *out)
{
    static const struct {
        const char *name;
        tps_dtype dt;
    } names[] = {{"bf16", TPS_DT_BF16}, {"f16", TPS_DT_F16}, {"fp16", TPS_DT_F16},
                 {"f32", TPS_DT_F32},   {"fp32", TPS_DT_F32}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].dt;
            return true;
        }
    return false;
}

static bool convertible(tps_dtype dt)
{
    return dt == TPS_DT_BF16 || dt == TPS_DT_F16 || dt == TPS_DT_F32 || dt == TPS_DT_F64;
}

tps_status tps_convert_begin(tps_manifest *m, tps_dtype to, tps_global_read_fn inner, void *inner_ctx,
                             tps_convert **out, tps_error *err)
{
    *out = NULL;
    if (!convertible(to) || to == TPS_DT_F64)
        return tps_fail(err, TPS_EARG, "cannot convert to %s: the target must be BF16, F16 or F32", tps_dtype_name(to));
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        if (t->dtype != to && !convertible(t->dtype))
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s' is %s, which does not convert to %s: only F16, BF16, F32 and F64 tensors "
                            "convert (a cast would change what integer or float8 values mean)",
                            t->name, tps_dtype_name(t->dtype), tps_dtype_name(to));
    }
    tps_convert *cv = calloc(1, sizeof *cv);
    if (!cv || !(cv->from = calloc(m->ntensors ? m->ntensors : 1, sizeof *cv->from))) {
        free(cv);
        return tps_fail_oom(err, "preparing the dtype conversion");
    }
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *t = &m->tensors[i];
        uint64_t nelem;
        cv->from[i] = t->dtype;
        if (!tps_prod_u64(t->shape, t->ndim, &nelem)) nelem = 0; /* the reader bounded shapes already */
        tps_status st = tps_dtype_nbytes(to, nelem, &t->nbytes, t->name, err);
        if (st) {
            tps_convert_free(cv);
            return st;
        }
        t->dtype = to;
    }
    cv->inner = inner;
    cv->inner_ctx = inner_ctx;
    cv->m = m;
    *out = cv;
    return TPS_OK;
}

/* Target bytes [off, off+len) of tensor i: the source elements that cover them, converted a
 * batch at a time (a read need not start or end on an element boundary). */
tps_status tps_convert_read(void *ctx, size_t i, uint64_t off, void *buf, size_t len, tps_error *err)
{
    tps_convert *cv = ctx;
    tps_dtype from = cv->from[i], to = cv->m->tensors[i].dtype;
    if (from == to) return cv->inner(cv->inner_ctx, i, off, buf, len, err);
    size_t ss = tps_dtype_bits(from) / 8, ts = tps_dtype_bits(to) / 8;
    uint64_t e = off / ts, end = off + len;
    size_t batch = (end - off) / ts + 2 < BATCH_ELEMS ? (size_t)((end - off) / ts + 2) : BATCH_ELEMS;
    unsigned char *src = malloc(batch * ss), *dst = malloc(batch * ts), *out = buf;
    tps_status st = TPS_OK;
    if (!src || !dst) {
        st = tps_fail_oom(err, "converting dtypes");
        goto cleanup;
    }
    for (uint64_t at = off; at < end;) {
        uint64_t e_end = (end + ts - 1) / ts;
        size_t n = e_end - e < batch ? (size_t)(e_end - e) : batch;
        TPS_CHECK(cv->inner(cv->inner_ctx, i, e * ss, src, n * ss, err));
        for (size_t k = 0; k < n; k++) {
            double v;
            tps_dtype_to_f64(from, src, k, &v);
            tps_dtype_from_f64(to, dst, k, v);
        }
        /* copy the part of [e*ts, (e+n)*ts) that lies inside [at, end) */
        uint64_t lo = at - e * ts, hi = (e + n) * ts < end ? n * ts : end - e * ts;
        memcpy(out + (at - off), dst + lo, (size_t)(hi - lo));
        at = e * ts + hi;
        e += n;
    }
cleanup:
    free(src);
    free(dst);
    return st;
}

void tps_convert_free(tps_convert *cv)
{
    if (!cv) return;
    free(cv->from);
    free(cv);
}
