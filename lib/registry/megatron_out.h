/* Writing a Megatron-LM legacy (--ckpt-format torch) checkpoint from a shard-set manifest:
 * the output planning shared by reshard (a Megatron source) and split --target megatron (a
 * Hugging Face source mapped to Megatron-Core names first).
 *
 * Input: a manifest whose tensors carry Megatron-Core GLOBAL names
 * (embedding.word_embeddings.weight, decoder.layers.{global layer}..., decoder.final_layernorm.*,
 * output_layer.weight) and whose partitions are planned at the new tp by the megatron_gpt
 * presets (linear_qkv grouped plain row chunks, linear_fc1 [gate_r; up_r], vocabulary rows
 * padded with zeros).  tps_megatron_out_plan then
 *   - sets every pad: true tensor's pad_multiple to make_vocab_size_divisible_by * tp, so the
 *     vocabulary is zero-padded as Megatron pads it (ceil(V / (m*tp)) * (m*tp) rows);
 *   - orders the tensors by pipeline stage (stage 0: embeddings, then each stage's layers in
 *     global order; the last stage ends with the final norm and output_layer), so that each
 *     stage is one contiguous run of manifest tensors: the file's PART (part p of rank r is
 *     iter_.../mp_rank_{r:02d}_{p:03d}/model_optim_rng.pt, mp_rank_{r:02d}/ when pp is 1);
 *   - gives every tensor its name in the file (m->target "megatron", target_name = the name
 *     with the layer renumbered local to its stage);
 *   - with tied embeddings and pp > 1 appends output_layer.weight to the last stage as a copy
 *     of the word embeddings (src[] says which input tensor each output tensor's bytes come
 *     from; a tied set at pp 1 drops a source's output_layer.weight copy);
 *   - builds each file's torch sink metadata (formats/torch/torch_write.h, the #18 contract): the
 *     top-level entries (args updated: tensor_model_parallel_size, pipeline_model_parallel_size,
 *     padded_vocab_size, and with an explicit split decoder_first/last_pipeline_num_layers;
 *     everything else kept; checkpoint_version and iteration kept) and the model dict's key
 *     order, with a None entry for each _extra_state key (renumbered to the local layer).
 * tps_megatron_write writes the planned set through a sink with the copy engine, then the
 * tracker file and tpshard.json beside it (Megatron ignores both extra files: the iter
 * directory holds only the rank directories); optimizer and RNG state are never written.
 *
 * Where tpshard.json goes: <root>/tpshard.json beside latest_checkpointed_iteration.txt, its
 * file names relative to the root (iter_0000001/mp_rank_00/model_optim_rng.pt), parts the
 * stages.  `check` reads it to prove the CRCs of a tpshard-written Megatron set. */
#ifndef TPS_MEGATRON_OUT_H
#define TPS_MEGATRON_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/index.h"
#include "../base/status.h"
#include "../engine/cut.h"
#include "../engine/outdir.h"
#include "../engine/write_set.h"
#include "../set/manifest.h"
#include "../set/sink.h"

#define TPS_MEGATRON_FILE "model_optim_rng.pt"
/* Megatron's --make-vocab-size-divisible-by default. */
#define TPS_MEGATRON_VOCAB_DIVISOR 128

/* Layer ranges of the pipeline stages: stage p holds global layers [first[p], first[p+1])
 * (first has pp+1 entries).  pp_layers NULL: Megatron's uniform rule, pp must divide
 * num_layers (refused, TPS_EARG, naming --pp-layers otherwise).  Else "a,b,c": pp counts,
 * each at least 1, adding up to num_layers. */
tps_status tps_megatron_stages(uint64_t num_layers, uint64_t pp, const char *pp_layers, uint64_t *first,
                               tps_error *err);

/* The stage of a global Megatron-Core name and its name in that stage's file (the layer
 * renumbered); embedding.* is stage 0, decoder.final_layernorm.* and output_layer.* the last.
 * A name of none of these forms is TPS_EINVALID naming it. */
tps_status tps_megatron_local_name(const char *global, const uint64_t *first, uint64_t pp, uint64_t *stage,
                                   char *local, size_t size, tps_error *err);
/* The inverse: a name in stage p's file (local layer) to its global name. */
tps_status tps_megatron_global_name(const char *local, const uint64_t *first, uint64_t pp, uint64_t stage,
                                    char *global, size_t size, tps_error *err);

/* Megatron's padded vocabulary: ceil(v / (divisor * tp)) * (divisor * tp). */
uint64_t tps_megatron_padded_vocab(uint64_t v, uint64_t divisor, uint64_t tp);

