/* Verify backends: which process and which device runs each rank of the sharded pass.
 *
 *   cpu,  local: tps_vrank_run's threads (verify/rank.c), the reference backend.
 *   cpu,  mpi:   this process is one rank (tps_vrank_one), the all-reduce is MPI_Allreduce.
 *   cuda, local: every rank in this process, one host thread and one GPU per rank, NCCL
 *                communicators from ncclCommInitAll; with emulate, more ranks than GPUs
 *                run in turn, joined by a reduction on the device.
 *   cuda, mpi:   this process is one rank on the GPU of its node-local rank, NCCL set up
 *                from a unique id rank 0 broadcasts over MPI (with emulate and fewer GPUs
 *                than processes on a node: joined by MPI_Allreduce through the host).
 * The host side here loads each rank's slices, checks their shapes and hands the plugin
 * plain host tensors; the comparison with the reference stays in verify/verify.c, which
 * under MPI sees every rank's outputs gathered to rank 0.
 *
 * Plugins (verify/plugin.h says why they are plugins) are looked for, in order, in
 *   $TPSHARD_PLUGIN_DIR;
 *   the build directory, when the running binary is the one at the top of the source
 *     tree that built it (a developer's ./tpshard uses the plugins built with it, never
 *     an older installed copy);
 *   <binary's directory>/../lib/tpshard (a relocated install);
 *   $(PREFIX)/lib/tpshard, where `make install` puts them.
 * The MPI plugin is opened RTLD_GLOBAL: Open MPI dlopens its own components, which
 * need libmpi's symbols in the global scope. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/base/checked.h"
#include "plugin.h"

struct tps_vbackend {
    tps_vbackend_config cfg;
    bool mpi;
    void *mpi_dl, *cuda_dl;
    const tps_mpi_api *mpiapi;
    const tps_cuda_api *cuda;
    void *cuda_ctx;
    bool mpi_inited;
    int prank, psize, local_rank, local_size;
    bool agreed, elsewhere; /* a failure was agreed; it was another process's */
    bool broken;            /* an MPI call failed: no further collective may be entered */
    uint64_t T;
    uint64_t devices, ranks_per_device;
    bool nccl;
    char desc[320];
    tps_vcomm hostcomm;
};

/* ---- finding and loading plugins ---- */

static bool exe_dir(char *buf, size_t size)
{
    ssize_t len = readlink("/proc/self/exe", buf, size - 1);
    if (len <= 0) return false;
    buf[len] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return false;
    *slash = 0;
    return true;
}

typedef struct plugin_dirs {
    const char *dir[5]; /* NULL-terminated, in search order */
    char exe[PATH_MAX], rel[PATH_MAX + 32];
} plugin_dirs;

static void find_plugin_dirs(plugin_dirs *p)
{
    size_t k = 0;
    const char *env = getenv("TPSHARD_PLUGIN_DIR");
    if (env && *env) p->dir[k++] = env;
    if (exe_dir(p->exe, sizeof p->exe)) {
#if defined(TPS_SOURCE_TOP) && defined(TPS_BUILD_DIR)
        char *top = realpath(TPS_SOURCE_TOP, NULL), *here = realpath(p->exe, NULL);
        if (top && here && strcmp(top, here) == 0) p->dir[k++] = TPS_BUILD_DIR;
        free(top);
        free(here);
#endif
        snprintf(p->rel, sizeof p->rel, "%s/../lib/tpshard", p->exe);
        p->dir[k++] = p->rel;
    }
#ifdef TPS_PLUGIN_DIR
    p->dir[k++] = TPS_PLUGIN_DIR;
#endif
    p->dir[k] = NULL;
}

