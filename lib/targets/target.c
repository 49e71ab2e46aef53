#include "target.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "../base/checked.h"
#include "../base/crc.h"
#include "../base/json.h"
#include "../layout/presets.h"
#include "../layout/yaml_query.h"
#include "../set/parts.h"

#define MAX_CAPS 8
#define MAX_FROM 8
#define NAME_MAX_LEN 1024

/* extras: entry: names the engine's state dict holds once per match of per, whatever the
 * source (vLLM's attention scale buffers), each a 0-d F32 value; since: the first release
 * of the engine that has them, before: the first that no longer has them under these names
 * (vLLM 0.32 serves GPT-NeoX through its Transformers backend, under model.*), engine: the
 * one engine they are for. */
typedef struct textra {
    char *names[MAX_FROM];
    size_t nnames;
    char *per, *since, *before, *engine;
    double value;
} textra;

/* tensors: entry.  since: the first engine release whose state dict has into (an earlier
 * entry with the same from wins from that release on, a later one names the older releases'
 * tensor: vLLM 0.24 moved FusedMoE's w13_weight/w2_weight into experts.routed_experts);
 * engine: the one engine it is for (not sglang through an alias). */
typedef struct tentry {
    char *from[MAX_FROM];
    size_t nfrom;
    char *into;
    char *since, *engine;
    bool stack, tied;
    size_t line;
} tentry;

/* blocked: entry: tensors whose rank files hold their rows blocked (target_blocks); before:
 * the first engine release that holds them as the source does (vLLM 0.32's GPT-NeoX);
 * engine: the one engine it is for. */
typedef struct tblocked {
    char *match;
    char *before, *engine;
    uint64_t blocks; /* 0: a transposed: entry */
} tblocked;

struct tps_target {
    tblocked *b;
    size_t nb;
    char *name;
    char *source; /* what messages call the layout */
    uint64_t vocab_multiple;
    char *experts_rule;  /* the engine refuses a tp above the experts of a stack: its rule */
    tentry *e;
    size_t n;
    textra *x;
    size_t nx;
    textra *q; /* required: what an engine-saved set must hold once per match of per */
    size_t nq;
};

void tps_target_free(tps_target *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        for (size_t j = 0; j < t->e[i].nfrom; j++) free(t->e[i].from[j]);
        free(t->e[i].into);
        free(t->e[i].since);
        free(t->e[i].engine);
    }
    free(t->e);
    for (size_t i = 0; i < t->nx + t->nq; i++) {
        textra *x = i < t->nx ? &t->x[i] : &t->q[i - t->nx];
        for (size_t j = 0; j < x->nnames; j++) free(x->names[j]);
        free(x->per);
        free(x->since);
        free(x->before);
        free(x->engine);
    }
    free(t->x);
    free(t->q);
    for (size_t i = 0; i < t->nb; i++) {
        free(t->b[i].match);
        free(t->b[i].before);
        free(t->b[i].engine);
    }
    free(t->b);
    free(t->experts_rule);
    free(t->name);
    free(t->source);
    free(t);
}

/* ---- names with captures ---- */

typedef struct caps {
    int n;
    const char *s[MAX_CAPS];
    size_t len[MAX_CAPS];
} caps;

/* '*' a non-empty dot-free run, '{a,b}' one alternative; each is a capture. */
static bool match(const char *p, const char *s, caps *c)
{
    if (!*p) return !*s;
    if (*p == '*' || *p == '{') {
        int k = c->n;
        if (k >= MAX_CAPS) return false;
        c->n = k + 1;
        if (*p == '*') {
            for (size_t l = 1; s[l - 1] && s[l - 1] != '.'; l++) {
                c->s[k] = s;
                c->len[k] = l;
                if (match(p + 1, s + l, c)) return true;
            }
        } else {
            const char *close = strchr(p, '}');
            for (const char *a = p + 1; close && a <= close;) {
                const char *end = a;
                while (end < close && *end != ',') end++;
                size_t l = (size_t)(end - a);
                c->s[k] = s;
                c->len[k] = l;
                if (strncmp(s, a, l) == 0 && match(close + 1, s + l, c)) return true;
                a = end + 1;
            }
        }
        c->n = k;
        return false;
    }
    return *p == *s && match(p + 1, s + 1, c);
}

static int wildcards(const char *p)
{
    int n = 0;
    for (; *p; p++)
        if (*p == '*' || *p == '{') n++;
    return n;
}

/* p with its wildcards replaced by the first ncap captures; false when too long. */
static bool subst(const char *p, const caps *c, int ncap, char *out, size_t size)
{
    size_t n = 0;
    int k = 0;
    while (*p) {
        const char *piece = p;
        size_t len = 1;
        if (*p == '*' || *p == '{') {
            if (k >= ncap) return false;
            piece = c->s[k];
            len = c->len[k++];
            p = *p == '{' ? strchr(p, '}') + 1 : p + 1;
        } else {
            p++;
        }
        if (n + len + 1 > size) return false;
        memcpy(out + n, piece, len);
        n += len;
    }
    out[n] = '\0';
    return true;
}

/* ---- the targets: section ---- */

/* The shared libyaml queries (yaml_query.h), under the short names this file's parsers use. */
typedef tps_yaml_ctx yctx;
#define yscalar tps_yaml_scalar
#define ykey tps_yaml_key
#define ybad tps_yaml_fail
#define ytrue tps_yaml_true

static bool version_ok(const char *s);

