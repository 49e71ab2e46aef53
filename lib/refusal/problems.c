#include "problems.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/checked.h"

struct tps_fit_key {
    tps_partition part;
    uint64_t shape[TPS_MAX_DIMS];
    int ndim;
    tps_dtype dtype;
};

void tps_problems_init(tps_problems *ps, uint64_t tp)
{
    memset(ps, 0, sizeof *ps);
    ps->tp = tp;
}

void tps_problems_free(tps_problems *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        tps_problem *g = &ps->v[i];
        free(g->rule);
        free(g->message);
        free(g->key);
        for (int k = 0; k < g->npat; k++) free(g->pat[k].text);
    }
    free(ps->v);
    free(ps->parts);
    free(ps->fit);
    memset(ps, 0, sizeof *ps);
}

static const char *kind_name(tps_problem_kind k)
{
    switch (k) {
    case TPS_PROBLEM_TP: return "tp";
    case TPS_PROBLEM_NO_RULE: return "no_rule";
    case TPS_PROBLEM_SIZES: return "unknown_sizes";
    default: return "layout";
    }
}

static const char *issue_name(tps_issue_kind k)
{
    switch (k) {
    case TPS_ISSUE_INDIVISIBLE: return "indivisible";
    case TPS_ISSUE_NEEDS_REPLICA: return "needs_replication";
    case TPS_ISSUE_SUBBYTE: return "cut_inside_byte";
    case TPS_ISSUE_MALFORMED: return "malformed";
    case TPS_ISSUE_BLOCK: return "inside_quantization_block";
    case TPS_ISSUE_EMPTY_RANK: return "rank_left_empty";
    case TPS_ISSUE_PLACEMENT: return "experts_placement";
    default: return "none";
    }
}

/* Splits name into its pattern text ('#' for each all-digit component) and the numbers. */
static char *fold_name(const char *name, uint64_t *nums, int *nnums)
{
    size_t len = strlen(name);
    char *t = malloc(len + 1);
    if (!t) return NULL;
    size_t o = 0;
    *nnums = 0;
    const char *c = name;
    while (*c) {
        const char *e = strchr(c, '.');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        bool digits = n > 0 && n <= 18 && *nnums < TPS_PATTERN_NUMS;
        for (size_t i = 0; i < n && digits; i++) digits = isdigit((unsigned char)c[i]);
        if (digits) {
            nums[(*nnums)++] = strtoull(c, NULL, 10);
            t[o++] = '#';
        } else {
            memcpy(t + o, c, n);
            o += n;
        }
        c += n;
        if (*c == '.') t[o++] = *c++;
    }
    t[o] = 0;
    return t;
}

static void add_name(tps_problems *ps, tps_problem *g, const char *tensor)
{
    uint64_t nums[TPS_PATTERN_NUMS];
    int nnums;
    char *text = fold_name(tensor, nums, &nnums);
    if (!text) {
        ps->oom = true;
        return;
    }
    for (int k = 0; k < g->npat; k++) {
        tps_name_pattern *p = &g->pat[k];
        if (strcmp(p->text, text) != 0) continue;
        for (int i = 0; i < nnums; i++) {
            if (nums[i] < p->lo[i]) p->lo[i] = nums[i];
            if (nums[i] > p->hi[i]) p->hi[i] = nums[i];
        }
        p->count++;
        free(text);
        return;
    }
    if (g->npat == TPS_PROBLEM_PATTERNS) {
        g->unlisted++;
        free(text);
        return;
    }
    tps_name_pattern *p = &g->pat[g->npat++];
    p->text = text;
    p->nnums = nnums;
    for (int i = 0; i < nnums; i++) p->lo[i] = p->hi[i] = nums[i];
    p->count = 1;
}

/* The group key: the cause without the tensor's name, so every layer's tensor lands in the
 * same group.  Tp problems are keyed by their numbers, others by their message with the
 * tensor's name cut out. */