/* Opens the first `file` found; on failure err says where it looked and why. */
static tps_status load_plugin(const char *file, int flags, const char *what, void **out, tps_error *err)
{
    plugin_dirs *dirs = malloc(sizeof *dirs);
    char path[PATH_MAX + 64], tried[768] = "", why[512] = "";
    if (!dirs) return tps_fail_oom(err, "the plugin search");
    find_plugin_dirs(dirs);
    for (size_t i = 0; dirs->dir[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dirs->dir[i], file);
        size_t len = strlen(tried);
        snprintf(tried + len, sizeof tried - len, "%s%s", len ? ", " : "", dirs->dir[i]);
        if (access(path, F_OK) != 0) continue;
        void *h = dlopen(path, flags);
        if (h) {
            free(dirs);
            *out = h;
            return TPS_OK;
        }
        /* Found but not loadable: usually its runtime (libcudart, libnccl, libmpi) is missing. */
        snprintf(why, sizeof why, "%s", dlerror());
        break;
    }
    free(dirs);
    if (*why)
        return tps_fail(err, TPS_EBACKEND, "%s: %s cannot be loaded: %s", what, file, why);
    return tps_fail(err, TPS_EBACKEND,
                    "%s is not built into this tpshard: no %s in %s (build it where %s is installed, or set "
                    "TPSHARD_PLUGIN_DIR)",
                    what, file, *tried ? tried : "any plugin directory",
                    strcmp(file, "libtpshard-mpi.so") == 0 ? "MPI (mpicc)" : "CUDA with cuBLAS and NCCL (nvcc)");
}

/* ---- MPI collectives ---- */

static tps_status mpi_fail(tps_vbackend *be, tps_error *err, const char *what, int rc, const char *msg)
{
    be->broken = true;
    return tps_fail(err, TPS_EIO, "rank %d: %s failed (MPI error %d): %s", be->prank, what, rc, msg);
}

static tps_status mpi_allreduce(tps_vcomm *c, float *buf, size_t n, tps_error *err)
{
    tps_vbackend *be = c->impl;
    char msg[256] = "";
    int rc = be->mpiapi->allreduce_sum_f32(buf, n, msg, sizeof msg);
    return rc ? mpi_fail(be, err, "MPI_Allreduce", rc, msg) : TPS_OK;
}

bool tps_vbackend_multi(const tps_vbackend *be)
{
    return be && be->mpi;
}

uint64_t tps_vbackend_rank(const tps_vbackend *be)
{
    return be && be->mpi ? (uint64_t)be->prank : 0;
}

tps_status tps_vbackend_agree(tps_vbackend *be, tps_status st, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return st;
    int v = (int)st;
    char msg[256] = "";
    int rc = be->mpiapi->allreduce_max_int(&v, msg, sizeof msg);
    if (rc) {
        /* A broken collective cannot be agreed on: nothing more is sent. */
        be->agreed = true;
        return mpi_fail(be, err, "MPI_Allreduce of the status", rc, msg);
    }
    if (v == TPS_OK) return TPS_OK;
    be->agreed = true;
    if (st == TPS_OK) {
        be->elsewhere = true;
        tps_fail(err, (tps_status)v, "rank %d stopped: another rank failed (status %d, %s; its process says why)",
                 be->prank, v, tps_status_name((tps_status)v));
    }
    return (tps_status)v;
}

tps_status tps_vbackend_bcast(tps_vbackend *be, void *buf, size_t n, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return TPS_OK;
    char msg[256] = "";
    int rc = be->mpiapi->bcast(buf, n, 0, msg, sizeof msg);
    return rc ? mpi_fail(be, err, "MPI_Bcast", rc, msg) : TPS_OK;
}

/* ---- open, start, finish, close ---- */

static bool mpi_env(char *which, size_t size)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            snprintf(which, size, "%s=%s", vars[i], v);
            return true;
        }
    }
    return false;
}

