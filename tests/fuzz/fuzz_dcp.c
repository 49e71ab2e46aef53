/* PyTorch Distributed Checkpoint directories (formats/dcp/dcp.h): the .metadata pickle, its
 * chunk map (bounds, overlap, holes, storage entries) and the torch.save streams inside
 * the .distcp files, then short reads at both ends of every tensor, which run the chunk
 * gather.
 *
 * Input: records of [u32 little-endian length][bytes]; the first is .metadata, record k
 * (k >= 1) is __<k-1>_0.distcp, written into one scratch directory per process (files of
 * the previous input are removed).  The corpus is made from directories PyPI torch 2.5.1
 * saved (tests/fuzz/make_dcp_corpus.py). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/dcp/dcp.h"

#define MAX_FILES 8

static char dir[64];

static int put(const char *name, const uint8_t *p, size_t n)
{
    char path[352];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%.40s/tps-fuzz-dcp-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) return 0;
    }
    char names[MAX_FILES][32], path[352];
    for (int k = 0; k < MAX_FILES; k++) {
        snprintf(names[k], sizeof names[k], k ? "__%d_0.distcp" : ".metadata", k - 1);
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        unlink(path);
    }
    size_t pos = 0;
    for (int k = 0; k < MAX_FILES && size - pos >= 4; k++) {
        uint32_t n = (uint32_t)data[pos] | (uint32_t)data[pos + 1] << 8 | (uint32_t)data[pos + 2] << 16 |
                     (uint32_t)data[pos + 3] << 24;
        pos += 4;
        if (n > size - pos) n = (uint32_t)(size - pos);
        if (put(names[k], data + pos, n)) return 0;
        pos += n;
    }
    tps_index *ix = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_dcp_open(dir, &ix, &err) == TPS_OK) fuzz_read_ends(ix);
    tps_index_free(ix);
    return 0;
}
