/* CRC-32 (the zlib/PNG/gzip polynomial, as zlib's crc32_z computes it) at memory speed.
 *
 * Every byte tpshard moves is checksummed (the manifest's per-tensor and per-file CRCs), so
 * the checksum must not be slower than the copy; zlib's table-driven crc32_z runs at about
 * 3 GB/s, below one memcpy.  On x86-64 CPUs with PCLMULQDQ this folds 64 bytes per step
 * with carry-less multiplication (Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", Intel 2009), and with VPCLMULQDQ on AVX-512 CPUs 256 bytes
 * per step in four 512-bit registers (the same fold at a longer distance); elsewhere, and
 * for the last <16 bytes, it is zlib's crc32_z.  The widest the CPU has is chosen at run
 * time.  Values are identical to zlib's, so crc32_combine still applies. */
#ifndef TPS_CRC_H
#define TPS_CRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tps_crc_impl { TPS_CRC_ZLIB, TPS_CRC_PCLMUL, TPS_CRC_VPCLMUL } tps_crc_impl;

/* The CRC-32 of buf[0, len) continuing from crc (0 to start), like zlib's crc32_z. */
uint32_t tps_crc32(uint32_t crc, const void *buf, size_t len);

/* The same with one implementation, for tests that check each against zlib: false when
 * this CPU (or build) lacks it. */
bool tps_crc32_impl(tps_crc_impl impl, uint32_t crc, const void *buf, size_t len, uint32_t *out);

#endif
