/* Fuzz targets: one libFuzzer entry point per reader, built two ways (tests/fuzz/fuzz.mk):
 *   - with clang -fsanitize=fuzzer,address,undefined for `make fuzz` (libFuzzer's main);
 *   - with the ordinary compiler and replay.c's main for `make test`, which runs every
 *     file of tests/fuzz/corpus/<target>/ through the same entry point once.
 * A target returns 0 whatever the input; a bug shows as a crash, a sanitizer report or a
 * leak, never as a return value. */
#ifndef TPS_FUZZ_H
#define TPS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A path naming a memory file that holds exactly data (size bytes), for readers that open
 * a path.  One memory file per process, rewritten by each call; NULL when it cannot be made. */
const char *fuzz_memfile(const uint8_t *data, size_t size);

/* Short reads at both ends of the first 64 tensors of ix (errors are expected, crashes not):
 * what runs a reader's on-demand paths (views, inflate, chunk gathers). */
struct tps_index;
void fuzz_read_ends(const struct tps_index *ix);

#endif