static char *make_key(tps_problem_kind kind, const char *tensor, const char *rule, const tps_partition_issue *is,
                      const char *missing, const char *message)
{
    tps_buf b = TPS_BUF_INIT;
    tps_buf_printf(&b, "%d|%s|", (int)kind, rule ? rule : "");
    if (kind == TPS_PROBLEM_TP && is) {
        tps_buf_printf(&b, "%d|%d|%d|%s|%llu|%llu|%llu", (int)is->kind, is->seg, is->dim, is->seg_name,
                       (unsigned long long)is->units, (unsigned long long)is->unit, (unsigned long long)is->block);
        if (is->kind == TPS_ISSUE_SUBBYTE || is->kind == TPS_ISSUE_MALFORMED) kind = TPS_PROBLEM_OTHER;
    } else if (kind == TPS_PROBLEM_SIZES) {
        tps_buf_puts(&b, missing ? missing : "");
    }
    if (kind == TPS_PROBLEM_OTHER && message) {
        const char *at = strstr(message, tensor);
        size_t tl = strlen(tensor);
        if (at) {
            tps_buf_append(&b, message, (size_t)(at - message));
            tps_buf_puts(&b, at + tl);
        } else {
            tps_buf_puts(&b, message);
        }
    }
    if (!tps_buf_cstr(&b)) return NULL;
    char *k = b.data ? b.data : strdup("");
    return k;
}

void tps_problems_add(tps_problems *ps, tps_problem_kind kind, const char *tensor, const char *rule,
                      const tps_partition_issue *issue, const char *missing, const char *message)
{
    char *key = make_key(kind, tensor, rule, issue, missing, message);
    if (!key) {
        ps->oom = true;
        return;
    }
    ps->total++;
    tps_problem *g = NULL;
    for (size_t i = 0; i < ps->n && !g; i++)
        if (strcmp(ps->v[i].key, key) == 0) g = &ps->v[i];
    if (g) {
        free(key);
    } else {
        if (ps->n == ps->cap) {
            size_t cap = ps->cap ? 2 * ps->cap : 8;
            tps_problem *v = realloc(ps->v, cap * sizeof *v);
            if (!v) {
                free(key);
                ps->oom = true;
                return;
            }
            ps->v = v;
            ps->cap = cap;
        }
        g = &ps->v[ps->n++];
        memset(g, 0, sizeof *g);
        g->kind = kind;
        g->key = key;
        g->rule = rule ? strdup(rule) : NULL;
        g->message = strdup(message ? message : "");
        g->vocab_like = tps_partition_vocab_like(tensor);
        if (issue) g->issue = *issue;
        if (missing) snprintf(g->missing, sizeof g->missing, "%s", missing);
        if ((rule && !g->rule) || !g->message) ps->oom = true;
    }
    g->count++;
    add_name(ps, g, tensor);
}

void tps_problems_consider(tps_problems *ps, const tps_partition *p, tps_dtype dtype, int ndim,
                           const uint64_t *shape)
{
    if (p->replicated) return; /* fits every tp */
    if (ps->nparts == ps->partcap) {
        size_t cap = ps->partcap ? 2 * ps->partcap : 64;
        tps_fit_key *v = realloc(ps->parts, cap * sizeof *v);
        if (!v) {
            ps->oom = true;
            return;
        }
        ps->parts = v;
        ps->partcap = cap;
    }
    tps_fit_key *k = &ps->parts[ps->nparts++];
    memset(k, 0, sizeof *k); /* compared bytewise, padding included */
    k->part = *p;
    k->ndim = ndim < 0 ? 0 : ndim > TPS_MAX_DIMS ? TPS_MAX_DIMS : ndim;
    memcpy(k->shape, shape, (size_t)k->ndim * sizeof *shape);
    k->dtype = dtype;
}

static int cmp_key(const void *a, const void *b) { return memcmp(a, b, sizeof(tps_fit_key)); }

