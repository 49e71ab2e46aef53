/* Tensor-name globs for layout rules.  '*' stays inside one dot-separated component so that
 * "model.layers.*.mlp.up_proj.weight" cannot swallow a deeper module path by accident;
 * '{a,b}' alternatives may hold dots and '*' themselves (e.g. "{transformer.,}h.*"), but
 * do not nest.
 *
 * Matching backtracks, which alone is exponential in the number of '*' ("*a*a*a*a*b"
 * against a long run of 'a' never ends; both the pattern and the name come from input).
 * So every (pattern position, name position) pair that failed is remembered: a position in
 * the pattern determines the rest of the match (inside an alternative, what follows its
 * '}'), so a pair that failed once fails again, and a match costs at most
 * O(pattern length x name length) steps.  Names longer than TPS_GLOB_MAX_NAME never match
 * (their memo would be too large); real tensor names are a few hundred bytes. */
#include <stdlib.h>
#include <string.h>

#include "layout_int.h"

#define TPS_GLOB_MAX_NAME 65536u

typedef struct glob_memo {
    const char *pattern, *name;
    size_t ncols;           /* name length + 1 */
    unsigned char *failed; /* one bit per (pattern offset, name offset) */
} glob_memo;

/* Matches pattern p (up to pend) followed by the rest rest (up to rend) against name. */
static bool match_here(glob_memo *g, const char *p, const char *pend, const char *rest, const char *rend,
                       const char *name)
{
    size_t bit = (size_t)(p - g->pattern) * g->ncols + (size_t)(name - g->name);
    if (g->failed[bit / 8] & (1u << (bit % 8))) return false;
    const char *p0 = p, *name0 = name;
    bool ok = false;
    while (p < pend) {
        char c = *p;
        if (c == '*') {
            /* Shortest first; '*' never crosses a dot. */
            for (const char *n = name;; n++) {
                if (match_here(g, p + 1, pend, rest, rend, n)) {
                    ok = true;
                    break;
                }
                if (*n == '\0' || *n == '.') break;
            }
            goto done;
        }
        if (c == '{') {
            if (rest) goto done; /* nested braces: refused by tps_glob_valid */
            const char *close = memchr(p, '}', (size_t)(pend - p));
            if (!close) goto done;
            for (const char *alt = p + 1;;) {
                const char *end = alt;
                while (end < close && *end != ',') end++;
                /* The alternative, then the pattern after '}'. */
                if (match_here(g, alt, end, close + 1, pend, name)) {
                    ok = true;
                    break;
                }
                if (end == close) break;
                alt = end + 1;
            }
            goto done;
        }
        if (*name != c) goto done;
        p++;
        name++;
    }
    ok = rest ? match_here(g, rest, rend, NULL, NULL, name) : *name == '\0';
done:
    if (!ok) {
        bit = (size_t)(p0 - g->pattern) * g->ncols + (size_t)(name0 - g->name);
        g->failed[bit / 8] |= (unsigned char)(1u << (bit % 8));
    }
    return ok;
}

bool tps_glob_match(const char *pattern, const char *name)
{
    size_t plen = strlen(pattern), nlen = strlen(name);
    if (nlen > TPS_GLOB_MAX_NAME) return false;
    glob_memo g = {pattern, name, nlen + 1, NULL};
    g.failed = calloc(((plen + 1) * g.ncols + 7) / 8, 1);
    if (!g.failed) return false;
    bool ok = match_here(&g, pattern, pattern + plen, NULL, NULL, name);
    free(g.failed);
    return ok;
}

bool tps_glob_valid(const char *pattern, size_t *errpos, const char **errmsg)
{
    if (pattern[0] == '\0') {
        *errpos = 0;
        *errmsg = "empty pattern";
        return false;
    }
    size_t open = 0;
    bool in = false;
    for (size_t i = 0; pattern[i]; i++) {
        char c = pattern[i];
        if (c == '{') {
            if (in) {
                *errpos = i;
                *errmsg = "nested '{' (alternatives do not nest)";
                return false;
            }
            in = true;
            open = i;
        } else if (c == '}') {
            if (!in) {
                *errpos = i;
                *errmsg = "'}' without '{'";
                return false;
            }
            in = false;
        } else if (c == ',' && !in) {
            *errpos = i;
            *errmsg = "',' outside '{...}' (give several patterns as a YAML list)";
            return false;
        }
    }
    if (in) {
        *errpos = open;
        *errmsg = "'{' without '}'";
        return false;
    }
    return true;
}