static tps_status parse_entry(yctx *c, const yaml_node_t *en, tentry *e)
{
    static const char *const allowed[] = {"into", "from", "stack", "tied", "since", "engine", NULL};
    if (en->type != YAML_MAPPING_NODE) return ybad(c, en, "each tensors: entry is a mapping with into and from");
    tps_status st = tps_yaml_only_keys(c, en, allowed, "unknown key (into, from, stack, tied, since, engine)");
    if (st != TPS_OK) return st;
    e->line = en->start_mark.line + 1;
    const char *into = yscalar(ykey(c->doc, en, "into"));
    yaml_node_t *from = ykey(c->doc, en, "from");
    if (!into || !from) return ybad(c, en, "an entry needs into (a name) and from (a name or a list)");
    e->stack = ytrue(ykey(c->doc, en, "stack"));
    e->tied = ytrue(ykey(c->doc, en, "tied"));
    if (!(e->into = strdup(into))) return tps_fail_oom(c->err, "reading a target");
    const char *since = yscalar(ykey(c->doc, en, "since")), *engine = yscalar(ykey(c->doc, en, "engine"));
    if (since && !version_ok(since)) return ybad(c, ykey(c->doc, en, "since"), "since is a release number (0.24)");
    if ((since && !(e->since = strdup(since))) || (engine && !(e->engine = strdup(engine))))
        return tps_fail_oom(c->err, "reading a target");
    if (from->type == YAML_SCALAR_NODE) {
        if (!(e->from[e->nfrom++] = strdup(yscalar(from)))) return tps_fail_oom(c->err, "reading a target");
    } else if (from->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = from->data.sequence.items.start; it < from->data.sequence.items.top; it++) {
            const char *s = yscalar(yaml_document_get_node(c->doc, *it));
            if (!s) return ybad(c, from, "from lists names");
            if (e->nfrom == MAX_FROM) return ybad(c, from, "at most 8 names in from");
            if (!(e->from[e->nfrom++] = strdup(s))) return tps_fail_oom(c->err, "reading a target");
        }
    } else {
        return ybad(c, from, "from is a name or a list of names");
    }
    if (e->nfrom == 0) return ybad(c, from, "from is empty");
    int w = wildcards(e->from[0]);
    if (w > MAX_CAPS) return ybad(c, from, "at most 8 wildcards in a name");
    for (size_t j = 1; j < e->nfrom; j++)
        if (wildcards(e->from[j]) != w) return ybad(c, from, "every name of from needs as many wildcards as the first");
    if (e->stack && w < 1) return ybad(c, en, "stack: true needs a wildcard in from for the expert");
    if (wildcards(e->into) != w - (e->stack ? 1 : 0))
        return ybad(c, en, e->stack ? "into needs one wildcard fewer than from (the last counts the stack)"
                                    : "into needs as many wildcards as from");
    return TPS_OK;
}

/* A release number: digits separated by dots (0.14, 0.14.1). */
static bool version_ok(const char *s)
{
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        if (*p == '.' && p[1] >= '0' && p[1] <= '9' && p > s) continue;
        if (*p < '0' || *p > '9') return false;
    }
    return true;
}

/* a < b, component by component (0.9 < 0.14; a missing component is 0). */
static bool version_less(const char *a, const char *b)
{
    while (*a || *b) {
        char *ea, *eb;
        unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
        if (x != y) return x < y;
        a = *ea ? ea + 1 : ea;
        b = *eb ? eb + 1 : eb;
    }
    return false;
}

/* An extras: entry (constant: names, per, value, since, engine) or a required: one (names, per). */
static tps_status parse_extra(yctx *c, const yaml_node_t *en, textra *x, bool constant)
{
    static const char *const allowed[] = {"names", "per", "value", "since", "before", "engine", NULL};
    static const char *const allowed_required[] = {"names", "per", NULL};
    if (en->type != YAML_MAPPING_NODE)
        return ybad(c, en, constant ? "each extras: entry is a mapping with names, per and value"
                                    : "each required: entry is a mapping with names and per");
    tps_status st = constant ? tps_yaml_only_keys(c, en, allowed, "unknown key (names, per, value, since, before, engine)")
                             : tps_yaml_only_keys(c, en, allowed_required, "unknown key (names, per)");
    if (st != TPS_OK) return st;
    yaml_node_t *names = ykey(c->doc, en, "names");
    const char *per = yscalar(ykey(c->doc, en, "per")), *value = yscalar(ykey(c->doc, en, "value"));
    const char *since = yscalar(ykey(c->doc, en, "since")), *engine = yscalar(ykey(c->doc, en, "engine"));
    const char *before = yscalar(ykey(c->doc, en, "before"));
    if (!names || names->type != YAML_SEQUENCE_NODE || !per || (constant && !value))
        return ybad(c, en, constant ? "an extras entry needs names (a list), per (a source name) and value (a number)"
                                    : "a required entry needs names (a list) and per (an engine name)");
    char *end;
    x->value = value ? strtod(value, &end) : 0;
    if (value && (*end || end == value)) return ybad(c, ykey(c->doc, en, "value"), "value is a number");
    if (since && !version_ok(since)) return ybad(c, ykey(c->doc, en, "since"), "since is a release number (0.14)");
    if (before && !version_ok(before)) return ybad(c, ykey(c->doc, en, "before"), "before is a release number (0.32)");
    if (!(x->per = strdup(per)) || (since && !(x->since = strdup(since))) || (before && !(x->before = strdup(before))) ||
        (engine && !(x->engine = strdup(engine))))
        return tps_fail_oom(c->err, "reading a target");
    int w = wildcards(per);
    if (w > MAX_CAPS) return ybad(c, en, "at most 8 wildcards in a name");
    for (yaml_node_item_t *it = names->data.sequence.items.start; it < names->data.sequence.items.top; it++) {
        const char *s = yscalar(yaml_document_get_node(c->doc, *it));
        if (!s) return ybad(c, names, "names lists names");
        if (x->nnames == MAX_FROM) return ybad(c, names, "at most 8 names");
        if (wildcards(s) != w) return ybad(c, names, "every name needs as many wildcards as per");
        if (!(x->names[x->nnames++] = strdup(s))) return tps_fail_oom(c->err, "reading a target");
    }
    if (!x->nnames) return ybad(c, names, "names is empty");
    return TPS_OK;
}

/* The mapping node of target name in a parsed layout, following one alias ("sglang: vllm"). */
static yaml_node_t *find_target(yaml_document_t *doc, const char *name)
{
    yaml_node_t *targets = ykey(doc, yaml_document_get_root_node(doc), "targets");
    yaml_node_t *t = ykey(doc, targets, name);
    const char *alias = yscalar(t);
    if (alias) t = ykey(doc, targets, alias);
    return t && t->type == YAML_MAPPING_NODE ? t : NULL;
}

