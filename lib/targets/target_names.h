/* The name patterns of a target's mapping (lib/targets/target.h), and of other mappings
 * written the same way (lib/registry/megatron_hf.h). */
#ifndef TPS_TARGET_NAMES_H
#define TPS_TARGET_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* The mapping's name patterns, for other mappings written the same way (lib/registry/megatron_hf.h):
 * '*' matches a non-empty dot-free run and '{a,b}' one alternative, each a capture. */
#define TPS_TARGET_MAX_CAPS 8
typedef struct tps_target_caps {
    int n;
    const char *s[TPS_TARGET_MAX_CAPS];
    size_t len[TPS_TARGET_MAX_CAPS];
} tps_target_caps;
/* Whether name matches pattern, its captures into *c (c->n 0 on entry). */
bool tps_target_name_match(const char *pattern, const char *name, tps_target_caps *c);
/* pattern with its wildcards replaced by the first ncap captures; false when too long or
 * short of captures. */
bool tps_target_name_subst(const char *pattern, const tps_target_caps *c, int ncap, char *out, size_t size);
/* How many wildcards pattern has. */
int tps_target_name_wildcards(const char *pattern);

#endif
