/* Tensor-name globs for layout rules.  '*' stays inside one dot-separated component so that
 * "model.layers.*.mlp.up_proj.weight" cannot swallow a deeper module path by accident;
 * '{a,b}' alternatives may hold dots and '*' themselves (e.g. "{transformer.,}h.*"), but
 * do not nest.  Matching backtracks; patterns are a few dozen bytes, names a few hundred. */
#include <string.h>

#include "layout_int.h"

/* Matches pattern p (up to pend) followed by the rest rest (up to rend) against name. */
static bool match_here(const char *p, const char *pend, const char *rest, const char *rend, const char *name)
{
    while (p < pend) {
        char c = *p;
        if (c == '*') {
            /* Shortest first; '*' never crosses a dot. */
            for (const char *n = name;; n++) {
                if (match_here(p + 1, pend, rest, rend, n)) return true;
                if (*n == '\0' || *n == '.') return false;
            }
        }
        if (c == '{') {
            if (rest) return false; /* nested braces: refused by tps_glob_valid */
            const char *close = memchr(p, '}', (size_t)(pend - p));
            if (!close) return false;
            for (const char *alt = p + 1;;) {
                const char *end = alt;
                while (end < close && *end != ',') end++;
                /* The alternative, then the pattern after '}'. */
                if (match_here(alt, end, close + 1, pend, name)) return true;
                if (end == close) return false;
                alt = end + 1;
            }
        }
        if (*name != c) return false;
        p++;
        name++;
    }
    if (rest) return match_here(rest, rend, NULL, NULL, name);
    return *name == '\0';
}

bool tps_glob_match(const char *pattern, const char *name)
{
    return match_here(pattern, pattern + strlen(pattern), NULL, NULL, name);
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
