/* The numerical verification pass: one transformer layer run the tensor-parallel way and
 * compared with the same layer computed from the unsharded weights in float64.
 *
 * Shape of the pass (nccl-tests style: one description per block kind, one driver):
 *   - reference: the layer from the full weights in float64 (verify/math/ref.c), fed with
 *     float32-representable random inputs drawn from a seed;
 *   - sharded pass: T ranks (threads on the CPU backend), each holding only its own
 *     slices, computing in float32 its q heads with their KV heads, its o_proj row slice,
 *     an all-reduce, its MLP column/row slices and a second all-reduce (verify/ranks/rank.c);
 *   - comparison of the two block outputs: the attention output and the MLP output, each
 *     before its residual add (the residual would hide a wrong block: x dominates x + a);
 *   - when a stage differs, the culprit rank: each rank's partial sum (before the
 *     all-reduce) against the reference partial computed from the full weights for the
 *     heads / intermediate columns the TP convention gives that rank.
 *
 * The ranks read their slices by the standard TP convention, as an inference engine does,
 * and never consult the manifest's partition: rank r of T holds q heads
 * [r*H/T, (r+1)*H/T), KV heads [r*KV/T, (r+1)*KV/T) (or the single head r*KV/T, a replica,
 * when T > KV), intermediate columns [r*I/T, (r+1)*I/T), a fused [q;k;v] or [gate;up]
 * slice as the concatenation of its pieces, the full row-parallel biases, norms and
 * router.  A slice of another shape is reported as a mismatch of that rank; a slice of the
 * right shape holding the wrong values shows up in the numbers.
 *
 * A mixture-of-experts layer (verify/math/moe_route.h) routes on every rank with the full,
 * replicated router; each rank runs every chosen expert on its intermediate columns and the
 * shared expert (an ordinary TP MLP) on its own, all summed by the one MLP all-reduce.
 *
 * Known limit: a MoE rank picks its top-k experts from float32 router logits, the
 * reference from float64 ones; two logits within float32 rounding of each other could pick
 * different experts and report a mismatch that is not one.  Random inputs make such a
 * near-tie improbable; another --seed tells the two apart.
 *
 * This header is verify/'s face: the command line (cmd/) includes it and nothing else of
 * verify/; a whole run is tps_verify_run (driver/run.h). */
#ifndef TPS_VERIFY_H
#define TPS_VERIFY_H

#include "backends/backend.h"
#include "driver/layer_bytes.h"
#include "driver/pass.h"
#include "driver/run.h"
#include "driver/whole.h"
#include "load/names.h"
#include "load/source.h"
#include "math/tensor.h"
#include "ranks/comm.h"
#include "ranks/rank.h"

#endif