size_t tps_problems_count_kind(const tps_problems *ps, tps_problem_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < ps->n; i++) n += ps->v[i].kind == kind;
    return n;
}

tps_status tps_problems_finish(tps_problems *ps, tps_error *err)
{
    if (ps->oom) return tps_fail_oom(err, "grouping problems");
    ps->fit_known = false;
    if (tps_problems_count_kind(ps, TPS_PROBLEM_TP) != ps->n) return TPS_OK;
    /* Every layer repeats the same few partitions: try each distinct one once. */
    if (ps->nparts) qsort(ps->parts, ps->nparts, sizeof *ps->parts, cmp_key);
    size_t u = 0;
    for (size_t i = 0; i < ps->nparts; i++)
        if (u == 0 || cmp_key(&ps->parts[u - 1], &ps->parts[i]) != 0) ps->parts[u++] = ps->parts[i];
    ps->nparts = u;
    /* A segment that can be neither padded nor replicated caps tp at its unit count. */
    uint64_t bound = TPS_FIT_MAX;
    for (size_t i = 0; i < u; i++) {
        const tps_partition *p = &ps->parts[i].part;
        for (int s = 0; s < p->nseg && s < TPS_MAX_SEGMENTS && !p->pad; s++) {
            uint64_t n = p->seg[s].unit ? p->seg[s].length / p->seg[s].unit : 0;
            if (p->groups > 1 && n && !tps_mul_u64(n, p->groups, &n)) n = TPS_FIT_MAX; /* every group's units */
            if (n && !p->seg[s].may_replicate && n < bound) bound = n;
        }
    }
    free(ps->fit);
    ps->nfit = 0;
    ps->fit = calloc(bound, sizeof *ps->fit);
    if (!ps->fit) return tps_fail_oom(err, "searching the tp values that fit");
    for (uint64_t T = 1; T <= bound; T++) {
        bool fits = true;
        for (size_t i = 0; i < u && fits; i++) {
            const tps_fit_key *k = &ps->parts[i];
            fits = tps_partition_diagnose(&k->part, "", k->dtype, k->ndim, k->shape, T, NULL, NULL) == TPS_OK;
        }
        if (fits) ps->fit[ps->nfit++] = T;
    }
    ps->fit_bound = bound;
    ps->fit_known = true;
    return TPS_OK;
}

void tps_problem_names(const tps_problem *g, tps_buf *out)
{
    for (int k = 0; k < g->npat; k++) {
        const tps_name_pattern *p = &g->pat[k];
        uint64_t span = 1;
        int num = 0;
        if (k) tps_buf_puts(out, ", ");
        for (const char *c = p->text; *c; c++) {
            if (*c != '#') {
                tps_buf_putc(out, *c);
                continue;
            }
            uint64_t lo = p->lo[num], hi = p->hi[num];
            if (lo == hi) tps_buf_printf(out, "%llu", (unsigned long long)lo);
            else tps_buf_printf(out, "{%llu..%llu}", (unsigned long long)lo, (unsigned long long)hi);
            span *= hi - lo + 1;
            num++;
        }
        /* A range with gaps: say how many names it stands for. */
        if (span != p->count) tps_buf_printf(out, " (%llu of them)", (unsigned long long)p->count);
    }
    if (g->unlisted) tps_buf_printf(out, " and %llu more", (unsigned long long)g->unlisted);
}

