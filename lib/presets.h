/* Built-in layout presets: YAML texts from lib/presets/NAME.yaml, embedded at build time by
 * lib/presets/embed.sh.  The table ends with a {NULL, NULL} entry. */
#ifndef TPS_PRESETS_H
#define TPS_PRESETS_H

typedef struct tps_preset {
    const char *name;
    const char *yaml;
} tps_preset;

extern const tps_preset tps_presets[];

/* The preset called name, or NULL. */
const tps_preset *tps_preset_find(const char *name);

#endif
