/* Element types: the safetensors dtype strings (the Dtype enum of huggingface/safetensors'
 * safetensors/src/tensor.rs), their sizes in bits (sub-byte types included), and conversion
 * of floating-point elements to double for the verification pass. */
#ifndef TPS_DTYPE_H
#define TPS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* In safetensors' enum order (increasing alignment); the writer sorts by it. */
typedef enum tps_dtype {
    TPS_DT_BOOL,
    TPS_DT_F4,
    TPS_DT_F6_E2M3,
    TPS_DT_F6_E3M2,
    TPS_DT_U8,
    TPS_DT_I8,
    TPS_DT_F8_E5M2,
    TPS_DT_F8_E4M3,
    TPS_DT_F8_E8M0,
    TPS_DT_F8_E4M3FNUZ,
    TPS_DT_F8_E5M2FNUZ,
    TPS_DT_I16,
    TPS_DT_U16,
    TPS_DT_F16,
    TPS_DT_BF16,
    TPS_DT_I32,
    TPS_DT_U32,
    TPS_DT_F32,
    TPS_DT_C64,
    TPS_DT_F64,
    TPS_DT_I64,
    TPS_DT_U64,
    TPS_DT_COUNT
} tps_dtype;

/* The exact safetensors string ("BF16"), or "?" for an out-of-range value. */
const char *tps_dtype_name(tps_dtype dt);

/* Case-sensitive parse of a safetensors dtype string of len bytes. */
bool tps_dtype_parse(const char *s, size_t len, tps_dtype *out);

/* Bits per element: 4 for F4, 6 for the F6 types, 8..64 otherwise. */
unsigned tps_dtype_bits(tps_dtype dt);

/* True for types whose elements can be read as numbers by tps_dtype_to_f64. */
bool tps_dtype_is_float(tps_dtype dt);

/* Bytes of nelem elements.  Fails (TPS_EINVALID, message naming what) when the bit count
 * overflows or is not a whole number of bytes (a cut inside a byte of a sub-byte type). */
tps_status tps_dtype_nbytes(tps_dtype dt, uint64_t nelem, uint64_t *out, const char *what, tps_error *err);

/* Element i of a little-endian buffer of type dt as a double.  Only for BF16, F16, F32,
 * F64, F8_E4M3, F8_E5M2 and the integer types; returns false otherwise. */
bool tps_dtype_to_f64(tps_dtype dt, const void *buf, size_t i, double *out);

/* Stores v into element i of a little-endian buffer of type dt, rounding to nearest even
 * for BF16/F16/F32.  Only for BF16, F16, F32, F64; returns false otherwise. */
bool tps_dtype_from_f64(tps_dtype dt, void *buf, size_t i, double v);

#endif
