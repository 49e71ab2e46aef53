/* Built-in layout presets: YAML texts from lib/presets/NAME.yaml, embedded at build time by
 * lib/presets/embed.sh.  The table ends with a {NULL, NULL} entry. */
#ifndef TPS_PRESETS_H
#define TPS_PRESETS_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "../base/status.h"

typedef struct tps_preset {
    const char *name;
    const char *yaml;
} tps_preset;

extern const tps_preset tps_presets[];

/* The preset called name exactly, or NULL. */
const tps_preset *tps_preset_find(const char *name);

/* The preset a user's name designates: a preset's name or one of its aliases: (Hugging Face
 * model_type spellings such as mistral, qwen2, gpt_neox), compared case-insensitively with
 * '-' and '_' alike.  NULL when none does. */
const tps_preset *tps_preset_resolve(const char *name);

/* Auto-detection: the preset a Hugging Face config.json asks for, by the first of its
 * "architectures" that a preset's architectures: lists, else by its "model_type"
 * (tps_preset_resolve).  found receives what decided it ("architectures LlamaForCausalLM",
 * "model_type llama").  Fails with TPS_EARG when the file names neither key, and with
 * TPS_EINVALID when no preset serves what it names (the message names that and lists the
 * architectures the presets serve; found then says what it named, and is "" on any other
 * failure). */
tps_status tps_preset_detect(const char *config_path, const tps_preset **out, char *found, size_t size,
                             tps_error *err);

/* The embedded presets whose YAML has(doc, arg) holds for, comma-separated into have, or
 * "(none)": what a refusal names as the ones that would do. */
const char *tps_yaml_presets_with(bool (*has)(yaml_document_t *doc, const void *arg), const void *arg, char *have,
                                  size_t size);

#endif
