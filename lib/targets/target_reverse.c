/* The mapping run backwards (lib/targets/target_reverse.h). */
#include "target_reverse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target_int.h"
#include "target_names.h"
#include "target_release.h"

uint64_t tps_target_vocab_multiple(const tps_target *t) { return t->vocab_multiple; }

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
        while (j < n && tps_target_version_less(since, out[j])) j++;
        if ((j < n && !tps_target_version_less(out[j], since)) || n == max) continue; /* listed already */
        memmove(out + j + 1, out + j, (n - j) * sizeof *out);
        out[j] = since;
        n++;
    }
    return n;
}

bool tps_target_transposes(const tps_target *t, const char *name)
{
    for (size_t bi = 0; bi < t->nb; bi++) {
        tps_target_caps c = {0};
        if (!t->b[bi].blocks && !t->b[bi].rank0 && !t->b[bi].rope_halves && tps_target_name_match(t->b[bi].match, name, &c)) return true;
    }
    return false;
}

bool tps_target_has_required(const tps_target *t)
{
    return t->nq > 0;
}

size_t tps_target_missing(const tps_target *t, const tps_index *files, tps_buf *out, size_t list)
{
    size_t n = 0;
    for (size_t qi = 0; qi < t->nq; qi++) {
        const textra *Q = &t->q[qi];
        int ncap = tps_target_name_wildcards(Q->per);
        for (size_t i = 0; i < files->ntensors; i++) {
            tps_target_caps c = {0};
            if (!tps_target_name_match(Q->per, files->tensors[i].name, &c) || c.n != ncap) continue;
            for (size_t j = 0; j < Q->nnames; j++) {
                char name[NAME_MAX_LEN];
                if (!tps_target_name_subst(Q->names[j], &c, ncap, name, sizeof name) || tps_index_find(files, name)) continue;
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
            tps_target_caps c = {0};
            if (tps_target_name_match(X->names[j], name, &c)) return true;
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
        int ncap = tps_target_name_wildcards(E->from[0]);
        tps_target_caps c = {0};
        if (!tps_target_name_match(E->into, name, &c) || c.n != ncap - (E->stack ? 1 : 0)) continue;
        uint64_t groups = E->stack ? S : 1;
        if (groups > (1u << 20)) return tps_fail(err, TPS_EINVALID, "'%s': %llu experts", name, (unsigned long long)S);
        char **v = calloc(groups * E->nfrom + 1, sizeof *v);
        if (!v) return tps_fail_oom(err, "reading an engine's set");
        char num[24], buf[NAME_MAX_LEN];
        size_t k = 0;
        for (uint64_t s = 0; s < groups; s++) {
            tps_target_caps d = c;
            if (E->stack) {
                snprintf(num, sizeof num, "%llu", (unsigned long long)s);
                d.s[ncap - 1] = num;
                d.len[ncap - 1] = strlen(num);
                d.n = ncap;
            }
            for (size_t j = 0; j < E->nfrom; j++) {
                if (!tps_target_name_subst(E->from[j], &d, ncap, buf, sizeof buf) || !(v[k] = strdup(buf))) {
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
