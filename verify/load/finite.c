/* Non-finite values by their bit patterns: an all-ones exponent in the IEEE-style formats,
 * the formats' own NaN codes in the FP8 ones (E4M3 and the FNUZ variants have no Inf). */
#include "finite.h"

#include <stdio.h>
#include <string.h>

void tps_vfinite_init(tps_vfinite *f, tps_dtype dt)
{
    memset(f, 0, sizeof *f);
    f->dtype = dt;
    switch (dt) {
    case TPS_DT_F8_E5M2: case TPS_DT_F8_E4M3: case TPS_DT_F8_E8M0: case TPS_DT_F8_E4M3FNUZ:
    case TPS_DT_F8_E5M2FNUZ:
        f->esize = 1;
        break;
    case TPS_DT_F16: case TPS_DT_BF16: f->esize = 2; break;
    case TPS_DT_F32: f->esize = 4; break;
    case TPS_DT_F64: f->esize = 8; break;
    default: f->esize = 0; break;
    }
}

static int nonfinite(tps_dtype dt, const unsigned char *e)
{
    uint16_t h;
    uint32_t w;
    uint64_t d;
    switch (dt) {
    case TPS_DT_F8_E5M2: return (e[0] & 0x7c) == 0x7c;
    case TPS_DT_F8_E4M3: return (e[0] & 0x7f) == 0x7f;
    case TPS_DT_F8_E8M0: return e[0] == 0xff;
    case TPS_DT_F8_E4M3FNUZ: case TPS_DT_F8_E5M2FNUZ: return e[0] == 0x80;
    case TPS_DT_F16: memcpy(&h, e, 2); return (h & 0x7c00) == 0x7c00; /* little-endian, as the formats store it */
    case TPS_DT_BF16: memcpy(&h, e, 2); return (h & 0x7f80) == 0x7f80;
    case TPS_DT_F32: memcpy(&w, e, 4); return (w & 0x7f800000u) == 0x7f800000u;
    case TPS_DT_F64: memcpy(&d, e, 8); return (d & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
    default: return 0;
    }
}

static void element(tps_vfinite *f, uint64_t index, const unsigned char *e)
{
    if (!nonfinite(f->dtype, e)) return;
    if (!f->count) f->first = index;
    f->count++;
}

/* Whether any of the n bytes' elements (n a multiple of the element size) may be non-finite:
 * for each lane of a 64-bit word, z = (lane & exp) ^ exp is 0 exactly when the exponent is all
 * ones; z < 2^(bits-1), so z + (2^(bits-1) - 1) sets the lane's top bit unless z is 0.  FP8 and
 * F64 (few bytes of weights in practice) say yes: the element loop decides. */
static bool maybe_nonfinite(tps_dtype dt, const unsigned char *b, size_t n)
{
    uint64_t exp, low, top;
    switch (dt) {
    case TPS_DT_BF16: exp = 0x7f807f807f807f80ull, low = 0x7fff7fff7fff7fffull, top = 0x8000800080008000ull; break;
    case TPS_DT_F16: exp = 0x7c007c007c007c00ull, low = 0x7fff7fff7fff7fffull, top = 0x8000800080008000ull; break;
    case TPS_DT_F32: exp = 0x7f8000007f800000ull, low = 0x7fffffff7fffffffull, top = 0x8000000080000000ull; break;
    default: return true;
    }
    uint64_t any = 0;
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, b + 8 * i, 8);
        uint64_t z = (w & exp) ^ exp;
        any |= ~(z + low) & top;
    }
    if (n % 8) any = 1; /* a tail of a few elements: counted exactly */
    return any != 0;
}

void tps_vfinite_feed(tps_vfinite *f, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t es = f->esize;
    if (!es) return;
    if (f->carried) {
        size_t take = es - f->carried < n ? es - f->carried : n;
        memcpy(f->carry + f->carried, b, take);
        f->carried += take;
        b += take;
        n -= take;
        if (f->carried < es) return;
        element(f, f->next_index++, f->carry);
        f->carried = 0;
    }
    size_t whole = n / es;
    /* whether any element is non-finite, 8 bytes at a time; count (and find the first) only
     * when one is: weights are finite nearly always, and this scan sees every byte verify reads */
    size_t bad = 0;
    if (maybe_nonfinite(f->dtype, b, whole * es))
        for (size_t i = 0; i < whole; i++) bad += (size_t)nonfinite(f->dtype, b + i * es);
    if (bad && !f->count)
        for (size_t i = 0; i < whole; i++)
            if (nonfinite(f->dtype, b + i * es)) {
                f->first = f->next_index + i;
                break;
            }
    f->count += bad;
    f->next_index += whole;
    b += whole * es;
    n -= whole * es;
    memcpy(f->carry, b, n);
    f->carried = n;
}

void tps_vfinite_describe(const tps_vfinite *f, const char *name, const uint64_t *shape, int ndim, char *msg,
                          size_t size)
{
    char at[160] = "";
    uint64_t rest = f->first, idx[TPS_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
        idx[i] = shape[i] ? rest % shape[i] : 0;
        rest = shape[i] ? rest / shape[i] : 0;
    }
    for (int i = 0; i < ndim; i++)
        snprintf(at + strlen(at), sizeof at - strlen(at), "%s%llu", i ? ", " : "[", (unsigned long long)idx[i]);
    if (ndim > 0) snprintf(at + strlen(at), sizeof at - strlen(at), "] ");
    snprintf(msg, size, "tensor '%s' holds %llu non-finite value%s (NaN or Inf), the first at %s(element %llu)", name,
             (unsigned long long)f->count, f->count == 1 ? "" : "s", at, (unsigned long long)f->first);
}

const char tps_vfinite_why[] =
    "the weights themselves are not finite numbers, so no comparison with them can be trusted (the checkpoint "
    "holds them, e.g. from a diverged training run; fix the checkpoint, not the split)";

void tps_vt_scan(const tps_vt *t, tps_vfinite *f)
{
    tps_vfinite_init(f, t->dtype);
    if (t->data) tps_vfinite_feed(f, t->data, (size_t)t->nelem * f->esize); /* nelem * esize bytes were loaded */
}

tps_status tps_vt_require_finite(const tps_vt *t, const char *whose, tps_error *err)
{
    tps_vfinite f;
    tps_vt_scan(t, &f);
    if (!f.count) return TPS_OK;
    char what[600];
    tps_vfinite_describe(&f, t->name, t->shape, t->ndim, what, sizeof what);
    return tps_fail(err, TPS_EINVALID, "%s: %s: %s", whose, what, tps_vfinite_why);
}