/* A target mapping may be `refuse: "why"` alone: the family has parameters the mapping
 * cannot write (a tensor the engine cuts where the preset keeps it whole, a persistent buffer),
 * and a named refusal beats a set the engine rejects at load. */
static const char *refusal(yaml_document_t *doc, const yaml_node_t *t) { return yscalar(ykey(doc, t, "refuse")); }

static bool has_target(yaml_document_t *doc, const void *name)
{
    yaml_node_t *t = find_target(doc, name);
    return t && !refusal(doc, t);
}

tps_status tps_target_load(const char *layout_text, const char *layout_name, const char *name, tps_target **out,
                           tps_error *err)
{
    *out = NULL;
    if (strcmp(name, "tpshard") == 0) return TPS_OK;
    if (strcmp(name, "vllm") != 0 && strcmp(name, "sglang") != 0)
        return tps_fail(err, TPS_EARG, "--target '%s': expected tpshard, vllm or sglang", name);
    yaml_parser_t p;
    yaml_document_t doc;
    bool doc_ok = false;
    tps_status st = TPS_OK;
    tps_target *t = calloc(1, sizeof *t);
    if (!t || !yaml_parser_initialize(&p)) {
        free(t);
        return tps_fail_oom(err, "reading a target");
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)layout_text, strlen(layout_text));
    if (!yaml_parser_load(&p, &doc)) {
        st = tps_fail(err, TPS_EINVALID, "%s: the layout is not valid YAML", layout_name);
        goto cleanup;
    }
    doc_ok = true;
    yctx c = {&doc, layout_name, err, NULL};
    yaml_node_t *tn = find_target(&doc, name);
    char have[1024];
    if (!tn) {
        st = tps_fail(err, TPS_EINVALID, "%s has no mapping for --target %s; the presets with one: %s", layout_name,
                      name, tps_yaml_presets_with(has_target, name, have, sizeof have));
        goto cleanup;
    }
    const char *why = refusal(&doc, tn);
    if (why) {
        st = tps_fail(err, TPS_EINVALID, "%s: --target %s is refused: %s", layout_name, name, why);
        goto cleanup;
    }
    if (!(t->name = strdup(name)) || !(t->source = strdup(layout_name))) {
        st = tps_fail_oom(err, "reading a target");
        goto cleanup;
    }
    for (yaml_node_pair_t *pp = tn->data.mapping.pairs.start; pp < tn->data.mapping.pairs.top; pp++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pp->key), *v = yaml_document_get_node(&doc, pp->value);
        const char *ks = yscalar(k);
        if (ks && strcmp(ks, "vocab_multiple") == 0) {
            const char *s = yscalar(v);
            char *end;
            unsigned long long q = s ? strtoull(s, &end, 10) : 0;
            if (!s || *end || q < 1 || q > (1u << 20)) {
                st = ybad(&c, v, "vocab_multiple is a number from 1 to 1048576");
                goto cleanup;
            }
            t->vocab_multiple = q;
        } else if (ks && (strcmp(ks, "extras") == 0 || strcmp(ks, "required") == 0)) {
            bool constant = strcmp(ks, "extras") == 0;
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, constant ? "extras is a list of {names, per, value}" : "required is a list of {names, per}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            textra **list = constant ? &t->x : &t->q;
            size_t *count = constant ? &t->nx : &t->nq;
            if (*list || !(*list = calloc(n + 1, sizeof **list))) {
                st = *list ? ybad(&c, k, "given twice") : tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            for (size_t i = 0; i < n; i++) {
                *count = i + 1;
                TPS_CHECK(parse_extra(&c, yaml_document_get_node(&doc, v->data.sequence.items.start[i]), &(*list)[i],
                                      constant));
            }
        } else if (ks && strcmp(ks, "tp_at_most_experts") == 0) {
            const char *s = yscalar(v);
            if (!s || !*s) {
                st = ybad(&c, v, "tp_at_most_experts is text naming the engine's rule");
                goto cleanup;
            }
            free(t->experts_rule);
            if (!(t->experts_rule = strdup(s))) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
        } else if (ks && strcmp(ks, "blocked") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "blocked is a list of {match, blocks}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            tblocked *nb = realloc(t->b, (t->nb + n + 1) * sizeof *nb);
            if (!nb) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            t->b = nb;
            for (size_t i = 0; i < n; i++) {
                static const char *const allowed[] = {"match", "blocks", "before", "engine", NULL};
                static const char *const shape = "a blocked: entry is {match: NAME, blocks: 2 to 64[, before: RELEASE, engine: NAME]}";
                yaml_node_t *en = yaml_document_get_node(&doc, v->data.sequence.items.start[i]);
                if (en->type != YAML_MAPPING_NODE) {
                    st = ybad(&c, en, shape);
                    goto cleanup;
                }
                if ((st = tps_yaml_only_keys(&c, en, allowed, shape)) != TPS_OK) goto cleanup;
                const char *mt = yscalar(ykey(&doc, en, "match")), *bs = yscalar(ykey(&doc, en, "blocks"));
                const char *bf = yscalar(ykey(&doc, en, "before")), *eg = yscalar(ykey(&doc, en, "engine"));
                char *end = NULL;
                unsigned long long q = bs ? strtoull(bs, &end, 10) : 0;
                if (!mt || !bs || *end || q < 2 || q > 64 || (bf && !version_ok(bf))) {
                    st = ybad(&c, en, shape);
                    goto cleanup;
                }
                t->b[t->nb] = (tblocked){strdup(mt), bf ? strdup(bf) : NULL, eg ? strdup(eg) : NULL, q};
                const tblocked *B = &t->b[t->nb++];
                if (!B->match || (bf && !B->before) || (eg && !B->engine)) {
                    st = tps_fail_oom(err, "reading a target");
                    goto cleanup;
                }
            }
        } else if (ks && strcmp(ks, "transposed") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "transposed is a list of names");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            tblocked *b = realloc(t->b, (t->nb + n + 1) * sizeof *b);
            if (!b) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            t->b = b;
            for (size_t i = 0; i < n; i++) {
                yaml_node_t *en = yaml_document_get_node(&doc, v->data.sequence.items.start[i]);
                const char *mt = yscalar(en);
                if (!mt) {
                    st = ybad(&c, en, "transposed lists names");
                    goto cleanup;
                }
                t->b[t->nb] = (tblocked){strdup(mt), NULL, NULL, 0};
                if (!t->b[t->nb++].match) {
                    st = tps_fail_oom(err, "reading a target");
                    goto cleanup;
                }
            }
        } else if (ks && strcmp(ks, "tensors") == 0) {
            if (v->type != YAML_SEQUENCE_NODE) {
                st = ybad(&c, v, "tensors is a list of {into, from}");
                goto cleanup;
            }
            size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
            if (!(t->e = calloc(n + 1, sizeof *t->e))) {
                st = tps_fail_oom(err, "reading a target");
                goto cleanup;
            }
            for (size_t i = 0; i < n; i++) {
                t->n = i + 1;
                TPS_CHECK(parse_entry(&c, yaml_document_get_node(&doc, v->data.sequence.items.start[i]), &t->e[i]));
            }
        } else {
            st = ybad(&c, k, "unknown key (vocab_multiple, tensors, extras, required, tp_at_most_experts, blocked, transposed)");
            goto cleanup;
        }
    }
    *out = t;
    t = NULL;
