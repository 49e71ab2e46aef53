/* A target's skip: entries applied to a manifest (lib/targets/target_skip.h). */
#include "target_skip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/json.h"
#include "../layout/layout.h" /* tps_glob_match */
#include "target_int.h"

/* The layer index name holds under S (PRE digits POST, POST a glob), or -1. */
static long long layer_of(const tskip *S, const char *name)
{
    size_t k = strlen(S->pre);
    if (strncmp(name, S->pre, k) != 0) return -1;
    const char *d = name + k;
    char *end;
    if (*d < '0' || *d > '9') return -1;
    unsigned long long v = strtoull(d, &end, 10);
    return tps_glob_match(S->post, end) && v < (1ull << 40) ? (long long)v : -1;
}

/* config.json's key (recorded in the manifest's config_keys): the main model's layer count. */
static tps_status config_count(const tps_target *t, const tps_manifest *m, const char *key, const char *tensor,
                               uint64_t *out, tps_error *err)
{
    tps_json_doc *doc = NULL;
    if (!m->config_keys)
        return tps_fail(err, TPS_EINVALID, "--target %s: whether '%s' is past the main model's layers takes "
                        "config.json's %s (%s's skip:), and no config.json was read (give --config)", t->name, tensor, key, t->source);
    tps_status st = tps_json_parse(m->config_keys, strlen(m->config_keys), "the recorded config", &doc, err);
    if (st != TPS_OK) return st;
    const tps_json *v = tps_json_get(tps_json_root(doc), key);
    if (!v || v->type != TPS_JSON_NUMBER || !v->u.number.is_u64)
        st = tps_fail(err, TPS_EINVALID, "--target %s: whether '%s' is past the main model's layers takes "
                      "config.json's %s (%s's skip:), and the config has no whole number %s", t->name, tensor, key, t->source, key);
    else *out = v->u.number.u64;
    tps_json_doc_free(doc);
    return st;
}

/* One "skipped" entry PRE N POST with reason: counted up when it is there, else appended. */
static tps_status record(tps_manifest *m, const tskip *S, long long layer, tps_error *err)
{
    char glob[1024];
    snprintf(glob, sizeof glob, "%s%lld%s", S->pre, layer, S->post);
    for (size_t i = 0; i < m->nskipped; i++)
        if (strcmp(m->skipped[i].glob, glob) == 0) return m->skipped[i].count++, TPS_OK;
    tps_manifest_skip *ns = realloc(m->skipped, (m->nskipped + 1) * sizeof *ns);
    if (!ns) return tps_fail_oom(err, "laying out the target");
    m->skipped = ns;
    tps_manifest_skip *sk = &m->skipped[m->nskipped];
    *sk = (tps_manifest_skip){strdup(glob), 1, strdup(S->reason)};
    if (!sk->glob || !sk->reason) {
        free(sk->glob);
        free(sk->reason);
        return tps_fail_oom(err, "laying out the target");
    }
    m->nskipped++;
    return TPS_OK;
}

tps_status tps_target_skip_apply(const tps_target *t, tps_manifest *m, tps_error *err)
{
    size_t kept = 0, dropped = 0;
    for (size_t si = 0; si < t->ns; si++) {
        size_t first = 0;
        while (first < m->ntensors && layer_of(&t->s[si], m->tensors[first].name) < 0) first++;
        if (first == m->ntensors) continue;
        uint64_t from = 0;
        tps_status st = config_count(t, m, t->s[si].layers_from, m->tensors[first].name, &from, err);
        if (st != TPS_OK) return st;
        kept = 0;
        for (size_t i = 0; i < m->ntensors; i++) {
            tps_manifest_tensor *x = &m->tensors[i];
            long long layer = layer_of(&t->s[si], x->name);
            if (layer < 0 || (uint64_t)layer < from) {
                m->tensors[kept++] = *x;
                continue;
            }
            if ((st = record(m, &t->s[si], layer, err)) != TPS_OK) {
                m->tensors[kept++] = *x; /* still owned by m */
                for (size_t j = i + 1; j < m->ntensors; j++) m->tensors[kept++] = m->tensors[j];
                m->ntensors = kept;
                return st;
            }
            if (!m->strings) {
                free(x->name);
                free(x->rule);
            }
            free(x->target_name);
            dropped++;
        }
        m->ntensors = kept;
    }
    /* the name index holds positions that moved */
    return dropped && m->tensor_names.cap ? tps_manifest_index(m, "the target's manifest", err) : TPS_OK;
}