tps_status tps_vbackend_open(const tps_vbackend_config *cfg, tps_vbackend **out, tps_error *err)
{
    tps_status st = TPS_OK;
    *out = NULL;
    tps_vbackend *be = calloc(1, sizeof *be);
    if (!be) return tps_fail_oom(err, "the verify backend");
    be->cfg = *cfg;
    be->psize = 1;
    be->local_size = 1;
    char env[96] = "";
    be->mpi = cfg->launcher == TPS_VLAUNCH_MPI || (cfg->launcher == TPS_VLAUNCH_AUTO && mpi_env(env, sizeof env));
    if (be->mpi) {
        char what[160];
        snprintf(what, sizeof what, "%s", *env ? "started by an MPI launcher (" : "the MPI launcher");
        if (*env) snprintf(what + strlen(what), sizeof what - strlen(what), "%s), but MPI", env);
        TPS_CHECK(load_plugin("libtpshard-mpi.so", RTLD_NOW | RTLD_GLOBAL, what, &be->mpi_dl, err));
        tps_mpi_plugin_fn get = (tps_mpi_plugin_fn)(uintptr_t)dlsym(be->mpi_dl, TPS_MPI_PLUGIN_SYMBOL);
        be->mpiapi = get ? get(TPS_PLUGIN_ABI) : NULL;
        if (!be->mpiapi) {
            st = tps_fail(err, TPS_EBACKEND, "libtpshard-mpi.so is from another tpshard build (ABI %d expected)",
                          TPS_PLUGIN_ABI);
            goto cleanup;
        }
        char msg[256] = "";
        int rc = be->mpiapi->init(&be->prank, &be->psize, &be->local_rank, &be->local_size, msg, sizeof msg);
        if (rc) {
            st = tps_fail(err, TPS_EBACKEND, "MPI_Init failed (MPI error %d): %s", rc, msg);
            goto cleanup;
        }
        be->mpi_inited = true;
        be->hostcomm = (tps_vcomm){.rank = (uint64_t)be->prank, .size = (uint64_t)be->psize,
                                   .allreduce_sum = mpi_allreduce, .impl = be};
    }
    if (cfg->device == TPS_VDEV_CUDA) {
        TPS_CHECK(load_plugin("libtpshard-cuda.so", RTLD_NOW | RTLD_LOCAL, "the cuda backend", &be->cuda_dl, err));
        tps_cuda_plugin_fn get = (tps_cuda_plugin_fn)(uintptr_t)dlsym(be->cuda_dl, TPS_CUDA_PLUGIN_SYMBOL);
        const size_t sizes[] = TPS_CUDA_ABI_SIZES;
        be->cuda = get ? get(TPS_PLUGIN_ABI, sizes, sizeof sizes / sizeof sizes[0]) : NULL;
        if (!be->cuda) {
            st = tps_fail(err, TPS_EBACKEND, "libtpshard-cuda.so is from another tpshard build (ABI %d expected)",
                          TPS_PLUGIN_ABI);
            goto cleanup;
        }
    }
    *out = be;
    return TPS_OK;
cleanup:
    tps_vbackend_close(be);
    return st;
}

