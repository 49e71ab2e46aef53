#include "dtype.h"

#include <math.h>
#include <string.h>

#include "checked.h"

static const struct {
    const char *name;
    unsigned bits;
} dtype_table[TPS_DT_COUNT] = {
    [TPS_DT_BOOL] = {"BOOL", 8},
    [TPS_DT_F4] = {"F4", 4},
    [TPS_DT_F6_E2M3] = {"F6_E2M3", 6},
    [TPS_DT_F6_E3M2] = {"F6_E3M2", 6},
    [TPS_DT_U8] = {"U8", 8},
    [TPS_DT_I8] = {"I8", 8},
    [TPS_DT_F8_E5M2] = {"F8_E5M2", 8},
    [TPS_DT_F8_E4M3] = {"F8_E4M3", 8},
    [TPS_DT_F8_E8M0] = {"F8_E8M0", 8},
    [TPS_DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [TPS_DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [TPS_DT_I16] = {"I16", 16},
    [TPS_DT_U16] = {"U16", 16},
    [TPS_DT_F16] = {"F16", 16},
    [TPS_DT_BF16] = {"BF16", 16},
    [TPS_DT_I32] = {"I32", 32},
    [TPS_DT_U32] = {"U32", 32},
    [TPS_DT_F32] = {"F32", 32},
    [TPS_DT_C64] = {"C64", 64},
    [TPS_DT_F64] = {"F64", 64},
    [TPS_DT_I64] = {"I64", 64},
    [TPS_DT_U64] = {"U64", 64},
};

const char *tps_dtype_name(tps_dtype dt)
{
    return (unsigned)dt < TPS_DT_COUNT ? dtype_table[dt].name : "?";
}

bool tps_dtype_parse(const char *s, size_t len, tps_dtype *out)
{
    for (int i = 0; i < TPS_DT_COUNT; i++) {
        const char *n = dtype_table[i].name;
        if (strlen(n) == len && memcmp(n, s, len) == 0) {
            *out = (tps_dtype)i;
            return true;
        }
    }
    return false;
}

unsigned tps_dtype_bits(tps_dtype dt)
{
    return (unsigned)dt < TPS_DT_COUNT ? dtype_table[dt].bits : 0;
}

bool tps_dtype_is_float(tps_dtype dt)
{
    switch (dt) {
    case TPS_DT_BF16: case TPS_DT_F16: case TPS_DT_F32: case TPS_DT_F64:
    case TPS_DT_F8_E4M3: case TPS_DT_F8_E5M2:
        return true;
    default:
        return false;
    }
}

tps_status tps_dtype_nbytes(tps_dtype dt, uint64_t nelem, uint64_t *out, const char *what, tps_error *err)
{
    uint64_t bits;
    if (!tps_mul_u64(nelem, tps_dtype_bits(dt), &bits))
        return tps_fail(err, TPS_EINVALID, "%s: %llu elements of %s overflow a 64-bit byte count",
                        what, (unsigned long long)nelem, tps_dtype_name(dt));
    if (bits % 8 != 0)
        return tps_fail(err, TPS_EINVALID,
                        "%s: %llu elements of %s (%u bits each) do not fill a whole number of bytes",
                        what, (unsigned long long)nelem, tps_dtype_name(dt), tps_dtype_bits(dt));
    *out = bits / 8;
    return TPS_OK;
}

static uint64_t load_le(const unsigned char *p, unsigned nbytes)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < nbytes; k++) v |= (uint64_t)p[k] << (8 * k);
    return v;
}

static void store_le(unsigned char *p, uint64_t v, unsigned nbytes)
{
    for (unsigned k = 0; k < nbytes; k++) p[k] = (unsigned char)(v >> (8 * k));
}

static double half_to_f64(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0) v = ldexp(man, -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexp(man | 0x400, exp - 25);
    return sign ? -v : v;
}