cleanup:
    if (doc_ok) yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    tps_target_free(t);
    return st;
}

/* ---- runs of members ---- */

static size_t run_end(const tps_manifest *m, size_t i)
{
    const char *n = m->tensors[i].target_name;
    size_t j = i + 1;
    while (n && j < m->ntensors && m->tensors[j].target_name && strcmp(m->tensors[j].target_name, n) == 0) j++;
    return j;
}

/* The shape rank r's files give run [i, j). */
static tps_status run_shape(const tps_manifest *m, size_t i, size_t j, uint64_t r, uint64_t *out, int *nd,
                            tps_error *err)
{
    const tps_manifest_tensor *h = &m->tensors[i];
    uint64_t S = h->target_stack ? h->target_stack : 1;
    if ((j - i) % S != 0)
        return tps_fail(err, TPS_EINVALID, "target tensor '%s': %zu members do not make %llu equal groups",
                        h->target_name, j - i, (unsigned long long)S);
    size_t per = (j - i) / S;
    uint64_t base[TPS_MAX_DIMS] = {0};
    int bnd = 0;
    for (uint64_t s = 0; s < S; s++) {
        uint64_t g[TPS_MAX_DIMS] = {0};
        int gnd = 0;
        for (size_t k = 0; k < per; k++) {
            const tps_manifest_tensor *t = &m->tensors[i + s * per + k];
            uint64_t rs[TPS_MAX_DIMS];
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, rs);
            tps_target_file_shape(t, rs);
            if (t->dtype != h->dtype || t->target_stack != h->target_stack || t->ndim < 1 ||
                (k && (t->ndim != gnd || memcmp(rs + 1, g + 1, sizeof *rs * (size_t)(gnd - 1)))))
                return tps_fail(err, TPS_EINVALID,
                                "target tensor '%s': '%s' does not concatenate with '%s' along dimension 0 "
                                "(dtype, stack or trailing dimensions differ)",
                                h->target_name, t->name, m->tensors[i].name);
            if (!k) {
                memcpy(g, rs, sizeof *rs * (size_t)t->ndim);
                gnd = t->ndim;
            } else {
                g[0] += rs[0];
            }
        }
        if (s && (gnd != bnd || memcmp(g, base, sizeof *g * (size_t)gnd)))
            return tps_fail(err, TPS_EINVALID, "target tensor '%s': its stacked groups differ in shape",
                            h->target_name);
        memcpy(base, g, sizeof g);
        bnd = gnd;
    }
    if (h->target_stack) {
        if (bnd + 1 > TPS_MAX_DIMS)
            return tps_fail(err, TPS_EINVALID, "target tensor '%s': too many dimensions", h->target_name);
        out[0] = S;
        memcpy(out + 1, base, sizeof *base * (size_t)bnd);
        *nd = bnd + 1;
    } else {
        memcpy(out, base, sizeof *base * (size_t)bnd);
        *nd = bnd;
    }
    return TPS_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

tps_status tps_target_manifest_load(const char *dir, tps_manifest **out, tps_error *err)
{
    tps_status st = tps_manifest_load(dir, out, err);
    if (st) return st;
    char what[4096];
    snprintf(what, sizeof what, "%s/%s", dir, TPS_MANIFEST_NAME);
    st = tps_target_check_manifest(*out, what, err);
    if (st) {
        tps_manifest_free(*out);
        *out = NULL;
    }
    return st;
}

tps_status tps_target_check_manifest(const tps_manifest *m, const char *what, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *t = &m->tensors[i];
        tps_error e;
        tps_error_clear(&e);
        if (!t->target_blocks && !t->target_transpose) continue;
        if (!m->target)
            return tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is reordered for a target but the manifest names none",
                            what, t->name);
        if (tps_target_permute_check(t, m->tp, &e)) return tps_fail(err, TPS_EINVALID, "%s: %s", what, e.msg);
    }
    size_t nruns = 0;
    for (size_t i = 0; i < m->ntensors; i++)
        if (m->tensors[i].target_name) nruns++;
    if (!nruns) return TPS_OK;
    if (!m->target)
        return tps_fail(err, TPS_EINVALID, "%s: tensors carry target names but the manifest names no target", what);
    char **names = calloc(nruns, sizeof *names);
    if (!names) return tps_fail_oom(err, "loading the manifest");
    tps_status st = TPS_OK;
    size_t k = 0;
    for (size_t i = 0; i < m->ntensors;) {
        const tps_manifest_tensor *t = &m->tensors[i];
        if (!t->target_name) {
            i++;
            continue;
        }
        size_t j = run_end(m, i);
        const tps_manifest_tensor *same = tps_manifest_find(m, t->target_name);
        if (same && (same < t || same >= m->tensors + j)) {
            st = tps_fail(err, TPS_EINVALID, "%s: target name '%s' is also a tensor's own name", what,
                          t->target_name);
            goto cleanup;
        }
        for (uint64_t r = 0; r < m->tp; r++) {
            uint64_t shape[TPS_MAX_DIMS];
            int nd;
            tps_error e;
            tps_error_clear(&e);
            if (run_shape(m, i, j, r, shape, &nd, &e)) {
                st = tps_fail(err, TPS_EINVALID, "%s: %s", what, e.msg);
                goto cleanup;
            }
            if (!t->part->pad || t->part->replicated) break; /* only padding makes ranks differ */
        }
        names[k++] = t->target_name;
        i = j;
    }
    qsort(names, k, sizeof *names, cmp_str);
    for (size_t i = 1; i < k; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = tps_fail(err, TPS_EINVALID, "%s: target tensor '%s' is split into runs that are not consecutive",
                          what, names[i]);
            goto cleanup;
        }