static tps_status start_cuda(tps_vbackend *be, uint64_t T, tps_error *err)
{
    tps_status st = TPS_OK;
    int count = 0;
    char dev[200] = "";
    st = be->cuda->devices(&count, dev, sizeof dev, err);
    /* Ranks that share a GPU: all of them in one process; under MPI, a node's processes
     * beyond its GPU count. */
    uint64_t need = be->mpi ? (uint64_t)be->local_size : T;
    bool share = st == TPS_OK && (uint64_t)count < need;
    if (share && !be->cfg.emulate)
        st = tps_fail(err, TPS_EBACKEND,
                      "%llu ranks%s need %llu GPUs, %d found (%s); --emulate runs them in turn on the GPUs there are "
                      "(NCCL is then not exercised)",
                      (unsigned long long)need, be->mpi ? " on this node" : "", (unsigned long long)need, count, dev);
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    if (be->mpi) { /* NCCL needs every process on a GPU of its own */
        int s = share;
        char msg[256] = "";
        int rc = be->mpiapi->allreduce_max_int(&s, msg, sizeof msg);
        if (rc) return mpi_fail(be, err, "MPI_Allreduce", rc, msg);
        share = s != 0;
    }
    unsigned char id[TPS_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    if (be->mpi && !share) {
        if (be->prank == 0) st = be->cuda->nccl_id(id, err);
        st = tps_vbackend_agree(be, st, err);
        if (st == TPS_OK) st = tps_vbackend_bcast(be, id, sizeof id, err);
        if (st != TPS_OK) return st;
    }
    tps_cuda_setup s = {.T = T, .first = be->mpi ? (uint64_t)be->prank : 0, .count = be->mpi ? 1 : T,
                        .local_rank = be->mpi ? be->local_rank : -1, .emulate = share,
                        .nccl_id = be->mpi && !share ? id : NULL, .host_comm = be->mpi ? &be->hostcomm : NULL};
    st = be->cuda->open(&s, &be->cuda_ctx, err);
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    uint64_t used = (uint64_t)count < need ? (uint64_t)count : need;
    be->devices = used;
    be->ranks_per_device = (need + used - 1) / used;
    be->nccl = !share;
    if (!share)
        snprintf(be->desc, sizeof be->desc, "cuda (%llu ranks, one GPU each%s, NCCL all-reduce; %s)",
                 (unsigned long long)T, be->mpi ? ", one MPI process each" : "", dev);
    else
        snprintf(be->desc, sizeof be->desc,
                 "cuda, emulated (%llu ranks on %llu GPU%s, %llu per GPU%s; NCCL NOT exercised: all-reduce %s; %s)",
                 (unsigned long long)T, (unsigned long long)used, used == 1 ? "" : "s",
                 (unsigned long long)be->ranks_per_device, be->mpi ? " per node" : ", run in turn",
                 be->mpi ? "by MPI through the host" : "on the device", dev);
    return TPS_OK;
}

tps_status tps_vbackend_start(tps_vbackend *be, uint64_t T, tps_status st, tps_error *err)
{
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    be->T = T;
    /* Every process sees this alike: rank 0 says it, the others stop quietly. */
    if (be->mpi && (uint64_t)be->psize != T && be->prank == 0)
        st = tps_fail(err, TPS_EARG,
                      "this MPI job has %d process%s but the shard set has tp %llu: one process per rank (mpirun -np "
                      "%llu)",
                      be->psize, be->psize == 1 ? "" : "es", (unsigned long long)T, (unsigned long long)T);
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    if (be->cfg.device == TPS_VDEV_CUDA) return start_cuda(be, T, err);
    if (be->mpi)
        snprintf(be->desc, sizeof be->desc, "cpu over MPI (%d processes, one rank each, MPI_Allreduce)", be->psize);
    else
        snprintf(be->desc, sizeof be->desc, "cpu (threads)");
    return TPS_OK;
}

void tps_vbackend_get_info(const tps_vbackend *be, tps_vbackend_info *out)
{
    memset(out, 0, sizeof *out);
    out->processes = 1;
    if (!be) {
        out->device = "cpu";
        out->launcher = "threads";
        snprintf(out->desc, sizeof out->desc, "cpu (threads)");
        return;
    }
    out->device = be->cfg.device == TPS_VDEV_CUDA ? "cuda" : "cpu";
    out->launcher = be->mpi ? "mpi" : be->cfg.device == TPS_VDEV_CUDA ? "local" : "threads";
    out->rank = (uint64_t)be->prank;
    out->processes = (uint64_t)be->psize;
    out->devices = be->devices;
    out->ranks_per_device = be->ranks_per_device;
    out->nccl = be->nccl;
    snprintf(out->desc, sizeof out->desc, "%s", be->desc);
}

bool tps_vbackend_is_root(const tps_vbackend *be)
{
    return tps_vbackend_rank(be) == 0;
}

bool tps_vbackend_holds_rank(const tps_vbackend *be, uint64_t r)
{
    return !tps_vbackend_multi(be) || r == (uint64_t)be->prank;
}

tps_status tps_vbackend_finish(tps_vbackend *be, tps_status st, tps_error *err)
{
    if (!tps_vbackend_multi(be) || be->agreed) return st;
    return tps_vbackend_agree(be, st, err);
}

bool tps_vbackend_failed_elsewhere(const tps_vbackend *be)
{
    return be && be->elsewhere;
}

void tps_vbackend_close(tps_vbackend *be)
{
    if (!be) return;
    if (be->cuda_ctx) be->cuda->close(be->cuda_ctx);
    /* The CUDA plugin stays loaded: unloading libraries that started driver threads is
     * not safe, and the process is about to end. */
    if (be->mpi_inited) {
        /* After an agreed failure, a last collective once every process has written its
         * report: Open MPI aborts the job at the first non-zero exit and kills the processes
         * still running, so the one that failed must have written its message before any
         * other may leave.  (Every process knows of an agreed failure, so all enter it; after
         * a failed MPI call none does.) */
        if (tps_vbackend_multi(be) && be->agreed && !be->broken) {
            fflush(stdout);
            fflush(stderr);
            int v = 0;
            char msg[256];
            be->mpiapi->allreduce_max_int(&v, msg, sizeof msg);
        }
        be->mpiapi->finalize();
    }
    free(be);
}

/* ---- the pass ---- */

/* One rank's results as sent to rank 0: the flags, then its four float arrays. */
typedef struct wire_head {
    int32_t bad[TPS_VSTAGE_COUNT];
    int32_t min_dtype;
    int32_t pad;
    double upload_bytes, upload_seconds, layer_seconds;
    char why[TPS_VSTAGE_COUNT][512];
} wire_head;

static float **wire_arrays(vrank_out *o, float *arr[4])
{
    arr[0] = o->partial[0], arr[1] = o->partial[1], arr[2] = o->out[0], arr[3] = o->out[1];
    return arr;
}

/* Gathers every process's outs[own] into outs[0..T) on rank 0, and the slowest rank's
 * times into stats. */
static tps_status gather_outs(tps_vbackend *be, uint64_t T, size_t nh, vrank_out *outs, vstats *stats, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t one = sizeof(wire_head) + 4 * nh * sizeof(float), all = 0;
    uint64_t all64 = 0;
    unsigned char *send = NULL, *recv = NULL;
    bool root = be->prank == 0;
    if (one > (size_t)INT32_MAX || !tps_mul_u64(one, T, &all64) || !tps_u64_to_size(all64, &all))
        st = tps_fail(err, TPS_EINVALID, "%zu bytes of one rank's outputs are too many for MPI_Gather: fewer --tokens",
                      one);
    if (st == TPS_OK) {
        send = malloc(one);
        if (root) recv = malloc(all);
        for (uint64_t r = 0; root && r < T && recv; r++)
            if (r != (uint64_t)be->prank && tps_vrank_out_alloc(&outs[r], nh, err) != TPS_OK) {
                st = TPS_EIO;
                break;
            }
        if (st == TPS_OK && (!send || (root && !recv))) st = tps_fail_oom(err, "the gathered outputs");
    }
    TPS_CHECK(tps_vbackend_agree(be, st, err));
    vrank_out *me = &outs[be->prank];
    wire_head hd;
    memset(&hd, 0, sizeof hd);
    for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
        hd.bad[s] = me->bad[s];
        memcpy(hd.why[s], me->why[s], sizeof hd.why[s]);
    }
    hd.min_dtype = (int32_t)me->min_dtype;
    hd.upload_bytes = stats->upload_bytes;
    hd.upload_seconds = stats->upload_seconds;
    hd.layer_seconds = stats->layer_seconds;
    memcpy(send, &hd, sizeof hd);
    float *arr[4];
    wire_arrays(me, arr);
    for (int i = 0; i < 4; i++) memcpy(send + sizeof hd + (size_t)i * nh * sizeof(float), arr[i], nh * sizeof(float));
    char msg[256] = "";
    int rc = be->mpiapi->gather(send, one, recv, 0, msg, sizeof msg);
    if (rc) {
        st = mpi_fail(be, err, "MPI_Gather", rc, msg);
        be->agreed = true;
        goto cleanup;
    }
    if (root) {
        *stats = (vstats){0, 0, 0};
        for (uint64_t r = 0; r < T; r++) {
            const unsigned char *p = recv + r * one;
            memcpy(&hd, p, sizeof hd);
            vrank_out *o = &outs[r];
            for (int s = 0; s < TPS_VSTAGE_COUNT; s++) {
                o->bad[s] = hd.bad[s] != 0;
                memcpy(o->why[s], hd.why[s], sizeof o->why[s]);
                o->why[s][sizeof o->why[s] - 1] = 0;
            }
            o->min_dtype = (tps_dtype)hd.min_dtype;
            wire_arrays(o, arr);
            for (int i = 0; i < 4; i++) memcpy(arr[i], p + sizeof hd + (size_t)i * nh * sizeof(float), nh * sizeof(float));
            stats->upload_bytes += hd.upload_bytes;
            if (hd.upload_seconds > stats->upload_seconds) stats->upload_seconds = hd.upload_seconds;
            if (hd.layer_seconds > stats->layer_seconds) stats->layer_seconds = hd.layer_seconds;
        }
    }
cleanup:
    free(send);
    free(recv);
    return st;
}

