#include "presets.h"

#include <stdio.h>
#include <string.h>

#include "../base/yaml_query.h"

const tps_preset *tps_preset_find(const char *name)
{
    for (const tps_preset *p = tps_presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

const char *tps_yaml_presets_with(bool (*has)(yaml_document_t *doc, const void *arg), const void *arg, char *have,
                                  size_t size)
{
    size_t k = 0;
    have[0] = '\0';
    for (const tps_preset *pr = tps_presets; pr->name; pr++)
        if (tps_yaml_text_has(pr->yaml, has, arg) && k < size)
            k += (size_t)snprintf(have + k, size - k, "%s%s", k ? ", " : "", pr->name);
    return k ? have : "(none)";
}