cleanup:
    free(names);
    return st;
}

/* ---- laying a manifest out for a target ---- */

/* Source names and padding, no extras; the version stays (tps_target_apply redoes the rest). */
static tps_status clear_layout(tps_manifest *m, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        free(m->tensors[i].target_name);
        m->tensors[i].target_name = NULL;
        m->tensors[i].target_stack = 0;
        m->tensors[i].target_blocks = 0;
        m->tensors[i].target_transpose = false;
        tps_status st = tps_manifest_set_pad_multiple(m, &m->tensors[i], 0, err);
        if (st) return st;
    }
    for (size_t i = 0; i < m->nextras; i++) free(m->extras[i].name);
    free(m->extras);
    m->extras = NULL;
    m->nextras = 0;
    free(m->target);
    m->target = NULL;
    return TPS_OK;
}

tps_status tps_target_clear(tps_manifest *m, tps_error *err)
{
    free(m->target_version);
    m->target_version = NULL;
    return clear_layout(m, err);
}

/* Whether release version (NULL: the newest) is in [since, before) (either may be NULL: open). */
static bool in_releases(const char *since, const char *before, const char *version)
{
    if (since && version && version_less(version, since)) return false;
    return !before || (version && version_less(version, before));
}

/* Whether tensors: entry E names the tensor of target t's engine at release version (NULL:
 * the newest). */
static bool entry_applies(const tps_target *t, const tentry *E, const char *version)
{
    if (E->engine && strcmp(E->engine, t->name) != 0) return false;
    return in_releases(E->since, NULL, version);
}

/* m's extras: each applicable entry's names once per source tensor its per matches. */
static tps_status apply_extras(const tps_target *t, tps_manifest *m, tps_error *err)
{
    size_t cap = 0;
    for (size_t xi = 0; xi < t->nx; xi++) {
        const textra *X = &t->x[xi];
        if (X->engine && strcmp(X->engine, t->name) != 0) continue;
        if (!in_releases(X->since, X->before, m->target_version)) continue;
        int ncap = wildcards(X->per);
        for (size_t i = 0; i < m->ntensors; i++) {
            caps c = {0};
            if (!match(X->per, m->tensors[i].name, &c) || c.n != ncap) continue;
            for (size_t j = 0; j < X->nnames; j++) {
                char name[NAME_MAX_LEN];
                if (!subst(X->names[j], &c, ncap, name, sizeof name))
                    return tps_fail(err, TPS_EINVALID, "%s: extra name too long", t->source);
                if (m->nextras == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    tps_manifest_extra *g = realloc(m->extras, nc * sizeof *g);
                    if (!g) return tps_fail_oom(err, "laying out the target");
                    m->extras = g;
                    cap = nc;
                }
                if (!(m->extras[m->nextras].name = strdup(name))) return tps_fail_oom(err, "laying out the target");
                m->extras[m->nextras++].value = X->value;
            }
        }
    }
    return TPS_OK;
}

/* The tp values (up to 1024, and up to max when not 0) at which every partition of m holds:
 * for a refusal. */
static void working_tps(const tps_manifest *m, uint64_t max, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (uint64_t T = 1; T <= 1024 && (!max || T <= max) && n + 8 < size; T++) {
        bool ok = true;
        for (size_t i = 0; ok && i < m->ntensors; i++) {
            const tps_manifest_tensor *t = &m->tensors[i];
            tps_error e;
            ok = tps_partition_check(t->part, t->name, t->dtype, t->ndim, t->shape, T, &e) == TPS_OK;
        }
        if (ok) n += (size_t)snprintf(out + n, size - n, "%s%llu", n ? ", " : "", (unsigned long long)T);
    }
    if (!n) snprintf(out, size, "none up to 1024");
}

/* Whether the set's recorded config.json keys carry a quantization_config. */
static bool manifest_quantized(const tps_manifest *m)
{
    tps_json_doc *doc = NULL;
    tps_error e;
    tps_error_clear(&e);
    if (!m->config_keys || tps_json_parse(m->config_keys, strlen(m->config_keys), "config keys", &doc, &e)) return false;
    const tps_json *q = tps_json_get(tps_json_root(doc), "quantization_config");
    bool quantized = q && q->type != TPS_JSON_NULL;
    tps_json_doc_free(doc);
    return quantized;
}