/* The GPU takes BF16, F16 and F32 operands; other float dtypes (F64, FP8) go up as F32,
 * which holds every FP8 value exactly and is what the CPU ranks compute in anyway. */
static tps_status widen(tps_vt *t, tps_error *err)
{
    if (!t->data || t->dtype == TPS_DT_BF16 || t->dtype == TPS_DT_F16 || t->dtype == TPS_DT_F32) return TPS_OK;
    size_t n;
    if (!tps_u64_to_size(t->nelem, &n)) return tps_fail_oom(err, t->name);
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return tps_fail_oom(err, t->name);
    for (size_t i = 0; i < n; i++) {
        double v = 0;
        tps_dtype_to_f64(t->dtype, t->data, i, &v); /* the dtype was checked at load */
        f[i] = (float)v;
    }
    free(t->data);
    t->data = f;
    t->dtype = TPS_DT_F32;
    return TPS_OK;
}

/* Loads rank r's slices for the GPU and decides, as rank.c does, which stages it can run. */
static tps_status prepare_cuda_rank(const tps_block *b, const vdims *d, uint64_t layer, uint64_t T, uint64_t r,
                                    const tps_vsource *src, vlayer *l, vrank_out *o, tps_cuda_rank *cr,
                                    tps_error *err)
{
    tps_status st = TPS_OK;
    vshare s;
    tps_vshare_of(d, T, r, &s);
    TPS_CHECK(tps_vlayer_load(b, layer, d->experts, src, l, err));
    tps_vrank_note_dtypes(o, l);
    for (int i = 0; i < TPS_ROLE_COUNT; i++) TPS_CHECK(widen(&l->t[i], err));
    for (uint64_t i = 0; i < l->nex * TPS_ROLE_COUNT; i++) TPS_CHECK(widen(&l->ex[i], err));
    memset(cr, 0, sizeof *cr);
    cr->rank = r;
    cr->l = l;
    tps_vattn_map_local(b, d, &s, &cr->am);
    tps_vmlp_map_local(d, &s, &cr->mm);
    for (int stage = 0; stage < TPS_VSTAGE_COUNT; stage++) {
        char why[sizeof o->why[0] - 32];
        if (tps_vcheck_shapes(b, d, &s, l, stage == TPS_VSTAGE_MLP, why, sizeof why)) continue;
        o->bad[stage] = cr->bad[stage] = true;
        snprintf(o->why[stage], sizeof o->why[stage], "rank %llu holds %s", (unsigned long long)r, why);
    }
    for (int stage = 0; stage < TPS_VSTAGE_COUNT; stage++) {
        cr->partial[stage] = o->partial[stage];
        cr->out[stage] = o->out[stage];
    }
cleanup:
    return st;
}

