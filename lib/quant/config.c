/* What the readers of quantization_config share (lib/quant/quant_int.h): module lists,
 * strings, groups. */
#include <stdlib.h>
#include <string.h>

#include "quant_int.h"

tps_status tps_quant_patterns(const tps_json *v, const char *what, const char *key, tps_quant_pattern **out,
                              size_t *n, tps_error *err)
{
    *out = NULL;
    *n = 0;
    if (!v || v->type == TPS_JSON_NULL) return TPS_OK;
    if (v->type != TPS_JSON_ARRAY)
        return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" must be a list of module names", what, key);
    if (!(*out = calloc(v->u.array.n + 1, sizeof **out))) return tps_fail_oom(err, "quantization_config");
    for (size_t i = 0; i < v->u.array.n; i++) {
        const tps_json *e = v->u.array.items[i];
        if (e->type != TPS_JSON_STRING || strlen(e->u.string.s) != e->u.string.len)
            return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" entry %zu must be a string", what, key, i);
        tps_quant_pattern *p = &(*out)[(*n)++];
        const char *s = e->u.string.s;
        if (strncmp(s, "re:", 3) == 0) {
            size_t len = strlen(s + 3);
            char *anchored = malloc(len + 2);
            if (!anchored) return tps_fail_oom(err, "quantization_config");
            anchored[0] = '^';
            memcpy(anchored + 1, s + 3, len + 1);
            int rc = regcomp(&p->rx, anchored, REG_EXTENDED | REG_NOSUB);
            free(anchored);
            if (rc != 0)
                return tps_fail(err, TPS_EINVALID, "%s: quantization_config \"%s\" entry '%s' is not a regular expression "
                                "tpshard reads (POSIX extended)", what, key, s);
            p->re = true;
        }
        if (!(p->text = strdup(s))) return tps_fail_oom(err, "quantization_config");
    }
    return TPS_OK;
}

void tps_quant_patterns_free(tps_quant_pattern *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i].re) regfree(&p[i].rx);
        free(p[i].text);
    }
    free(p);
}

bool tps_quant_pattern_match(const tps_quant_pattern *p, const char *module, bool substring)
{
    if (p->re) return regexec(&p->rx, module, 0, NULL, 0) == 0;
    size_t n = strlen(p->text), m = strlen(module);
    if (strcmp(p->text, module) == 0) return true;
    if (m > n && module[m - n - 1] == '.' && strcmp(module + m - n, p->text) == 0) return true;
    return substring && n && strstr(module, p->text);
}

const char *tps_quant_str(const tps_json *obj, const char *key)
{
    const tps_json *v = tps_json_get(obj, key);
    return v && v->type == TPS_JSON_STRING ? v->u.string.s : NULL;
}

tps_status tps_quant_new_groups(tps_quant *q, size_t n, tps_error *err)
{
    if (!(q->groups = calloc(n ? n : 1, sizeof *q->groups))) return tps_fail_oom(err, "quantization_config");
    return TPS_OK;
}

tps_status tps_quant_not_converted(tps_quant *q, const tps_json *qc, const char *what, const char *key,
                                   tps_error *err)
{
    tps_status st = tps_quant_patterns(tps_json_get(qc, key), what, key, &q->ignore, &q->nignore, err);
    if (st == TPS_OK) q->ignore_substring = true;
    return st;
}