/* What the units are, in the model's own terms when the sizes say so. */
static void units_text(const tps_partition_issue *is, const tps_model_sizes *s, tps_buf *out, bool *heads)
{
    uint64_t n = is->units, u = is->unit;
    *heads = false;
    if (is->groups) {
        tps_buf_printf(out, "%llu KV groups", (unsigned long long)n);
        return;
    }
    if (s && s->head_dim && u == s->head_dim && (n == s->heads || n == s->kv_heads)) {
        *heads = n == s->heads && n != s->kv_heads;
        tps_buf_printf(out, "%llu %s (head_dim %llu)", (unsigned long long)n,
                       n == s->heads ? "attention heads" : "KV heads", (unsigned long long)u);
    } else if (s && s->heads && n == s->heads && s->v_head_dim &&
               (u == s->qk_nope_head_dim + s->qk_rope_head_dim || u == s->qk_nope_head_dim + s->v_head_dim ||
                u == s->v_head_dim)) {
        /* multi-head latent attention: a head is q_b's qk_nope + qk_rope rows, kv_b's
         * qk_nope + v rows, o_proj's v columns */
        *heads = true;
        tps_buf_printf(out, "%llu attention heads (%s %llu)", (unsigned long long)n,
                       u == s->v_head_dim ? "v_head_dim" : "rows each", (unsigned long long)u);
    } else if (s && u == 1 && n && n == s->intermediate) {
        tps_buf_printf(out, "intermediate size %llu", (unsigned long long)n);
    } else if (s && u == 1 && n && n == s->moe_intermediate) {
        tps_buf_printf(out, "expert intermediate size %llu", (unsigned long long)n);
    } else if (s && u == 1 && n && n == s->shared_intermediate) {
        tps_buf_printf(out, "shared expert intermediate size %llu", (unsigned long long)n);
    } else if (s && u == 1 && n && n == s->vocab) {
        tps_buf_printf(out, "vocabulary %llu", (unsigned long long)n);
    } else if (s && u == 1 && n && n == s->hidden) {
        tps_buf_printf(out, "hidden size %llu", (unsigned long long)n);
    } else if (s && u == 1 && n && n == s->heads) { /* a per-head vector: GPT-OSS's sinks */
        *heads = n != s->kv_heads;
        tps_buf_printf(out, "%llu attention heads (one element each)", (unsigned long long)n);
    } else if (s && u == 2 && n && n == s->intermediate) { /* GPT-OSS's interleaved gate_up */
        tps_buf_printf(out, "intermediate size %llu ((gate, up) pairs)", (unsigned long long)n);
    } else {
        tps_buf_printf(out, "%llu units of %llu", (unsigned long long)n, (unsigned long long)u);
    }
}

/* A quantized companion's refusal in the logical weight's numbers and the config's rule:
 * "GPTQ group size 32: 704 input features / tp 4 = 176 a rank, not a multiple of 32". */
static bool quant_cause(const tps_partition_issue *is)
{
    uint64_t total = is->units * is->unit * is->qratio;
    /* Else the cut fails for another reason (fewer heads than ranks), said the usual way. */
    return is->qratio && is->qalign && is->T && (total % is->T || (total / is->T) % is->qalign);
}

static void quant_text(const tps_partition_issue *is, tps_buf *out)
{
    uint64_t total = is->units * is->unit * is->qratio;
    const char *what = is->qwdim == 1 ? "input features" : "output features";
    if (is->seg_name[0]) tps_buf_printf(out, "segment %s: ", is->seg_name);
    tps_buf_printf(out, "%s: %llu %s / tp %llu", is->qrule, (unsigned long long)total, what,
                   (unsigned long long)is->T);
    if (total % is->T)
        tps_buf_puts(out, " is no whole number");
    else
        tps_buf_printf(out, " = %llu a rank, not a multiple of %llu", (unsigned long long)(total / is->T),
                       (unsigned long long)is->qalign);
}