static tps_status run_cuda(tps_vbackend *be, const tps_block *b, const vdims *d, uint64_t layer, uint64_t T,
                           const tps_vsource *ranks, size_t n, const float *x, vrank_out *outs, vstats *stats,
                           tps_error *err)
{
    tps_status st = TPS_OK;
    uint64_t first = be->mpi ? (uint64_t)be->prank : 0, count = be->mpi ? 1 : T;
    size_t nh = n * (size_t)d->hidden;
    vlayer *ls = calloc(count, sizeof *ls);
    tps_cuda_rank *cr = calloc(count, sizeof *cr);
    if (!ls || !cr) st = tps_fail_oom(err, "the GPU ranks");
    for (uint64_t i = 0; i < count && st == TPS_OK; i++) {
        uint64_t r = first + i;
        st = tps_vrank_out_alloc(&outs[r], nh, err);
        if (st == TPS_OK) st = prepare_cuda_rank(b, d, layer, T, r, &ranks[r], &ls[i], &outs[r], &cr[i], err);
    }
    /* Under MPI every process learns that one could not load before any NCCL call. */
    TPS_CHECK(tps_vbackend_agree(be, st, err));
    st = be->cuda->run(be->cuda_ctx, b, d, n, x, cr, stats, err);
    TPS_CHECK(tps_vbackend_agree(be, st, err));
cleanup:
    for (uint64_t i = 0; ls && i < count; i++) tps_vlayer_release(&ls[i]);
    free(ls);
    free(cr);
    return st;
}