tps_status tps_target_apply(const tps_target *t, tps_manifest *m, tps_error *err)
{
    /* The mappings name the engine's fused weights only: a quantized linear's scales, zeros
     * and g_idx would stay under their source names beside a fused qkv_proj.weight, a set no
     * engine loads.  Refused until the mappings carry the companions. */
    if (manifest_quantized(m))
        return tps_fail(err, TPS_EINVALID,
                        "--target %s: this checkpoint is quantized (config.json's quantization_config), and the %s "
                        "mappings do not fuse scales, zeros and g_idx yet; split it with the default target (the "
                        "source's names)",
                        t->name, t->name);
    tps_status st = TPS_OK;
    size_t N = m->ntensors;
    size_t *group = calloc(N + 1, sizeof *group); /* 1 + the group's first member in mem, or 0 */
    size_t *mem = calloc(N + 1, sizeof *mem);     /* members, group after group */
    size_t *gend = calloc(N + 1, sizeof *gend);   /* per group start in mem: its end */
    bool *done = calloc(N + 1, sizeof *done);
    tps_manifest_tensor *order = calloc(N + 1, sizeof *order);
    size_t nmem = 0;
    if (!group || !mem || !gend || !done || !order) {
        st = tps_fail_oom(err, "laying out the target");
        goto cleanup;
    }
    TPS_CHECK(clear_layout(m, err));
    if (m->target_version && !version_ok(m->target_version)) {
        st = tps_fail(err, TPS_EARG, "--target-version '%s': expected a release number such as 0.13 or 0.14.1",
                      m->target_version);
        goto cleanup;
    }
    TPS_CHECK(apply_extras(t, m, err));
    for (size_t i = 0; i < N; i++) TPS_CHECK(tps_manifest_set_pad_multiple(m, &m->tensors[i], t->vocab_multiple, err));
    for (size_t i = 0; i < N; i++) {
        tps_manifest_tensor *x = &m->tensors[i];
        if (!x->part->pad || x->part->replicated || !t->vocab_multiple) continue;
        tps_error e;
        tps_error_clear(&e);
        if (tps_partition_check(x->part, x->name, x->dtype, x->ndim, x->shape, m->tp, &e)) {
            char tps[512];
            working_tps(m, 0, tps, sizeof tps);
            st = tps_fail(err, TPS_EINVALID,
                          "--target %s at tp %llu: %s (vLLM and SGLang pad the vocabulary to a multiple of %llu, "
                          "then divide it by tp); tp values that work: %s",
                          t->name, (unsigned long long)m->tp, e.msg, (unsigned long long)t->vocab_multiple, tps);
            goto cleanup;
        }
    }
    for (size_t bi = 0; bi < t->nb; bi++)
        for (size_t i = 0; i < N; i++) {
            caps c = {0};
            const tblocked *B = &t->b[bi];
            if ((B->engine && strcmp(B->engine, t->name) != 0) || !in_releases(NULL, B->before, m->target_version) ||
                !match(B->match, m->tensors[i].name, &c))
                continue;
            if (t->b[bi].blocks) m->tensors[i].target_blocks = t->b[bi].blocks;
            else m->tensors[i].target_transpose = true;
        }
    uint64_t experts = 0; /* the fewest experts a stack entry found in a layer */
    for (size_t ei = 0; ei < t->n; ei++) {
        const tentry *E = &t->e[ei];
        if (!entry_applies(t, E, m->target_version)) continue;
        int ncap = wildcards(E->from[0]);
        for (size_t i = 0; i < N; i++) {
            caps c = {0};
            if (group[i] || !match(E->from[0], m->tensors[i].name, &c) || c.n != ncap) continue;
            char num[24], name[NAME_MAX_LEN], into[NAME_MAX_LEN];
            uint64_t S = 1;
            if (E->stack) {
                if (c.len[ncap - 1] != 1 || c.s[ncap - 1][0] != '0') continue; /* the group starts at expert 0 */
                for (S = 1;; S++) {
                    caps d = c;
                    snprintf(num, sizeof num, "%llu", (unsigned long long)S);
                    d.s[ncap - 1] = num;
                    d.len[ncap - 1] = strlen(num);
                    if (!subst(E->from[0], &d, ncap, name, sizeof name) || !tps_manifest_find(m, name)) break;
                }
                if (!experts || S < experts) experts = S;
            }
            if (!subst(E->into, &c, ncap - (E->stack ? 1 : 0), into, sizeof into)) {
                st = tps_fail(err, TPS_EINVALID, "%s:%zu: target name too long", t->source, E->line);
                goto cleanup;
            }
            if (E->tied && tps_manifest_find(m, into)) continue; /* untied: both tensors keep their names */
            size_t g0 = nmem;
            for (uint64_t s = 0; s < S; s++) {
                caps d = c;
                if (E->stack) {
                    snprintf(num, sizeof num, "%llu", (unsigned long long)s);
                    d.s[ncap - 1] = num;
                    d.len[ncap - 1] = strlen(num);
                }
                for (size_t j = 0; j < E->nfrom; j++) {
                    const tps_manifest_tensor *y = NULL;
                    if (subst(E->from[j], &d, ncap, name, sizeof name)) y = tps_manifest_find(m, name);
                    size_t yi = y ? (size_t)(y - m->tensors) : 0;
                    if (!y || group[yi]) {
                        st = tps_fail(err, TPS_EINVALID,
                                      "--target %s: '%s' goes into '%s' with '%s', which the checkpoint %s (%s:%zu)",
                                      t->name, m->tensors[i].name, into, name, y ? "maps twice" : "lacks", t->source,
                                      E->line);
                        goto cleanup;
                    }
                    group[yi] = g0 + 1;
                    mem[nmem++] = yi;
                }
            }
            gend[g0] = nmem;
            for (size_t k = g0; k < nmem; k++) {
                tps_manifest_tensor *y = &m->tensors[mem[k]];
                y->target_stack = E->stack ? S : 0;
                if (!(y->target_name = strdup(into))) {
                    st = tps_fail_oom(err, "laying out the target");
                    goto cleanup;
                }
            }
        }
    }
    if (t->experts_rule && experts && m->tp > experts) {
        char tps[512];
        working_tps(m, experts, tps, sizeof tps);
        st = tps_fail(err, TPS_EINVALID, "--target %s at tp %llu: the checkpoint has %llu experts a layer, and %s (%s); "
                      "tp values that work: %s",
                      t->name, (unsigned long long)m->tp, (unsigned long long)experts, t->experts_rule, t->source, tps);
        goto cleanup;
    }
    /* Members next to each other, in from order, where the group's first tensor was. */
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        if (done[i]) continue;
        if (!group[i]) {
            order[n++] = m->tensors[i];
            done[i] = true;
            continue;
        }
        for (size_t k = group[i] - 1; k < gend[group[i] - 1]; k++) {
            order[n++] = m->tensors[mem[k]];
            done[mem[k]] = true;
        }
    }
    memcpy(m->tensors, order, N * sizeof *order);
    if (!(m->target = strdup(t->name))) {
        st = tps_fail_oom(err, "laying out the target");
        goto cleanup;
    }
    TPS_CHECK(tps_manifest_index(m, "the target", err));
    TPS_CHECK(tps_target_check_manifest(m, "the target", err));
