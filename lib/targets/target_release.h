/* Release numbers of a serving engine: the since: and before: of a target's entries
 * (lib/targets/target.h) and --target-version.  A release class runs from a since: to the
 * next before:; NULL as the version asked for means the newest release. */
#ifndef TPS_TARGET_RELEASE_H
#define TPS_TARGET_RELEASE_H

#include <stdbool.h>

/* A release number: digits separated by dots (0.14, 0.14.1). */
bool tps_target_version_ok(const char *s);
/* a < b, component by component (0.9 < 0.14; a missing component is 0). */
bool tps_target_version_less(const char *a, const char *b);
/* Whether release version (NULL: the newest) is in [since, before) (either may be NULL: open). */
bool tps_target_in_releases(const char *since, const char *before, const char *version);

#endif
