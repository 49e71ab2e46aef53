/* The partition algebra and byte spans against a brute-force, element-by-element model of
 * the rules lib/partition/partition.h states, written independently of lib/partition/partition.c. */
#include <stdlib.h>
#include <string.h>

#include "lib/partition/partition.h"
#include "lib/partition/partpool.h"
#include "lib/partition/spans.h"
#include "tps_test.h"

/* lib/partition/partition.h's rule for one segment of n units on T ranks: the units rank r holds, as
 * [first, first+count), and the zero units it pads with. */
static void brute_units(uint64_t n, uint64_t T, uint64_t r, bool repl, bool pad, uint64_t *first, uint64_t *count,
                        uint64_t *zeros)
{
    *zeros = 0;
    if (n % T == 0) {
        *first = r * n / T;
        *count = n / T;
    } else if (repl && n < T && T % n == 0) {
        *first = (r * n) / T;
        *count = 1;
    } else {
        (void)pad;
        uint64_t padded = (n + T - 1) / T * T, per = padded / T;
        *first = r * per;
        *count = 0;
        for (uint64_t u = *first; u < *first + per; u++)
            if (u < n) ++*count;
            else ++*zeros;
    }
}

/* Global element index (along dim) of the rank's j-th index along dim, or -1 for padding. */
static int64_t brute_map(const tps_partition *p, uint64_t T, uint64_t r, uint64_t j)
{
    uint64_t base = 0, at = 0;
    for (int s = 0; s < p->nseg; s++) {
        uint64_t n = p->seg[s].length / p->seg[s].unit, first, count, zeros;
        brute_units(n, T, r, p->seg[s].may_replicate, p->pad, &first, &count, &zeros);
        uint64_t len = count * p->seg[s].unit;
        if (j < at + len) return (int64_t)(base + first * p->seg[s].unit + (j - at));
        at += len;
        base += p->seg[s].length;
    }
    return -1;
}

/* Builds rank r's bytes through the spans (as the copy engine does) and element by element
 * through brute_map, for a [A, D, B] tensor of 2-byte elements cut along dim 1. */
static int compare(const tps_partition *p, uint64_t A, uint64_t B, uint64_t T)
{
    uint64_t D = 0;
    for (int s = 0; s < p->nseg; s++) D += p->seg[s].length;
    uint64_t shape[3] = {A, D, B};
    size_t n = (size_t)(A * D * B);
    uint16_t *g = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) g[i] = (uint16_t)(i * 7 + 1);
    tps_spans sp;
    tps_error err;
    tps_error_clear(&err);
    int bad = 0;
    if (tps_partition_check(p, "t", TPS_DT_BF16, 3, shape, T, &err) != TPS_OK) {
        printf("#   check failed: %s\n", err.msg);
        free(g);
        return 1;
    }
    if (tps_spans_build(p, TPS_DT_BF16, 3, shape, T, &sp, &err) != TPS_OK) {
        printf("#   spans failed: %s\n", err.msg);
        free(g);
        return 1;
    }
    for (uint64_t r = 0; r < T && !bad; r++) {
        uint64_t rs[3];
        tps_partition_rank_shape(p, 3, shape, T, r, rs);
        size_t rn = (size_t)(rs[0] * rs[1] * rs[2]);
        uint16_t *viaspans = calloc(rn + 1, 2), *brute = calloc(rn + 1, 2);
        /* through the spans: walk the global bytes in order, appending owned runs */
        size_t at = 0;
        for (uint64_t o = 0; o < sp.outer; o++) {
            for (size_t k = 0; k < sp.nspans; k++)
                for (uint32_t j = 0; j < sp.span[k].nowners; j++)
                    if (sp.owner[sp.span[k].owner0 + j] == r) {
                        memcpy((char *)viaspans + at, (char *)g + o * sp.slab_bytes + sp.span[k].begin,
                               sp.span[k].end - sp.span[k].begin);
                        at += sp.span[k].end - sp.span[k].begin;
                    }
            at += sp.rank_pad_bytes[r];
        }
        if (at != rn * 2) bad = 1;
        for (uint64_t a = 0; a < A; a++)
            for (uint64_t j = 0; j < rs[1]; j++)
                for (uint64_t b = 0; b < B; b++) {
                    int64_t gj = brute_map(p, T, r, j);
                    brute[(a * rs[1] + j) * B + b] = gj < 0 ? 0 : g[(a * D + (uint64_t)gj) * B + b];
                }
        if (memcmp(viaspans, brute, rn * 2) != 0) {
            printf("#   rank %llu of %llu differs\n", (unsigned long long)r, (unsigned long long)T);
            bad = 1;
        }
        free(viaspans);
        free(brute);
    }
    tps_spans_release(&sp);
    free(g);
    return bad;
}

