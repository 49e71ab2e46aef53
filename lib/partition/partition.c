#include "partition.h"

#include <stdio.h>
#include <string.h>

#include "../base/checked.h"

void tps_partition_simple(tps_partition *p, int dim, uint64_t dim_len, uint64_t unit)
{
    memset(p, 0, sizeof *p);
    p->dim = dim;
    p->nseg = 1;
    p->seg[0].length = dim_len;
    p->seg[0].unit = unit ? unit : 1;
}

/* Units a segment of n units gives each rank, or 0 when it needs replication or padding. */
static uint64_t units_per_rank(uint64_t n, uint64_t T) { return n % T == 0 ? n / T : 0; }

bool tps_partition_vocab_like(const char *name)
{
    static const char *const words[] = {"embed", "lm_head", "wte", "word_embeddings", "output.weight", "vocab"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(name, words[i])) return true;
    return false;
}

static void set_issue(tps_partition_issue *issue, tps_issue_kind kind, const tps_partition *p, int s, uint64_t n,
                      uint64_t T)
{
    if (!issue) return;
    memset(issue, 0, sizeof *issue);
    issue->kind = kind;
    issue->seg = s;
    issue->dim = p->dim;
    issue->T = T;
    if (s >= 0 && s < p->nseg && s < TPS_MAX_SEGMENTS) {
        memcpy(issue->seg_name, p->seg[s].name, sizeof issue->seg_name);
        issue->unit = p->seg[s].unit;
    }
    issue->units = n;
}

tps_status tps_partition_check(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                               const uint64_t *shape, uint64_t T, tps_error *err)
{
    return tps_partition_diagnose(p, name, dtype, ndim, shape, T, NULL, err);
}

/* The groups of a partition: 1 when it is not grouped. */
static uint64_t groups_of(const tps_partition *p) { return p->groups > 1 ? p->groups : 1; }

