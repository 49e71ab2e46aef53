/* A refusal's unknown sizes, named once each (lib/refusal/problems_sizes.h). */
#include "problems_sizes.h"

#include <stdbool.h>
#include <string.h>

uint64_t tps_problems_missing_sizes(const tps_problems *ps, tps_buf *names, size_t *groups)
{
    uint64_t sized = 0;
    *groups = 0;
    for (size_t i = 0; i < ps->n; i++) {
        const tps_problem *g = &ps->v[i];
        if (g->kind != TPS_PROBLEM_SIZES) continue;
        sized += g->count;
        (*groups)++;
        for (const char *c = g->missing; *c;) {
            size_t n = strcspn(c, ",");
            const char *have = tps_buf_cstr(names);
            bool dup = false;
            for (const char *h = have; h && *h && !dup;) {
                size_t hn = strcspn(h, ",");
                dup = hn == n && memcmp(h, c, n) == 0;
                h += hn;
                while (*h == ',' || *h == ' ') h++;
            }
            if (!dup) tps_buf_printf(names, "%s%.*s", names->len ? ", " : "", (int)n, c);
            c += n;
            while (*c == ',' || *c == ' ') c++;
        }
    }
    return sized;
}
