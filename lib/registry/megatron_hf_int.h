/* Private to lib/registry/megatron_hf*.c: the parsed `targets: megatron:` section, and the
 * row views both directions build (a fused Megatron tensor as whole rows of Hugging Face
 * tensors, and back). */
#ifndef TPS_MEGATRON_HF_INT_H
#define TPS_MEGATRON_HF_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "../base/index.h"
#include "../base/json.h"
#include "../base/status.h"
#include "../engine/cut.h"
#include "../layout/layout.h"

/* Declared as megatron_hf.h declares it, not included from there: the files behind that
 * header include this one, and this one stays below it (no include circle). */
typedef struct tps_megatron_hf tps_megatron_hf;

/* The most Hugging Face tensors one Megatron tensor fuses, and the longest name. */
#define MAX_FROM 8
#define NAME_LEN 1024

/* TPS_CHECK for functions with nothing to clean up. */
#define TRY(call)                        \
    do {                                 \
        tps_status try_st = (call);      \
        if (try_st != TPS_OK) return try_st; \
    } while (0)

typedef struct mentry {
    char *into;
    char *from[MAX_FROM];
    char *rows[MAX_FROM];
    size_t nfrom, nrows;
    char *groups;
    size_t line;
} mentry;

typedef struct marg {
    char *arg, *config;
    bool as_float, as_int;
} marg;

typedef struct mhf {
    char *architecture, *model_type, *when, *unless;
} mhf;

struct tps_megatron_hf {
    char *source;
    mentry *e;
    size_t n;
    marg *a;
    size_t na;
    mhf *hf;
    size_t nhf;
};

typedef struct rpiece {
    size_t src;
    uint64_t row, nrows;
} rpiece;

/* A tensor made of whole rows of other tensors, in order. */
typedef struct rview {
    uint64_t row_bytes;
    rpiece *p;
    size_t n;
} rview;

/* Whether a preset's YAML has a targets: megatron: section (tps_yaml_presets_with's test). */
bool tps_mhf_has_megatron(yaml_document_t *doc, const void *unused);

tps_status tps_mhf_rview_read(const rview *v, tps_global_read_fn read, void *ctx, uint64_t off, void *buf, size_t len,
                             tps_error *err);
void tps_mhf_rviews_free(rview *v, size_t n);
/* One entry's pieces: the members m[0..K) (rows r[k], G groups) into the fused tensor, or,
 * with reverse, member k's pieces out of the fused tensor src. */
bool tps_mhf_build_pieces(rview *v, const size_t *m, const uint64_t *r, size_t K, uint64_t G, size_t k_rev, size_t src,
                         bool reverse);
/* Rows and groups of entry e over l's sizes, checked: every member divides into G blocks. */
tps_status tps_mhf_entry_rows(const tps_megatron_hf *h, const mentry *e, const tps_layout *l, uint64_t *r, uint64_t *G,
                             tps_error *err);

/* Whether k is one of keys[0..n). */
bool tps_mhf_has_key(const char *const *keys, size_t n, const char *k);
/* v's value when it is a JSON number. */
bool tps_mhf_number_of(const tps_json *v, double *out);

#endif