/* OCP FP8 E4M3 ("fn": no infinities, S.1111.111 is NaN) and E5M2 (IEEE-like). */
static double f8_to_f64(uint8_t b, int expbits)
{
    int manbits = 7 - expbits, bias = (1 << (expbits - 1)) - 1;
    int sign = b >> 7, exp = (b >> manbits) & ((1 << expbits) - 1), man = b & ((1 << manbits) - 1);
    double v;
    if (expbits == 4 && exp == 15 && man == 7) return NAN;
    if (expbits == 5 && exp == 31) v = man ? NAN : INFINITY;
    else if (exp == 0) v = ldexp(man, 1 - bias - manbits);
    else v = ldexp(man | (1 << manbits), exp - bias - manbits);
    return sign ? -v : v;
}

bool tps_dtype_to_f64(tps_dtype dt, const void *buf, size_t i, double *out)
{
    const unsigned char *p = buf;
    unsigned nb = tps_dtype_bits(dt) / 8;
    if (nb == 0) return false;
    p += i * nb;
    uint64_t raw = load_le(p, nb);
    switch (dt) {
    case TPS_DT_BF16: {
        uint32_t u = (uint32_t)raw << 16;
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    case TPS_DT_F16: *out = half_to_f64((uint16_t)raw); return true;
    case TPS_DT_F32: {
        uint32_t u = (uint32_t)raw;
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    case TPS_DT_F64: memcpy(out, &raw, 8); return true;
    case TPS_DT_F8_E4M3: *out = f8_to_f64((uint8_t)raw, 4); return true;
    case TPS_DT_F8_E5M2: *out = f8_to_f64((uint8_t)raw, 5); return true;
    case TPS_DT_BOOL: case TPS_DT_U8: case TPS_DT_U16: case TPS_DT_U32: case TPS_DT_U64:
        *out = (double)raw;
        return true;
    case TPS_DT_I8: *out = (int8_t)raw; return true;
    case TPS_DT_I16: *out = (int16_t)raw; return true;
    case TPS_DT_I32: *out = (int32_t)raw; return true;
    case TPS_DT_I64: *out = (double)(int64_t)raw; return true;
    default: return false;
    }
}

/* Round a float's bits to its upper 16 bits, nearest even; NaN stays a quiet NaN. */
static uint16_t f32_to_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static uint16_t f64_to_half_bits(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (isnan(v)) return 0x7e00;
    if (a >= 65520.0) return sign | 0x7c00; /* rounds to infinity */
    if (a < ldexp(1, -25)) return sign;     /* rounds to zero (ties to even: 2^-25 -> 0) */
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5,1) */
    int exp = e - 1 + 15;
    double scaled;
    if (exp <= 0) scaled = ldexp(a, 24); /* subnormal: units of 2^-24 */
    else scaled = ldexp(a, 10 - (e - 1));
    double r = nearbyint(scaled); /* default rounding mode: nearest even */
    uint32_t m = (uint32_t)r;
    if (exp <= 0) return sign | (uint16_t)m; /* m may reach 0x400: the smallest normal */
    if (m == 0x800) { m = 0x400; exp++; }
    if (exp >= 31) return sign | 0x7c00;
    return sign | (uint16_t)(exp << 10) | (uint16_t)(m & 0x3ff);
}

bool tps_dtype_from_f64(tps_dtype dt, void *buf, size_t i, double v)
{
    unsigned char *p = buf;
    switch (dt) {
    case TPS_DT_BF16: {
        /* Double -> float -> bf16 could round twice; go through float only when exact. */
        float f = (float)v;
        if ((double)f != v && !isnan(v) && !isinf(v)) {
            /* nudge toward v so the second rounding sees which side v was on */
            uint32_t u;
            memcpy(&u, &f, 4);
            if ((u & 0xffff) == 0x8000) { /* an exact bf16 tie created by the first rounding */
                if (((double)f < v) == (f > 0)) u += 1; else u -= 1;
                memcpy(&f, &u, 4);
            }
        }
        store_le(p + i * 2, f32_to_bf16_bits(f), 2);
        return true;
    }
    case TPS_DT_F16: store_le(p + i * 2, f64_to_half_bits(v), 2); return true;
    case TPS_DT_F32: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        store_le(p + i * 4, u, 4);
        return true;
    }
    case TPS_DT_F64: {
        uint64_t u;
        memcpy(&u, &v, 8);
        store_le(p + i * 8, u, 8);
        return true;
    }
    default: return false;
    }
}
