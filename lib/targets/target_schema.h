/* A layout's targets: section (the schema: lib/targets/target.h) read into a tps_target. */
#ifndef TPS_TARGET_SCHEMA_H
#define TPS_TARGET_SCHEMA_H

#include "../base/status.h"

typedef struct tps_target tps_target;

/* The mapping under key name (a registry entry's schema, lib/registry/registry.h: "vllm",
 * "sglang") of the layout text's targets: section; which names a command takes is the
 * registry's to say.  A layout without that key is TPS_EINVALID naming the presets that have
 * one. */
tps_status tps_target_load(const char *layout_text, const char *layout_name, const char *name, tps_target **out,
                           tps_error *err);
void tps_target_free(tps_target *t); /* accepts NULL */

#endif
