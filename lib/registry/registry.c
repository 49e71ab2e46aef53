/* The targets' one table (lib/registry/registry.h). */
#include "registry.h"

#include <stdio.h>
#include <string.h>

#include "../engine/file_names.h"

static const char *const megatron_formats[] = {"torch", "torch_dist", NULL};

/* Table order is the order messages list names in. */
static const tps_target_entry entries[] = {
    {"tpshard", TPS_TARGET_DEFAULT | TPS_TARGET_SET, NULL, TPS_DEFAULT_NAME_TEMPLATE, NULL,
     "tpshard's own sets: the source's names"},
    {"vllm", TPS_TARGET_SET | TPS_TARGET_RELEASES | TPS_TARGET_PP | TPS_TARGET_EP | TPS_TARGET_ADOPT, "vllm",
     TPS_DEFAULT_PART_TEMPLATE, NULL, "vLLM's load_format=sharded_state"},
    {"sglang", TPS_TARGET_SET | TPS_TARGET_RELEASES | TPS_TARGET_ADOPT, "sglang", TPS_DEFAULT_PART_TEMPLATE, NULL,
     "SGLang's load_format=sharded_state"},
    {"megatron", TPS_TARGET_CHECKPOINT | TPS_TARGET_PP, "megatron", "iter_0000001/mp_rank_XX[_YYY]/model_optim_rng.pt",
     megatron_formats, "a Megatron-LM checkpoint"},
    {"hf", TPS_TARGET_MERGE, NULL, "model-XXXXX-of-YYYYY.safetensors", NULL,
     "a Megatron-LM checkpoint as a Hugging Face model"},
};
#define NENTRIES (sizeof entries / sizeof entries[0])

const tps_target_entry *tps_target_find(const char *name)
{
    for (size_t i = 0; i < NENTRIES; i++)
        if (name ? strcmp(entries[i].name, name) == 0 : (entries[i].caps & TPS_TARGET_DEFAULT) != 0) return &entries[i];
    return NULL;
}

const tps_target_entry *tps_target_with(unsigned caps)
{
    for (size_t i = 0; i < NENTRIES; i++)
        if ((entries[i].caps & caps) == caps) return &entries[i];
    return NULL;
}

bool tps_target_can(const char *name, unsigned caps)
{
    const tps_target_entry *e = tps_target_find(name);
    return e && (e->caps & caps) == caps;
}

const tps_target_entry *tps_target_lookup(const char *name, unsigned caps, tps_error *err)
{
    const tps_target_entry *e = tps_target_find(name);
    if (e && (e->caps & caps) == caps) return e;
    char names[256];
    tps_fail(err, TPS_EARG, "--target '%s': expected %s", name, tps_target_names(caps, names, sizeof names));
    return NULL;
}

const char *tps_target_names(unsigned caps, char *buf, size_t size)
{
    size_t n = 0, k = 0, len = 0;
    for (size_t i = 0; i < NENTRIES; i++) n += (entries[i].caps & caps) == caps;
    buf[0] = '\0';
    for (size_t i = 0; i < NENTRIES && len < size; i++) {
        if ((entries[i].caps & caps) != caps) continue;
        const char *sep = k == 0 ? "" : k + 1 == n ? " or " : ", ";
        int w = snprintf(buf + len, size - len, "%s%s", sep, entries[i].name);
        len += w > 0 ? (size_t)w : 0;
        k++;
    }
    return buf;
}

int tps_target_format(const tps_target_entry *e, const char *v)
{
    if (!v) return 0;
    for (int i = 0; e->formats && e->formats[i]; i++)
        if (strcmp(e->formats[i], v) == 0) return i;
    return -1;
}