cleanup:
    free(group);
    free(mem);
    free(gend);
    free(done);
    free(order);
    return st;
}

/* ---- writing and reading rank files ---- */

size_t tps_target_file_tensors(const tps_manifest *m, size_t i0, size_t n, uint64_t r, tps_sink_tensor *e,
                               uint64_t *shapes)
{
    size_t out = 0;
    for (size_t k = 0; k < n;) {
        const tps_manifest_tensor *t = &m->tensors[i0 + k];
        if (!t->target_name) {
            e[out++] = e[k++];
            continue;
        }
        size_t j = run_end(m, i0 + k) - i0;
        if (j > n) j = n; /* the parts keep runs whole; never cut one here */
        uint64_t shape[TPS_MAX_DIMS];
        int nd = 0;
        tps_error ignored;
        if (run_shape(m, i0 + k, i0 + j, r, shape, &nd, &ignored) == TPS_OK) { /* checked when applied or loaded */
            memcpy(shapes + k * TPS_MAX_DIMS, shape, sizeof shape);
            e[out++] = (tps_sink_tensor){t->target_name, t->dtype, nd, shapes + k * TPS_MAX_DIMS};
        }
        k = j;
    }
    return out;
}

tps_status tps_target_parts(const tps_manifest *m, const uint64_t *bytes, uint64_t max, size_t *first,
                            size_t *nparts, tps_error *err)
{
    size_t N = m->ntensors;
    uint64_t *rb = calloc(N + 1, sizeof *rb);
    size_t *head = calloc(N + 1, sizeof *head), *rfirst = calloc(N + 2, sizeof *rfirst);
    tps_status st = TPS_OK;
    if (!rb || !head || !rfirst) {
        st = tps_fail_oom(err, "planning parts");
        goto cleanup;
    }
    size_t nr = 0;
    for (size_t i = 0; i < N;) {
        size_t j = m->tensors[i].target_name ? run_end(m, i) : i + 1;
        head[nr] = i;
        for (size_t k = i; k < j; k++) rb[nr] += bytes[k];
        nr++;
        i = j;
    }
    tps_parts_greedy(rb, nr, max, rfirst, nparts);
    for (size_t p = 0; p < *nparts; p++) first[p] = head[rfirst[p]];
    first[*nparts] = N;
cleanup:
    free(rb);
    free(head);
    free(rfirst);
    return st;
}

tps_status tps_target_member_index(const tps_manifest *m, uint64_t r, tps_index *files, tps_index **out,
                                   tps_error *err)
{
    *out = NULL;
    tps_index *vx = NULL;
    tps_status st = TPS_OK;
    TPS_CHECK(tps_index_new(files->path, files->format, &vx, err));
    for (size_t f = 0; f < files->nfiles; f++) {
        uint32_t id;
        TPS_CHECK(tps_index_add_file(vx, files->files[f].path, &id, err));
    }
    for (size_t k = 0; k < files->nmeta; k++) TPS_CHECK(tps_index_add_meta(vx, files->meta[k].key, files->meta[k].value, err));
    size_t seen = 0;
    for (size_t i = 0; i < m->ntensors;) {
        const tps_manifest_tensor *t = &m->tensors[i];
        const char *name = t->target_name ? t->target_name : t->name;
        size_t j = t->target_name ? run_end(m, i) : i + 1;
        uint64_t want[TPS_MAX_DIMS];
        int nd = t->ndim;
        if (t->target_name) {
            TPS_CHECK(run_shape(m, i, j, r, want, &nd, err));
        } else {
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, want);
            tps_target_file_shape(t, want);
        }
        const tps_tensor *x = tps_index_find(files, name);
        if (!x) {
            st = tps_fail(err, TPS_EINVALID, "%s: rank %llu lacks tensor '%s'", files->path, (unsigned long long)r,
                          name);
            goto cleanup;
        }
        if (x->dtype != t->dtype || x->ndim != nd || memcmp(x->shape, want, sizeof *want * (size_t)nd) || x->reader_data) {
            char a[256], b[256];
            tps_shape_str(x->shape, x->ndim, a, sizeof a);
            tps_shape_str(want, nd, b, sizeof b);
            st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' is %s %s, but the manifest gives rank %llu %s %s",
                          files->files[x->file].path, name, tps_dtype_name(x->dtype), a, (unsigned long long)r,
                          tps_dtype_name(t->dtype), b);
            goto cleanup;
        }
        uint64_t off = x->offset;
        for (size_t k = i; k < j; k++) {
            const tps_manifest_tensor *y = &m->tensors[k];
            uint64_t rs[TPS_MAX_DIMS];
            tps_partition_rank_shape(y->part, y->ndim, y->shape, m->tp, r, rs);
            if (y->target_blocks || y->target_transpose) /* read back in the source's order */
                TPS_CHECK(tps_target_blocked_member(vx, y, m->tp, rs, x->file, off, err));
            else
                TPS_CHECK(tps_index_add_tensor(vx, y->name, strlen(y->name), y->dtype, y->ndim, rs, x->file, off, NULL, err));
            off += vx->tensors[vx->ntensors - 1].nbytes;
        }
        seen++;
        i = j;
    }
    for (size_t k = 0; k < m->nextras; k++) {
        const tps_tensor *x = tps_index_find(files, m->extras[k].name);
        if (!x || x->dtype != TPS_DT_F32 || x->ndim != 0 || x->reader_data) {
            st = tps_fail(err, TPS_EINVALID, "%s: rank %llu %s '%s' (F32 [], the engine's constant %g)", files->path,
                          (unsigned long long)r, x ? "holds another shape or dtype for" : "lacks", m->extras[k].name,
                          m->extras[k].value);
            goto cleanup;
        }
        seen++;
    }
    if (files->ntensors != seen) {
        st = tps_fail(err, TPS_EINVALID, "%s: rank %llu files hold %zu tensors, the target set has %zu", files->path,
                      (unsigned long long)r, files->ntensors, seen);
        goto cleanup;
    }
    *out = vx;
    vx = NULL;
cleanup:
    tps_index_free(vx);
    tps_index_free(files);
    return st;
}


