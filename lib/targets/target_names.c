/* Name patterns with captures (lib/targets/target_names.h). */
#include "target_names.h"

#include <string.h>

#define MAX_CAPS TPS_TARGET_MAX_CAPS

typedef struct caps {
    int n;
    const char *s[MAX_CAPS];
    size_t len[MAX_CAPS];
} caps;

/* '*' a non-empty dot-free run, '{a,b}' one alternative; each is a capture. */
static bool match(const char *p, const char *s, caps *c)
{
    if (!*p) return !*s;
    if (*p == '*' || *p == '{') {
        int k = c->n;
        if (k >= MAX_CAPS) return false;
        c->n = k + 1;
        if (*p == '*') {
            for (size_t l = 1; s[l - 1] && s[l - 1] != '.'; l++) {
                c->s[k] = s;
                c->len[k] = l;
                if (match(p + 1, s + l, c)) return true;
            }
        } else {
            const char *close = strchr(p, '}');
            for (const char *a = p + 1; close && a <= close;) {
                const char *end = a;
                while (end < close && *end != ',') end++;
                size_t l = (size_t)(end - a);
                c->s[k] = s;
                c->len[k] = l;
                if (strncmp(s, a, l) == 0 && match(close + 1, s + l, c)) return true;
                a = end + 1;
            }
        }
        c->n = k;
        return false;
    }
    return *p == *s && match(p + 1, s + 1, c);
}

static int wildcards(const char *p)
{
    int n = 0;
    for (; *p; p++)
        if (*p == '*' || *p == '{') n++;
    return n;
}

/* p with its wildcards replaced by the first ncap captures; false when too long. */
static bool subst(const char *p, const caps *c, int ncap, char *out, size_t size)
{
    size_t n = 0;
    int k = 0;
    while (*p) {
        const char *piece = p;
        size_t len = 1;
        if (*p == '*' || *p == '{') {
            if (k >= ncap) return false;
            piece = c->s[k];
            len = c->len[k++];
            p = *p == '{' ? strchr(p, '}') + 1 : p + 1;
        } else {
            p++;
        }
        if (n + len + 1 > size) return false;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return true;
}

bool tps_target_name_match(const char *pattern, const char *name, tps_target_caps *c)
{
    caps k = {0};
    bool ok = match(pattern, name, &k);
    c->n = k.n;
    for (int i = 0; i < k.n; i++) {
        c->s[i] = k.s[i];
        c->len[i] = k.len[i];
    }
    return ok;
}

bool tps_target_name_subst(const char *pattern, const tps_target_caps *c, int ncap, char *out, size_t size)
{
    caps k = {0};
    k.n = c->n;
    for (int i = 0; i < c->n && i < MAX_CAPS; i++) {
        k.s[i] = c->s[i];
        k.len[i] = c->len[i];
    }
    return subst(pattern, &k, ncap, out, size);
}

int tps_target_name_wildcards(const char *pattern)
{
    return wildcards(pattern);
}