static tps_partition seg3(uint64_t q, uint64_t k, uint64_t v, uint64_t unit, bool repl)
{
    tps_partition p;
    memset(&p, 0, sizeof p);
    p.dim = 1;
    p.nseg = 3;
    uint64_t len[3] = {q, k, v};
    for (int s = 0; s < 3; s++) {
        p.seg[s].length = len[s];
        p.seg[s].unit = unit;
        p.seg[s].may_replicate = s > 0 && repl;
    }
    return p;
}

TEST(plain_split_matches_brute_force)
{
    for (uint64_t T = 1; T <= 8; T *= 2) {
        tps_partition p;
        tps_partition_simple(&p, 1, 16, 2);
        CHECK(compare(&p, 3, 2, T) == 0);
    }
}

TEST(fused_qkv_with_gqa_replication)
{
    /* 8 q heads, 2 kv heads of 4: at tp 4 and 8 each rank gets a kv replica */
    for (uint64_t T = 1; T <= 8; T *= 2) {
        tps_partition p = seg3(32, 8, 8, 4, true);
        CHECK(compare(&p, 2, 3, T) == 0);
    }
}

TEST(padding_for_vocabulary)
{
    for (uint64_t T = 2; T <= 8; T++) {
        tps_partition p;
        tps_partition_simple(&p, 1, 13, 1);
        p.pad = true;
        CHECK(compare(&p, 2, 3, T) == 0);
    }
}

TEST(kv_without_replication_refused_with_numbers)
{
    tps_partition p = seg3(32, 8, 8, 4, false);
    uint64_t shape[2] = {1, 48};
    p.dim = 1;
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 2, shape, 8, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "qkv");
    CHECK_CONTAINS(err.msg, "2 units");
    CHECK_CONTAINS(err.msg, "tp 8");
}

TEST(indivisible_refused_and_tp_not_multiple_of_kv)
{
    tps_partition p = seg3(24, 12, 12, 4, true); /* 6 q heads, 3 kv heads */
    uint64_t shape[2] = {1, 48};
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 2, shape, 4, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "6 units");
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 2, shape, 3, &err) == TPS_OK);
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 2, shape, 6, &err) == TPS_OK); /* kv 3 replicated twice */
}

TEST(sub_byte_cut_inside_a_byte_refused)
{
    tps_partition p;
    uint64_t shape[1] = {6};
    tps_partition_simple(&p, 0, 6, 1);
    tps_error err;
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "w", TPS_DT_F4, 1, shape, 2, &err) == TPS_EINVALID); /* 3 nibbles per rank */
    CHECK_CONTAINS(err.msg, "inside a byte");
    uint64_t shape2[2] = {4, 2};
    tps_partition_simple(&p, 0, 4, 1);
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "w", TPS_DT_F4, 2, shape2, 4, &err) == TPS_OK); /* one byte per row */
}

TEST(rank_shapes)
{
    tps_partition p;
    uint64_t shape[2] = {1003, 64}, out[2];
    tps_partition_simple(&p, 0, 1003, 1);
    p.pad = true;
    for (uint64_t r = 0; r < 8; r++) {
        tps_partition_rank_shape(&p, 2, shape, 8, r, out);
        CHECK_EQ_U64(out[0], 126); /* ceil(1003/8) */
        CHECK_EQ_U64(out[1], 64);
    }
}

/* Falcon's grouped [q heads of the group; k; v] per KV group, against the heads model the
 * issue states (not the segment rule): rank r of T holds q heads [r*H/T, (r+1)*H/T) and the
 * KV groups [r*G/T, (r+1)*G/T) (or group floor(r*G/T) when T > G), laid out as the source
 * lays out a group: the held q heads of each held group, then its k, then its v. */