static tps_status diagnose(const tps_partition *p, const char *name, tps_dtype dtype, int ndim, const uint64_t *shape,
                          uint64_t T, tps_partition_issue *issue, tps_error *err)
{
    if (T == 0) return tps_fail(err, TPS_EARG, "tensor '%s': tp must be at least 1", name);
    if (p->replicated) return TPS_OK;
    if (p->dim < 0 || p->dim >= ndim)
        return tps_fail(err, TPS_EINVALID, "tensor '%s': split dimension %d but the tensor has %d dimension%s",
                        name, p->dim, ndim, ndim == 1 ? "" : "s");
    if (p->nseg < 1 || p->nseg > TPS_MAX_SEGMENTS)
        return tps_fail(err, TPS_EINVALID, "tensor '%s': %d segments (1 to %d allowed)", name, p->nseg,
                        TPS_MAX_SEGMENTS);
    if (p->pad && (p->nseg != 1 || groups_of(p) > 1))
        return tps_fail(err, TPS_EINVALID, "tensor '%s': padding is only allowed for a single segment", name);
    if (p->uneven && (p->nseg != 1 || groups_of(p) > 1 || p->pad))
        return tps_fail(err, TPS_EINVALID, "tensor '%s': an uneven cut has one segment, no groups and no padding", name);
    uint64_t total = 0, G = groups_of(p);
    for (int s = 0; s < p->nseg; s++) {
        const tps_segment *g = &p->seg[s];
        if (!tps_add_u64(total, g->length, &total))
            return tps_fail(err, TPS_EINVALID, "tensor '%s': segment lengths overflow", name);
        if (g->unit == 0 || g->length % g->unit != 0)
            return tps_fail(err, TPS_EINVALID, "tensor '%s': segment %d%s%s%s has length %llu, not a multiple of its unit %llu",
                            name, s, g->name[0] ? " (" : "", g->name, g->name[0] ? ")" : "",
                            (unsigned long long)g->length, (unsigned long long)g->unit);
    }
    if (!tps_mul_u64(total, G, &total))
        return tps_fail(err, TPS_EINVALID, "tensor '%s': segment lengths overflow", name);
    if (total != shape[p->dim])
        return tps_fail(err, TPS_EINVALID, "tensor '%s': segments add up to %llu%s but dimension %d has %llu", name,
                        (unsigned long long)total, G > 1 ? " over their groups" : "", p->dim,
                        (unsigned long long)shape[p->dim]);
    if (p->owners) { /* whole on its owner: only the placement must fit T */
        if (p->owner >= p->owners || p->pad || p->uneven)
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': whole on one rank as item %llu of %llu, which needs an item below the "
                            "count and a cut without padding or uneven shares",
                            name, (unsigned long long)p->owner, (unsigned long long)p->owners);
        if (p->owners % T != 0) {
            set_issue(issue, TPS_ISSUE_PLACEMENT, p, -1, p->owners, T);
            if (issue) issue->dim = 0; /* one cause for every expert tensor, whatever its TP cut */
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': item %llu of %llu placed whole on the ranks (expert parallelism): "
                            "%llu ranks do not divide %llu items",
                            name, (unsigned long long)p->owner, (unsigned long long)p->owners,
                            (unsigned long long)T, (unsigned long long)p->owners);
        }
        return TPS_OK;
    }
    /* A grouped tensor goes to the ranks a group at a time, or a group to T/G ranks that
     * cut its segments among themselves (Ts ranks below; 1: whole groups, nothing to cut). */
    uint64_t Ts = T;
    if (G > 1) {
        if (G % T == 0) {
            Ts = 1;
        } else if (T % G == 0) {
            Ts = T / G;
        } else {
            set_issue(issue, TPS_ISSUE_INDIVISIBLE, p, -1, G, T);
            if (issue) {
                issue->groups = true;
                issue->unit = p->seg[0].unit;
            }
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': %llu groups along dimension %d, which tp %llu neither divides nor is a "
                            "multiple of",
                            name, (unsigned long long)G, p->dim, (unsigned long long)T);
        }
    }
    /* Elements per index along dim: a cut must not fall inside a byte of a sub-byte type. */
    uint64_t inner = 1;
    for (int d = p->dim + 1; d < ndim; d++)
        if (!tps_mul_u64(inner, shape[d], &inner))
            return tps_fail(err, TPS_EINVALID, "tensor '%s': shape overflows", name);
    unsigned bits = tps_dtype_bits(dtype);
    for (int s = 0; s < p->nseg; s++) {
        const tps_segment *g = &p->seg[s];
        uint64_t n = g->length / g->unit;
        const char *sn = g->name[0] ? g->name : "";
        if (n == 0) continue; /* an empty segment gives every rank nothing */
        if (p->uneven) {
            uint64_t per = n / T + (n % T != 0);
            if (T > 1 && (T - 1) * per >= n) {
                set_issue(issue, TPS_ISSUE_EMPTY_RANK, p, s, n, T);
                return tps_fail(err, TPS_EINVALID,
                                "tensor '%s': %llu units of %llu along dimension %d cut as the engine cuts them "
                                "(cdiv(%llu, %llu) = %llu a rank, the last rank the rest) leave rank %llu nothing",
                                name, (unsigned long long)n, (unsigned long long)g->unit, p->dim,
                                (unsigned long long)n, (unsigned long long)T, (unsigned long long)per,
                                (unsigned long long)(T - 1));
            }
        } else if (p->pad && p->pad_multiple) {
            uint64_t padded;
            if (!tps_add_u64(n, p->pad_multiple - 1, &padded) ||
                !tps_mul_u64(padded / p->pad_multiple, p->pad_multiple, &padded))
                return tps_fail(err, TPS_EINVALID, "tensor '%s': padded length overflows", name);
            if (padded % Ts != 0) {
                set_issue(issue, TPS_ISSUE_INDIVISIBLE, p, s, padded, T);
                return tps_fail(err, TPS_EINVALID,
                                "tensor '%s': the engine pads %llu rows to a multiple of %llu (%llu), which tp %llu "
                                "does not divide",
                                name, (unsigned long long)n, (unsigned long long)p->pad_multiple,
                                (unsigned long long)padded, (unsigned long long)T);
            }
        } else if (units_per_rank(n, Ts)) {
            /* fine */
        } else if (n < Ts && Ts % n == 0 && g->may_replicate) {
            /* replicated units (GQA KV heads) */
        } else if (p->pad) {
            /* padded with zero units */
        } else if (n < Ts && Ts % n == 0) {
            set_issue(issue, TPS_ISSUE_NEEDS_REPLICA, p, s, n * G, T);
            if (G > 1)
                return tps_fail(err, TPS_EINVALID,
                                "tensor '%s': segment %d%s%s%s has %llu units of %llu in each of %llu groups, fewer "
                                "than the %llu ranks tp %llu puts on a group; allow replication (kv_replicate) if "
                                "these are KV heads",
                                name, s, *sn ? " (" : "", sn, *sn ? ")" : "", (unsigned long long)n,
                                (unsigned long long)g->unit, (unsigned long long)G, (unsigned long long)Ts,
                                (unsigned long long)T);
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': segment %d%s%s%s has %llu units of %llu, fewer than tp %llu; "
                            "allow replication (kv_replicate) if these are KV heads",
                            name, s, *sn ? " (" : "", sn, *sn ? ")" : "", (unsigned long long)n,
                            (unsigned long long)g->unit, (unsigned long long)T);
        } else {
            set_issue(issue, TPS_ISSUE_INDIVISIBLE, p, s, n * G, T);
            if (G > 1)
                return tps_fail(err, TPS_EINVALID,
                                "tensor '%s': segment %d%s%s%s has %llu units of %llu in each of %llu groups along "
                                "dimension %d; tp %llu puts %llu ranks on a group, which neither divide %llu nor "
                                "are a multiple of it",
                                name, s, *sn ? " (" : "", sn, *sn ? ")" : "", (unsigned long long)n,
                                (unsigned long long)g->unit, (unsigned long long)G, p->dim, (unsigned long long)T,
                                (unsigned long long)Ts, (unsigned long long)n);
            /* Padding is the remedy only for a vocabulary; heads and MLP rows cannot be padded. */
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': segment %d%s%s%s has %llu units of %llu along dimension %d, "
                            "which tp %llu neither divides nor is a multiple of%s",
                            name, s, *sn ? " (" : "", sn, *sn ? ")" : "", (unsigned long long)n,
                            (unsigned long long)g->unit, p->dim, (unsigned long long)T,
                            p->nseg == 1 && tps_partition_vocab_like(name)
                                ? "; a vocabulary dimension can be padded (pad: true)"
                                : "");
        }
        if (p->block > 1 && T > 1 && Ts > 1 && !p->pad) {
            uint64_t local = units_per_rank(n, Ts) ? (n / Ts) * g->unit : g->unit;
            if (local % p->block != 0) {
                set_issue(issue, TPS_ISSUE_BLOCK, p, s, n * G, T);
                if (issue) {
                    issue->local = local;
                    issue->block = p->block;
                }
                return tps_fail(err, TPS_EINVALID,
                                "tensor '%s': segment %d%s%s%s: tp %llu gives each rank %llu of its %llu elements "
                                "along dimension %d, not a multiple of the quantization block %llu (a rank would "
                                "start or end inside a block)",
                                name, s, *sn ? " (" : "", sn, *sn ? ")" : "", (unsigned long long)T,
                                (unsigned long long)local, (unsigned long long)g->length, p->dim,
                                (unsigned long long)p->block);
            }
        }
        uint64_t ubits;
        if (!tps_mul_u64(g->unit, inner, &ubits) || !tps_mul_u64(ubits, bits, &ubits))
            return tps_fail(err, TPS_EINVALID, "tensor '%s': unit size overflows", name);
        if (ubits % 8 != 0) {
            set_issue(issue, TPS_ISSUE_SUBBYTE, p, s, n, T);
            return tps_fail(err, TPS_EINVALID,
                            "tensor '%s': a unit of segment %d holds %llu %s elements (%llu bits), so a cut "
                            "would fall inside a byte",
                            name, s, (unsigned long long)(ubits / bits), tps_dtype_name(dtype),
                            (unsigned long long)ubits);
        }
    }
    return TPS_OK;
}