/* ---- the mapping run backwards (lib/targets/adopt.c: sets the engines saved themselves) ---- */

uint64_t tps_target_vocab_multiple(const tps_target *t) { return t->vocab_multiple; }

void tps_target_extra_bytes(double value, unsigned char out[4])
{
    float v = (float)value;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    for (int b = 0; b < 4; b++) out[b] = (unsigned char)(bits >> (8 * b));
}

uint32_t tps_target_extras_crc(const tps_manifest *m, uint64_t *len)
{
    uint32_t crc = 0;
    for (size_t k = 0; k < m->nextras; k++) {
        unsigned char le[4];
        tps_target_extra_bytes(m->extras[k].value, le);
        crc = tps_crc32(crc, le, sizeof le);
    }
    *len = 4 * (uint64_t)m->nextras;
    return crc;
}

size_t tps_target_releases(const tps_target *t, const char **out, size_t max)
{
    size_t n = 0;
    /* every since and before starts a class: extras' since then before, entries', blocked's */
    for (size_t k = 0; k < 2 * t->nx + t->n + t->nb; k++) {
        const char *since, *engine = NULL;
        if (k < 2 * t->nx) {
            since = k % 2 ? t->x[k / 2].before : t->x[k / 2].since;
            engine = t->x[k / 2].engine;
        } else if (k < 2 * t->nx + t->n) {
            since = t->e[k - 2 * t->nx].since;
            engine = t->e[k - 2 * t->nx].engine;
        } else {
            since = t->b[k - 2 * t->nx - t->n].before;
            engine = t->b[k - 2 * t->nx - t->n].engine;
        }
        if (!since || (engine && strcmp(engine, t->name) != 0)) continue;
        size_t j = 0;
        while (j < n && version_less(since, out[j])) j++;
        if ((j < n && !version_less(out[j], since)) || n == max) continue; /* listed already */
        memmove(out + j + 1, out + j, (n - j) * sizeof *out);
        out[j] = since;
        n++;
    }
    return n;
}

bool tps_target_transposes(const tps_target *t, const char *name)
{
    for (size_t bi = 0; bi < t->nb; bi++) {
        caps c = {0};
        if (!t->b[bi].blocks && match(t->b[bi].match, name, &c)) return true;
    }
    return false;
}

size_t tps_target_missing(const tps_target *t, const tps_index *files, tps_buf *out, size_t list)
{
    size_t n = 0;
    for (size_t qi = 0; qi < t->nq; qi++) {
        const textra *Q = &t->q[qi];
        int ncap = wildcards(Q->per);
        for (size_t i = 0; i < files->ntensors; i++) {
            caps c = {0};
            if (!match(Q->per, files->tensors[i].name, &c) || c.n != ncap) continue;
            for (size_t j = 0; j < Q->nnames; j++) {
                char name[NAME_MAX_LEN];
                if (!subst(Q->names[j], &c, ncap, name, sizeof name) || tps_index_find(files, name)) continue;
                if (n++ < list) tps_buf_printf(out, "%s'%s'", n > 1 ? ", " : "", name);
            }
        }
    }
    if (n > list) tps_buf_printf(out, " and %zu more", n - list);
    return n;
}

bool tps_target_is_extra(const tps_target *t, const char *name)
{
    for (size_t xi = 0; xi < t->nx; xi++) {
        const textra *X = &t->x[xi];
        if (X->engine && strcmp(X->engine, t->name) != 0) continue;
        for (size_t j = 0; j < X->nnames; j++) {
            caps c = {0};
            if (match(X->names[j], name, &c)) return true;
        }
    }
    return false;
}

tps_status tps_target_sources(const tps_target *t, const char *name, uint64_t S, char ***names, size_t *n,
                              bool *tied, bool *stack, tps_error *err)
{
    *names = NULL;
    *n = 0;
    *tied = *stack = false;
    for (size_t ei = 0; ei < t->n; ei++) {
        const tentry *E = &t->e[ei];
        int ncap = wildcards(E->from[0]);
        caps c = {0};
        if (!match(E->into, name, &c) || c.n != ncap - (E->stack ? 1 : 0)) continue;
        uint64_t groups = E->stack ? S : 1;
        if (groups > (1u << 20)) return tps_fail(err, TPS_EINVALID, "'%s': %llu experts", name, (unsigned long long)S);
        char **v = calloc(groups * E->nfrom + 1, sizeof *v);
        if (!v) return tps_fail_oom(err, "reading an engine's set");
        char num[24], buf[NAME_MAX_LEN];
        size_t k = 0;
        for (uint64_t s = 0; s < groups; s++) {
            caps d = c;
            if (E->stack) {
                snprintf(num, sizeof num, "%llu", (unsigned long long)s);
                d.s[ncap - 1] = num;
                d.len[ncap - 1] = strlen(num);
                d.n = ncap;
            }
            for (size_t j = 0; j < E->nfrom; j++) {
                if (!subst(E->from[j], &d, ncap, buf, sizeof buf) || !(v[k] = strdup(buf))) {
                    for (size_t q = 0; q < k; q++) free(v[q]);
                    free(v);
                    return tps_fail(err, TPS_EINVALID, "'%s': source name too long or out of memory", name);
                }
                k++;
            }
        }
        *names = v;
        *n = k;
        *tied = E->tied;
        *stack = E->stack;
        return TPS_OK;
    }
    return TPS_OK;
}

bool tps_target_name_match(const char *pattern, const char *name, tps_target_caps *c)
{
    caps k = {0};
    bool ok = match(pattern, name, &k);
    c->n = k.n;
    for (int i = 0; i < k.n; i++) {
        c->s[i] = k.s[i];
        c->len[i] = k.len[i];
    }
    return ok;
}

bool tps_target_name_subst(const char *pattern, const tps_target_caps *c, int ncap, char *out, size_t size)
{
    caps k = {0};
    k.n = c->n;
    for (int i = 0; i < c->n && i < MAX_CAPS; i++) {
        k.s[i] = c->s[i];
        k.len[i] = c->len[i];
    }
    return subst(pattern, &k, ncap, out, size);
}

int tps_target_name_wildcards(const char *pattern)
{
    return wildcards(pattern);
}
