/* The bytes of each verified layer's weights (verify/driver/layer_bytes.h). */
#include "layer_bytes.h"

#include <stdlib.h>
#include <string.h>

/* A layer's prefix and its index among the verified layers, sorted by prefix for bsearch. */
typedef struct layer_key {
    const char *prefix;
    size_t len;
    uint64_t i;
} layer_key;

static int cmp_layer_key(const void *a, const void *b)
{
    const layer_key *x = a, *y = b;
    int c = strncmp(x->prefix, y->prefix, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Adds each tensor's bytes to the layer whose prefix it starts with: one pass over the
 * tensors, a binary search per distinct prefix length (a few: layer numbers of 1, 2, 3
 * digits), so a model with many tensors and layers costs tensors x log(layers). */
void tps_vdriver_layer_bytes(const tps_manifest *m, char *const *prefix, uint64_t count, uint64_t *bytes)
{
    layer_key *k = calloc(count + 1, sizeof *k);
    size_t n = 0, lens[8], nlens = 0;
    if (!k) return;
    for (uint64_t i = 0; i < count; i++) {
        if (!prefix[i]) continue;
        k[n] = (layer_key){prefix[i], strlen(prefix[i]), i};
        size_t j = 0;
        while (j < nlens && lens[j] != k[n].len) j++;
        if (j == nlens && nlens < sizeof lens / sizeof lens[0]) lens[nlens++] = k[n].len;
        n++;
    }
    qsort(k, n, sizeof *k, cmp_layer_key);
    for (size_t t = 0; t < m->ntensors; t++) {
        const char *name = m->tensors[t].name;
        size_t nl = strlen(name);
        for (size_t j = 0; j < nlens; j++) {
            if (nl < lens[j]) continue;
            layer_key probe = {name, lens[j], 0};
            const layer_key *hit = bsearch(&probe, k, n, sizeof *k, cmp_layer_key);
            if (hit) bytes[hit->i] += m->tensors[t].nbytes;
        }
    }
    free(k);
}