static size_t heads_model(uint64_t H, uint64_t G, uint64_t hd, uint64_t T, uint64_t r, uint64_t *rows)
{
    uint64_t qg = H / G, glen = (qg + 2) * hd, q0 = r * H / T, qn = H / T;
    uint64_t g0 = r * G / T, gn = G >= T ? G / T : 1;
    size_t n = 0;
    for (uint64_t g = g0; g < g0 + gn; g++) {
        for (uint64_t h = g * qg; h < (g + 1) * qg; h++)
            if (h >= q0 && h < q0 + qn)
                for (uint64_t i = 0; i < hd; i++) rows[n++] = g * glen + (h - g * qg) * hd + i;
        for (uint64_t i = 0; i < 2 * hd; i++) rows[n++] = g * glen + qg * hd + i; /* k, then v */
    }
    return n;
}

static tps_partition grouped(uint64_t H, uint64_t G, uint64_t hd)
{
    tps_partition p = seg3(H / G * hd, hd, hd, hd, true);
    p.dim = 0;
    p.groups = G > 1 ? G : 0;
    strcpy(p.seg[0].name, "q");
    strcpy(p.seg[1].name, "k");
    strcpy(p.seg[2].name, "v");
    return p;
}

TEST(grouped_qkv_holds_whole_groups_or_a_share_of_one)
{
    const uint64_t H = 8, hd = 2;
    for (uint64_t G = 1; G <= H; G *= 2)
        for (uint64_t T = 1; T <= H; T *= 2) {
            tps_partition p = grouped(H, G, hd);
            uint64_t D = (H + 2 * G) * hd, shape[1] = {D};
            tps_error err;
            tps_error_clear(&err);
            CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 1, shape, T, &err) == TPS_OK);
            tps_spans sp;
            CHECK(tps_spans_build(&p, TPS_DT_BF16, 1, shape, T, &sp, &err) == TPS_OK);
            for (uint64_t r = 0; r < T; r++) {
                uint64_t want[64], have[64], rs[1];
                size_t nw = heads_model(H, G, hd, T, r, want), nh = 0;
                for (size_t k = 0; k < sp.nspans; k++) /* the spans in global order, as the engine walks */
                    for (uint32_t j = 0; j < sp.span[k].nowners; j++)
                        if (sp.owner[sp.span[k].owner0 + j] == r) {
                            uint64_t off = sp.owner_offset[sp.span[k].owner0 + j] / 2;
                            for (uint64_t b = sp.span[k].begin / 2; b < sp.span[k].end / 2; b++)
                                have[off + b - sp.span[k].begin / 2] = b;
                            nh += (sp.span[k].end - sp.span[k].begin) / 2;
                        }
                tps_partition_rank_shape(&p, 1, shape, T, r, rs);
                CHECK_EQ_U64(rs[0], nw);
                CHECK_EQ_U64(nh, nw);
                CHECK(memcmp(have, want, nw * sizeof *want) == 0);
            }
            tps_spans_release(&sp);
        }
}

TEST(grouped_qkv_refusals_name_groups_and_heads)
{
    tps_error err;
    tps_partition_issue is;
    tps_partition p = grouped(12, 4, 2); /* 12 heads in 4 groups of 3 */
    uint64_t shape[1] = {(12 + 8) * 2};
    tps_error_clear(&err);
    CHECK(tps_partition_diagnose(&p, "qkv", TPS_DT_BF16, 1, shape, 3, &is, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "4 groups");
    CHECK(is.groups && is.units == 4);
    tps_error_clear(&err); /* 8 ranks: 2 to a group, which cannot share its 3 q heads */
    CHECK(tps_partition_diagnose(&p, "qkv", TPS_DT_BF16, 1, shape, 8, &is, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "segment 0 (q)");
    CHECK(!is.groups && is.units == 12 && is.unit == 2);
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 1, shape, 2, &err) == TPS_OK);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 1, shape, 4, &err) == TPS_OK);
    CHECK(tps_partition_check(&p, "qkv", TPS_DT_BF16, 1, shape, 12, &err) == TPS_OK);
}

