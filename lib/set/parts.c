#include "parts.h"

void tps_parts_greedy(const uint64_t *bytes, size_t n, uint64_t max, size_t *first, size_t *nparts)
{
    size_t k = 0;
    uint64_t cur = 0;
    first[k++] = 0;
    for (size_t i = 0; i < n; i++) {
        if (max && cur > 0 && (cur + bytes[i] < cur || cur + bytes[i] > max)) {
            first[k++] = i;
            cur = 0;
        }
        cur += bytes[i];
    }
    first[k] = n;
    *nparts = k;
}