tps_status tps_partition_diagnose(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                                  const uint64_t *shape, uint64_t T, tps_partition_issue *issue, tps_error *err)
{
    tps_partition_issue local;
    if (!issue) issue = &local;
    memset(issue, 0, sizeof *issue);
    tps_status st = diagnose(p, name, dtype, ndim, shape, T, issue, err);
    if (st != TPS_OK && issue->kind == TPS_ISSUE_NONE) set_issue(issue, TPS_ISSUE_MALFORMED, p, -1, 0, T);
    return st;
}

tps_status tps_partition_check_rule(const tps_partition *p, const char *name, tps_dtype dtype, int ndim,
                                    const uint64_t *shape, uint64_t T, const char *rule, tps_error *err)
{
    tps_error e;
    tps_error_clear(&e);
    tps_status st = tps_partition_check(p, name, dtype, ndim, shape, T, &e);
    if (st == TPS_OK) return TPS_OK;
    return rule && *rule ? tps_fail(err, st, "%s; rule %s", e.msg, rule) : tps_fail(err, st, "%s", e.msg);
}

/* Appends to out rank r's pieces of the segments for T ranks, the segments starting at base. */
static void slice_segments(const tps_partition *p, uint64_t base, uint64_t T, uint64_t r, tps_slice *out)
{
    for (int s = 0; s < p->nseg; s++) {
        const tps_segment *g = &p->seg[s];
        uint64_t n = g->length / g->unit, first, count;
        if (n == 0) {
            continue;
        } else if (p->uneven) { /* the engine's ceil-division cut: the last rank the rest, no zeros */
            uint64_t per = n / T + (n % T != 0);
            first = r * per;
            count = first >= n ? 0 : (n - first < per ? n - first : per);
        } else if (p->pad && p->pad_multiple) { /* the engine's padding: P = padded / T rows each */
            uint64_t per = (n + p->pad_multiple - 1) / p->pad_multiple * p->pad_multiple / T;
            first = r * per;
            count = first >= n ? 0 : (n - first < per ? n - first : per);
            out->pad += (per - count) * g->unit;
        } else if (n % T == 0) {
            first = r * (n / T);
            count = n / T;
        } else if (n < T && T % n == 0 && g->may_replicate) {
            first = r * n / T;
            count = 1;
        } else { /* padded: every rank gets ceil(n/T) units, the tail ones are zeros */
            uint64_t per = (n + T - 1) / T;
            first = r * per;
            count = first >= n ? 0 : (n - first < per ? n - first : per);
            out->pad += (per - count) * g->unit;
        }
        if (count) {
            int k = out->npieces++;
            out->piece[k].start = base + first * g->unit;
            out->piece[k].len = count * g->unit;
            out->piece[k].seg = s;
            out->length += count * g->unit;
        }
        base += g->length;
    }
}

