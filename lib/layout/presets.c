#include "presets.h"

#include <string.h>

const tps_preset *tps_preset_find(const char *name)
{
    for (const tps_preset *p = tps_presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}