/* The pool stores each distinct partition once: equal ones (every field, segment names
 * included) share one copy, any difference gets its own, and pooled copies do not move
 * while thousands more are added. */
TEST(partition_pool_shares_equal_partitions)
{
    tps_partpool *pool = tps_partpool_new();
    CHECK(pool != NULL);
    tps_partition a, b;
    tps_partition_simple(&a, 0, 4096, 128);
    tps_partition_simple(&b, 0, 4096, 128);
    const tps_partition *pa = tps_partpool_intern(pool, &a), *pb = tps_partpool_intern(pool, &b);
    CHECK(pa != NULL && pa == pb && pa != &a);
    CHECK(pa->dim == 0 && pa->nseg == 1 && pa->seg[0].length == 4096 && pa->seg[0].unit == 128);
    b.pad_multiple = 64;
    CHECK(tps_partpool_intern(pool, &b) != pa);
    b = a;
    strcpy(b.seg[0].name, "q");
    CHECK(tps_partpool_intern(pool, &b) != pa);
    b = a;
    b.seg[0].may_replicate = true;
    CHECK(tps_partpool_intern(pool, &b) != pa);
    CHECK(tps_partpool_intern(pool, &(tps_partition){.replicated = true}) != pa);
    CHECK_EQ_U64(tps_partpool_count(pool), 5);
    const tps_partition *first[3000];
    for (uint64_t i = 0; i < 3000; i++) {
        tps_partition_simple(&b, 1, 1000 + i, 1);
        first[i] = tps_partpool_intern(pool, &b);
    }
    CHECK_EQ_U64(tps_partpool_count(pool), 3005);
    bool same = true;
    for (uint64_t i = 0; i < 3000; i++) {
        tps_partition_simple(&b, 1, 1000 + i, 1);
        same &= tps_partpool_intern(pool, &b) == first[i] && first[i]->seg[0].length == 1000 + i;
    }
    CHECK(same);
    CHECK(tps_partpool_intern(pool, &a) == pa);
    CHECK(tps_partpool_ref(pool) == pool); /* two references: the first unref frees nothing */
    tps_partpool_unref(pool);
    CHECK(pa->seg[0].length == 4096);
    tps_partpool_unref(pool);
    tps_partpool_unref(NULL);
}

/* vLLM's MXFP4 rule (models/gpt_oss.py _load_weights_mxfp4), in its own words: per =
 * cdiv(I/32, T) * 32, rank r takes [r*per, min((r+1)*per, I)). */
TEST(uneven_cut_is_vllm_mxfp4_rule)
{
    static const uint64_t blocks[] = {90, 15, 9, 8};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        for (uint64_t T = 1; T <= 8; T++) {
            uint64_t I = blocks[i] * 32, per = (blocks[i] + T - 1) / T * 32, shape[2] = {4, 2 * I};
            tps_partition p;
            tps_partition_simple(&p, 1, 2 * I, 64);
            p.uneven = true;
            tps_error err;
            tps_error_clear(&err);
            bool empty = (T - 1) * per >= I && T > 1;
            tps_partition_issue is;
            CHECK(tps_partition_diagnose(&p, "gate_up_proj_blocks", TPS_DT_U8, 2, shape, T, &is, &err) ==
                  (empty ? TPS_EINVALID : TPS_OK));
            if (empty) {
                CHECK(is.kind == TPS_ISSUE_EMPTY_RANK);
                CHECK_CONTAINS(err.msg, "gate_up_proj_blocks");
                CHECK_CONTAINS(err.msg, "nothing");
                continue;
            }
            for (uint64_t r = 0; r < T; r++) {
                uint64_t s0 = r * per, e0 = (r + 1) * per < I ? (r + 1) * per : I, out[2];
                tps_slice sl;
                tps_partition_slice(&p, T, r, &sl);
                CHECK(sl.npieces == 1 && sl.pad == 0);
                CHECK(sl.piece[0].start == 2 * s0 && sl.piece[0].len == 2 * (e0 - s0) && sl.length == 2 * (e0 - s0));
                tps_partition_rank_shape(&p, 2, shape, T, r, out);
                CHECK(out[0] == 4 && out[1] == 2 * (e0 - s0));
            }
        }
    tps_partition p;
    uint64_t shape1[1] = {90};
    tps_error err;
    tps_partition_simple(&p, 0, 90, 1);
    p.uneven = p.pad = true; /* a cut that is both is no cut the algebra defines */
    tps_error_clear(&err);
    CHECK(tps_partition_check(&p, "w", TPS_DT_U8, 1, shape1, 8, &err) == TPS_EINVALID);
    CHECK_CONTAINS(err.msg, "uneven");
    p.pad = false;
    char d[160];
    tps_partition_describe(&p, d, sizeof d);
    CHECK_CONTAINS(d, "uneven");
}

