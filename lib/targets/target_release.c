/* Release numbers (lib/targets/target_release.h). */
#include "target_release.h"

#include <stdlib.h>

/* A release number: digits separated by dots (0.14, 0.14.1). */
bool tps_target_version_ok(const char *s)
{
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        if (*p == '.' && p[1] >= '0' && p[1] <= '9' && p > s) continue;
        if (*p < '0' || *p > '9') return false;
    }
    return true;
}

/* a < b, component by component (0.9 < 0.14; a missing component is 0). */
bool tps_target_version_less(const char *a, const char *b)
{
    while (*a || *b) {
        char *ea, *eb;
        unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
        if (x != y) return x < y;
        a = *ea ? ea + 1 : ea;
        b = *eb ? eb + 1 : eb;
    }
    return false;
}

/* Whether release version (NULL: the newest) is in [since, before) (either may be NULL: open). */
bool tps_target_in_releases(const char *since, const char *before, const char *version)
{
    if (since && version && tps_target_version_less(version, since)) return false;
    return !before || (version && tps_target_version_less(version, before));
}