tps_status tps_vbackend_run(tps_vbackend *be, const tps_block *b, const vdims *d, uint64_t layer, uint64_t T,
                        const tps_vsource *ranks, size_t n, const float *x, vrank_out *outs, vstats *stats,
                        const tps_verify_opts *vo, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = n * (size_t)d->hidden;
    *stats = (vstats){0, 0, 0};
    if (!be || (!be->mpi && be->cfg.device == TPS_VDEV_CPU))
        return tps_vrank_run(b, d, layer, T, ranks, n, x, outs, vo, err);
    if (be->cfg.device == TPS_VDEV_CUDA) {
        tps_vstage(vo, "ranks on the GPUs");
        TPS_CHECK(run_cuda(be, b, d, layer, T, ranks, n, x, outs, stats, err));
    } else {
        uint64_t r = (uint64_t)be->prank;
        bool elsewhere = false;
        st = tps_vrank_out_alloc(&outs[r], nh, err);
        TPS_CHECK(tps_vbackend_agree(be, st, err));
        st = tps_vrank_one(b, d, layer, &ranks[r], n, x, &be->hostcomm, &outs[r], &elsewhere, vo, err);
        /* A rank stopped by another's failure defers to that one's status and message. */
        TPS_CHECK(tps_vbackend_agree(be, elsewhere ? TPS_OK : st, err));
        if (st != TPS_OK) { /* cannot happen after an agreed OK: every rank stops together */
            st = tps_fail(err, st, "rank %llu stopped with status %d", (unsigned long long)r, (int)st);
            goto cleanup;
        }
    }
    if (be->mpi) TPS_CHECK(gather_outs(be, T, nh, outs, stats, err));
cleanup:
    return st;
}

tps_status tps_vbackend_each(tps_vbackend *be, uint64_t T, size_t cap, tps_vrank_fn fn, void *arg, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return tps_vrank_each_thread(T, cap, fn, arg, err);
    tps_status st = fn(arg, &be->hostcomm, err);
    return tps_vbackend_agree(be, st, err);
}

tps_status tps_vbackend_allreduce(tps_vbackend *be, float *buf, size_t n, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return TPS_OK;
    return be->hostcomm.allreduce_sum(&be->hostcomm, buf, n, err);
}