void tps_problem_line(const tps_problem *g, const tps_model_sizes *sizes, tps_buf *out)
{
    const tps_partition_issue *is = &g->issue;
    if (g->kind == TPS_PROBLEM_TP && quant_cause(is) &&
        (is->kind == TPS_ISSUE_INDIVISIBLE || is->kind == TPS_ISSUE_NEEDS_REPLICA || is->kind == TPS_ISSUE_BLOCK)) {
        quant_text(is, out);
    } else if (g->kind == TPS_PROBLEM_TP && (is->kind == TPS_ISSUE_INDIVISIBLE || is->kind == TPS_ISSUE_NEEDS_REPLICA)) {
        bool heads = false;
        if (is->seg_name[0]) tps_buf_printf(out, "segment %s: ", is->seg_name);
        units_text(is, sizes, out, &heads);
        tps_buf_printf(out, " along dimension %d", is->dim);
        if (is->kind == TPS_ISSUE_INDIVISIBLE) {
            tps_buf_printf(out, ": tp %llu neither divides nor is a multiple of %llu", (unsigned long long)is->T,
                           (unsigned long long)is->units);
            bool vocab = g->vocab_like || (sizes && sizes->vocab && is->unit == 1 && is->units == sizes->vocab);
            if (vocab) tps_buf_puts(out, " (a vocabulary can be padded: pad: true)");
        } else {
            tps_buf_printf(out, ": fewer than tp %llu", (unsigned long long)is->T);
            if (!heads) tps_buf_puts(out, " (allow replication, kv_replicate, if these are KV heads)");
        }
    } else if (g->kind == TPS_PROBLEM_TP && is->kind == TPS_ISSUE_BLOCK) {
        /* The engine's own refusal (vLLM validate_fp8_block_shape; the GPTQ/AWQ group and
         * pack checks): a rank would start or end inside a quantization block. */
        bool heads = false;
        if (is->seg_name[0]) tps_buf_printf(out, "segment %s: ", is->seg_name);
        units_text(is, sizes, out, &heads);
        tps_buf_printf(out, " along dimension %d: tp %llu gives each rank %llu, not a multiple of the quantization "
                       "block %llu (the engine refuses a block split across ranks)",
                       is->dim, (unsigned long long)is->T, (unsigned long long)is->local,
                       (unsigned long long)is->block);
    } else if (g->kind == TPS_PROBLEM_TP && is->kind == TPS_ISSUE_PLACEMENT) {
        /* expert parallelism (lib/set/grid_ep.h): whole experts, E/T a rank */
        tps_buf_printf(out, "%llu experts a layer placed whole on the ranks (expert parallelism): tp %llu does not "
                       "divide them (reshard --ep 1 cuts them by TP instead)",
                       (unsigned long long)is->units, (unsigned long long)is->T);
    } else if (g->kind == TPS_PROBLEM_TP && is->kind == TPS_ISSUE_EMPTY_RANK) {
        /* The engine's ceil-division cut (lib/partition/partition.h, uneven). */
        uint64_t per = is->units / is->T + (is->units % is->T != 0);
        tps_buf_printf(out, "%llu units of %llu along dimension %d, cut as the engine cuts them (cdiv(%llu, %llu) = "
                       "%llu a rank, the last rank the rest), leave rank %llu nothing",
                       (unsigned long long)is->units, (unsigned long long)is->unit, is->dim,
                       (unsigned long long)is->units, (unsigned long long)is->T, (unsigned long long)per,
                       (unsigned long long)(is->T - 1));
    } else if (g->kind == TPS_PROBLEM_NO_RULE) {
        /* One tensor: the layout's own words say it best; more: one line for all of them. */
        if (g->count == 1) {
            tps_buf_puts(out, g->message);
        } else {
            tps_buf_printf(out, "no rule of the layout matches %llu tensors: ", (unsigned long long)g->count);
            tps_problem_names(g, out);
            tps_buf_puts(out, " (add a rule, or a default: rule)");
        }
        return;
    } else if (g->kind == TPS_PROBLEM_SIZES) {
        tps_buf_printf(out, "the rule needs size%s %s, which %s unknown", strchr(g->missing, ',') ? "s" : "",
                       g->missing, strchr(g->missing, ',') ? "are" : "is");
    } else {
        tps_buf_puts(out, g->message);
        if (g->count > 1) tps_buf_puts(out, "; the same for");
    }
    if (g->kind != TPS_PROBLEM_OTHER || g->count > 1) {
        tps_buf_printf(out, "%s%llu tensor%s: ", g->kind == TPS_PROBLEM_OTHER ? " " : "; ",
                       (unsigned long long)g->count, g->count == 1 ? "" : "s");
        tps_problem_names(g, out);
    }
    if (g->rule && !(g->kind == TPS_PROBLEM_OTHER && strstr(g->message, g->rule)))
        tps_buf_printf(out, "; rule %s", g->rule);
}