typedef struct tps_megatron_out_opts {
    uint64_t pp;                 /* the new pipeline size (tp is the manifest's) */
    const char *pp_layers;       /* NULL, or --pp-layers "a,b,c" */
    uint64_t num_layers;
    uint64_t vocab_divisor;      /* make_vocab_size_divisible_by (0: 128) */
    bool tied;                   /* embeddings tied to the output layer (no untie_...) */
    /* The args Namespace as the contract's JSON ({"$newobj": ["argparse.Namespace", [], {...}]});
     * NULL: the writer has none (a Hugging Face source builds one first). */
    const char *args_json;
    /* What the args say of the checkpoint: its tensor_model_parallel_size (0: the manifest's tp;
     * a torch_dist checkpoint is planned at tp 1 yet padded and named for the tp it is
     * for) and ckpt_format where the source has the key (NULL: "torch"). */
    uint64_t args_tp;
    const char *ckpt_format;
    const char *checkpoint_version_json; /* NULL: 3.0 */
    int64_t iteration;                   /* >= 1, unless release */
    bool release;
    /* The _extra_state keys to write as None, GLOBAL names (layers renumbered); NULL with
     * n 0: Megatron-Core's local spec (linear_qkv, linear_proj, linear_fc1, linear_fc2 of every
     * layer, and output_layer's on the last stage, weight or not: a tied one-stage GPTModel saves it
     * without output_layer.weight).  Given keys are all written, output_layer's added if absent. */
    char **extra_state;
    size_t n_extra_state;
} tps_megatron_out_opts;

typedef struct tps_megatron_out {
    uint64_t tp, pp;
    uint64_t *layer_first; /* pp+1 */
    size_t *part_first;    /* pp+1: stage p is manifest tensors [part_first[p], part_first[p+1]) */
    size_t *src;           /* per manifest tensor after planning: its index in the manifest before */
    char *iter_dir;        /* "iter_0000001" or "release" */
    char *tracker;         /* the tracker file's text: "1" or "release" */
    char *top_json;        /* torch.top of every file (args updated) */
    char **entries_json;   /* per stage: torch.model_entries */
} tps_megatron_out;

/* Plans m (reordered in place; see above).  m->tp is the new tp. */
tps_status tps_megatron_out_plan(tps_manifest *m, const tps_megatron_out_opts *o, tps_megatron_out **out,
                                 tps_error *err);

/* "iter_0000001/mp_rank_03_001/model_optim_rng.pt" for rank r, stage p. */
void tps_megatron_file_name(const tps_megatron_out *mo, uint64_t r, uint64_t p, char *out, size_t size);

/* Writes the planned set under o->out (the checkpoint root) through sink (formats/:
 * tps_torch_sink), reading global tensor i through read (after planning: use mo->src to find
 * the input's tensor), with the options of tps_write_set (o->cut.sink is replaced by sink).
 * Says on stderr that optimizer and RNG state are not written unless quiet. */
tps_status tps_megatron_write(tps_manifest *m, const tps_megatron_out *mo, const tps_sink *sink,
                              tps_global_read_fn read, void *ctx, const tps_write_opts *o, tps_error *err);

typedef tps_status (*tps_megatron_file_name_fn)(void *arg, uint64_t r, uint64_t tp, size_t p, char *out, size_t size,
                                                tps_error *err);
typedef const tps_kv *(*tps_megatron_file_meta_fn)(void *arg, uint64_t r, size_t p, size_t *n);
typedef tps_status (*tps_megatron_before_publish_fn)(const tps_outdir *od, void *arg, tps_error *err);

/* What both writers (this and megatron_dist_out.h) set in wo: a shard set (tpshard.json
 * beside the tracker) of Megatron's own files through sink, nparts parts per rank from
 * mo->part_first, named and described by name and meta, then before (the tracker, ...) after
 * the files; arg goes to all three. */
void tps_megatron_files_opts(tps_write_opts *wo, const tps_sink *sink, const tps_megatron_out *mo, size_t nparts,
                             tps_megatron_file_name_fn name, tps_megatron_file_meta_fn meta,
                             tps_megatron_before_publish_fn before, void *arg);

void tps_megatron_out_free(tps_megatron_out *mo); /* accepts NULL */

/* The tracker file (mo->tracker) into od: a before_publish step of both writers. */
tps_status tps_megatron_write_tracker(const tps_outdir *od, const tps_megatron_out *mo, tps_error *err);

/* Whether a global name is a linear layer's weight (linear_qkv, linear_proj, linear_fc1,
 * linear_fc2 of a layer, output_layer): the modules that save an _extra_state. */
bool tps_megatron_is_linear_weight(const char *name);

#endif