void tps_partition_slice(const tps_partition *p, uint64_t T, uint64_t r, tps_slice *out)
{
    memset(out, 0, sizeof *out);
    if (p->owners) { /* whole on its owner, nothing on the others */
        if (tps_partition_owner_rank(p, T) == r) {
            uint64_t len = 0;
            for (int s = 0; s < p->nseg; s++) len += p->seg[s].length;
            out->npieces = 1;
            out->piece[0].len = out->length = len * groups_of(p);
        }
        return;
    }
    uint64_t G = groups_of(p);
    if (G == 1) {
        slice_segments(p, 0, T, r, out);
    } else {
        uint64_t glen = 0;
        for (int s = 0; s < p->nseg; s++) glen += p->seg[s].length;
        if (G % T == 0) { /* whole groups: one run */
            out->npieces = 1;
            out->piece[0].start = r * (G / T) * glen;
            out->piece[0].len = out->length = (G / T) * glen;
        } else { /* T / G ranks share group r / (T / G) */
            uint64_t t = T / G;
            slice_segments(p, (r / t) * glen, t, r % t, out);
        }
    }
    out->length += out->pad;
}

void tps_partition_rank_shape(const tps_partition *p, int ndim, const uint64_t *shape, uint64_t T, uint64_t r,
                              uint64_t *out)
{
    for (int d = 0; d < ndim; d++) out[d] = shape[d];
    if (p->replicated) return;
    tps_slice s;
    tps_partition_slice(p, T, r, &s);
    out[p->dim] = s.length;
}

bool tps_slice_equal(const tps_slice *a, const tps_slice *b)
{
    if (a->npieces != b->npieces || a->pad != b->pad) return false;
    for (int i = 0; i < a->npieces; i++)
        if (a->piece[i].start != b->piece[i].start || a->piece[i].len != b->piece[i].len) return false;
    return true;
}

void tps_partition_describe(const tps_partition *p, char *buf, size_t bufsize)
{
    if (p->replicated) {
        snprintf(buf, bufsize, "replicated");
        return;
    }
    if (p->owners) {
        snprintf(buf, bufsize, "whole on one rank: item %llu of %llu, placed linearly (dim %d)",
                 (unsigned long long)p->owner, (unsigned long long)p->owners, p->dim);
        return;
    }
    size_t n = (size_t)snprintf(buf, bufsize, "split dim %d", p->dim);
    if (p->nseg > 1) {
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " [");
        for (int s = 0; s < p->nseg; s++)
            n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, "%s%s:%llu",
                                  s ? "; " : "", p->seg[s].name[0] ? p->seg[s].name : "?",
                                  (unsigned long long)p->seg[s].length);
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, "]");
    }
    if (p->seg[0].unit > 1)
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " unit %llu",
                              (unsigned long long)p->seg[0].unit);
    for (int s = 0; s < p->nseg; s++)
        if (p->seg[s].may_replicate) {
            n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " kv-replicable");
            break;
        }
    if (p->groups > 1)
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " in %llu groups",
                              (unsigned long long)p->groups);
    if (p->block > 1)
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " block %llu",
                              (unsigned long long)p->block);
    if (p->uneven)
        n += (size_t)snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0,
                              " uneven (cdiv per rank, the last the rest)");
    if (p->pad && p->pad_multiple)
        snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " padded to a multiple of %llu",
                 (unsigned long long)p->pad_multiple);
    else if (p->pad) snprintf(buf + (n < bufsize ? n : bufsize), n < bufsize ? bufsize - n : 0, " padded");
}
