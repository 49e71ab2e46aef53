/* make bench-scale: what a loaded manifest holds in memory, per tensor (issue 27).
 *
 *   manifest_mem DIR    prints "TENSORS HELD_BYTES"
 *
 * HELD_BYTES is the heap the manifest keeps after tps_manifest_load returns (glibc's
 * mallinfo2 before and after, small and mmap'd blocks alike): the in-memory form check,
 * merge and reshard work from, without the text and parse tree the load frees. */
#include <malloc.h>
#include <stdio.h>

#include "lib/set/manifest.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: manifest_mem DIR\n");
        return 2;
    }
    tps_error err;
    tps_error_clear(&err);
    tps_manifest *m = NULL;
    struct mallinfo2 a = mallinfo2();
    if (tps_manifest_load(argv[1], &m, &err) != TPS_OK) {
        fprintf(stderr, "manifest_mem: %s\n", err.msg);
        return 1;
    }
    struct mallinfo2 b = mallinfo2();
    printf("%zu %zu\n", m->ntensors, (b.uordblks + b.hblkhd) - (a.uordblks + a.hblkhd));
    tps_manifest_free(m);
    return 0;
}