/* vLLM's expert placement (enable_expert_parallel, expert_map_manager's linear map): expert e of
 * E on T ranks is whole on rank floor(e / (E / T)), nothing elsewhere; T not dividing E refused
 * with the numbers; the pool tells placements apart. */
TEST(whole_on_one_rank_is_vllm_linear_expert_placement)
{
    uint64_t shape[2] = {96, 64};
    for (uint64_t E = 1; E <= 8; E++)
        for (uint64_t T = 1; T <= 8; T++)
            for (uint64_t e = 0; e < E; e++) {
                tps_partition p;
                tps_partition_simple(&p, 1, 64, 1); /* the TP cut it keeps: row-parallel */
                p.owners = E;
                p.owner = e;
                tps_error err;
                tps_error_clear(&err);
                tps_status st = tps_partition_check(&p, "experts.w2", TPS_DT_BF16, 2, shape, T, &err);
                if (E % T) {
                    CHECK(st == TPS_EINVALID);
                    CHECK_CONTAINS(err.msg, "experts.w2");
                    CHECK_CONTAINS(err.msg, "do not divide");
                    continue;
                }
                CHECK(st == TPS_OK);
                uint64_t holders = 0;
                for (uint64_t r = 0; r < T; r++) {
                    tps_slice sl;
                    uint64_t out[2];
                    tps_partition_slice(&p, T, r, &sl);
                    tps_partition_rank_shape(&p, 2, shape, T, r, out);
                    bool mine = r * (E / T) <= e && e < (r + 1) * (E / T);
                    holders += mine;
                    CHECK(sl.pad == 0);
                    if (mine) CHECK(sl.npieces == 1 && sl.piece[0].start == 0 && sl.piece[0].len == 64 && out[1] == 64);
                    else CHECK(sl.npieces == 0 && sl.length == 0 && out[1] == 0);
                    CHECK(out[0] == 96);
                }
                CHECK(holders == 1);
            }
    tps_partition a, b;
    tps_partition_simple(&a, 0, 96, 1);
    b = a;
    a.owners = b.owners = 4;
    a.owner = 1;
    b.owner = 2;
    tps_partpool *pool = tps_partpool_new();
    const tps_partition *pa = tps_partpool_intern(pool, &a), *pb = tps_partpool_intern(pool, &b);
    CHECK(pa && pb && pa != pb && pa->owner == 1 && pb->owner == 2 && tps_partpool_count(pool) == 2);
    tps_partpool_unref(pool);
    char d[160];
    tps_partition_describe(&a, d, sizeof d);
    CHECK_CONTAINS(d, "item 1 of 4");
}

int main(void)
{
    RUN(whole_on_one_rank_is_vllm_linear_expert_placement);
    RUN(uneven_cut_is_vllm_mxfp4_rule);
    RUN(plain_split_matches_brute_force);
    RUN(fused_qkv_with_gqa_replication);
    RUN(padding_for_vocabulary);
    RUN(kv_without_replication_refused_with_numbers);
    RUN(indivisible_refused_and_tp_not_multiple_of_kv);
    RUN(sub_byte_cut_inside_a_byte_refused);
    RUN(rank_shapes);
    RUN(grouped_qkv_holds_whole_groups_or_a_share_of_one);
    RUN(grouped_qkv_refusals_name_groups_and_heads);
    RUN(partition_pool_shares_equal_partitions);
    return tps_test_done();
}