void tps_problems_fit_line(const tps_problems *ps, tps_buf *out)
{
    if (!ps->fit_known) return;
    if (ps->nfit == 0 || (ps->nfit == 1 && ps->fit[0] == 1)) {
        tps_buf_puts(out, ps->nfit ? "only tp 1 fits this layout and checkpoint" : "no tp fits this layout and checkpoint");
        return;
    }
    tps_buf_puts(out, "tp values that fit: ");
    size_t show = ps->nfit <= 16 ? ps->nfit : 12;
    for (size_t i = 0; i < show; i++) tps_buf_printf(out, "%s%llu", i ? ", " : "", (unsigned long long)ps->fit[i]);
    if (show < ps->nfit)
        tps_buf_printf(out, ", ... (%zu values up to %llu)", ps->nfit, (unsigned long long)ps->fit[ps->nfit - 1]);
    if (ps->fit_bound == TPS_FIT_MAX && ps->fit[ps->nfit - 1] == TPS_FIT_MAX)
        tps_buf_printf(out, " (tried up to %d)", TPS_FIT_MAX);
}

void tps_problems_json(const tps_problems *ps, const tps_model_sizes *sizes, tps_jw *w)
{
    tps_buf line = TPS_BUF_INIT;
    tps_jw_key(w, "tensors_refused");
    tps_jw_u64(w, ps->total);
    tps_jw_key(w, "problems");
    tps_jw_array_begin(w);
    for (size_t i = 0; i < ps->n; i++) {
        const tps_problem *g = &ps->v[i];
        tps_jw_object_begin(w);
        tps_jw_key(w, "kind");
        tps_jw_string(w, kind_name(g->kind));
        tps_jw_key(w, "count");
        tps_jw_u64(w, g->count);
        tps_jw_key(w, "rule");
        if (g->rule) tps_jw_string(w, g->rule);
        else tps_jw_null(w);
        tps_buf_reset(&line);
        tps_problem_names(g, &line);
        tps_jw_key(w, "tensors");
        const char *text = tps_buf_cstr(&line);
        tps_jw_string(w, text ? text : "");
        tps_buf_reset(&line);
        tps_problem_line(g, sizes, &line);
        tps_jw_key(w, "message");
        text = tps_buf_cstr(&line);
        tps_jw_string(w, text ? text : "");
        if (g->kind == TPS_PROBLEM_TP && g->issue.kind == TPS_ISSUE_BLOCK) {
            tps_jw_key(w, "local_size");
            tps_jw_u64(w, g->issue.local);
            tps_jw_key(w, "block");
            tps_jw_u64(w, g->issue.block);
        }
        if (g->kind == TPS_PROBLEM_TP) {
            tps_jw_key(w, "issue");
            tps_jw_string(w, issue_name(g->issue.kind));
            tps_jw_key(w, "dimension");
            tps_jw_i64(w, g->issue.dim);
            tps_jw_key(w, "segment");
            tps_jw_i64(w, g->issue.seg);
            tps_jw_key(w, "units");
            tps_jw_u64(w, g->issue.units);
            tps_jw_key(w, "unit");
            tps_jw_u64(w, g->issue.unit);
        } else if (g->kind == TPS_PROBLEM_SIZES) {
            tps_jw_key(w, "missing_sizes");
            tps_jw_string(w, g->missing);
        }
        tps_jw_object_end(w);
    }
    tps_jw_array_end(w);
    tps_jw_key(w, "tp_values_that_fit");
    if (ps->fit_known) tps_jw_u64_array(w, ps->fit, ps->nfit);
    else tps_jw_null(w);
    tps_buf_release(&line);
}
