/* Verify backends: which process and which device runs each rank of the sharded pass.
 *
 *   cpu,  local:  tps_vrank_run's threads (verify/ranks/rank.c), the host computing.
 *   cpu,  mpi:    this process is one rank (tps_vrank_one), the all-reduce is MPI_Allreduce.
 *   cuda, devsim: the same threads (or MPI process), each rank's matrices on its device and
 *                 every GEMM there (verify/ranks/device.h); cuda: one GPU per rank, NCCL
 *                 communicators from ncclCommInitAll (one process) or from a unique id rank 0
 *                 broadcasts over MPI; with emulate, ranks share the GPUs there are and are
 *                 summed on the device in rank order (one process) or by MPI through the
 *                 host.  devsim: the device primitives in host memory (libtpshard-devsim.so),
 *                 which runs everything of the GPU path but the CUDA calls in every make test.
 * The layer math is the same for all of them (verify/math/ops_tmpl.h); the comparison with the
 * reference stays in verify/driver/pass.c, which under MPI sees every rank's outputs gathered to
 * rank 0.
 *
 * Plugins (verify/ranks/plugin.h says why they are plugins) are looked for, in order, in
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

#include "../../lib/base/checked.h"
#include "../math/blas.h"
#include "../math/ops.h"
#include "../math/ref_kernel.h"
#include "../math/util.h"
#include "../ranks/device.h"
#include "../ranks/plugin.h"
#include "backend.h"

struct tps_vbackend {
    tps_vbackend_config cfg;
    bool mpi;
    void *mpi_dl, *dev_dl;
    const tps_mpi_api *mpiapi;
    const tps_dev_api *devapi; /* cuda or devsim; NULL: cpu */
    tps_vdev *vdev;            /* after start */
    bool host_sums;            /* MPI with a device: the processes are summed by MPI, not the device */
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
                    strcmp(file, "libtpshard-mpi.so") == 0    ? "MPI (mpicc)"
                    : strcmp(file, "libtpshard-cuda.so") == 0 ? "CUDA with cuBLAS and NCCL (nvcc)"
                                                              : "a C compiler (every make builds it)");
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
    if (cfg->device != TPS_VDEV_CPU) {
        bool cuda = cfg->device == TPS_VDEV_CUDA;
        const char *file = cuda ? "libtpshard-cuda.so" : "libtpshard-devsim.so";
        TPS_CHECK(load_plugin(file, RTLD_NOW | RTLD_LOCAL, cuda ? "the cuda backend" : "the devsim backend",
                              &be->dev_dl, err));
        tps_dev_plugin_fn get = (tps_dev_plugin_fn)(uintptr_t)dlsym(be->dev_dl, TPS_DEV_PLUGIN_SYMBOL);
        const size_t sizes[] = TPS_DEV_ABI_SIZES;
        be->devapi = get ? get(TPS_PLUGIN_ABI, sizes, sizeof sizes / sizeof sizes[0]) : NULL;
        if (!be->devapi) {
            const unsigned *abi = dlsym(be->dev_dl, TPS_DEV_PLUGIN_ABI_SYMBOL);
            char speaks[48];
            if (abi && *abi != TPS_PLUGIN_ABI) snprintf(speaks, sizeof speaks, "plugin ABI %u", *abi);
            else if (abi) snprintf(speaks, sizeof speaks, "ABI %u with other structure sizes", *abi);
            else snprintf(speaks, sizeof speaks, "a plugin ABI older than 3");
            char dir[PATH_MAX] = "?";
            dlinfo(be->dev_dl, RTLD_DI_ORIGIN, dir);
            st = tps_fail(err, TPS_EBACKEND,
                          "%s/%s is from another tpshard build: it speaks %s, this tpshard plugin ABI %d (rebuild "
                          "the plugin from this tree, or point TPSHARD_PLUGIN_DIR at a matching one)",
                          dir, file, speaks, TPS_PLUGIN_ABI);
            goto cleanup;
        }
    }
    *out = be;
    return TPS_OK;
cleanup:
    tps_vbackend_close(be);
    return st;
}

static void describe_kernels(const char *device, tps_vbackend_info *out);

/* The directory a loaded plugin came from, for the probe's report. */
static const char *plugin_origin(void *dl, char dir[PATH_MAX])
{
    snprintf(dir, PATH_MAX, "?");
    dlinfo(dl, RTLD_DI_ORIGIN, dir);
    return dir;
}

static void probe_device(tps_vdevice device, tps_vbackend_probe *p)
{
    tps_vbackend_config cfg = {device, TPS_VLAUNCH_LOCAL, false};
    tps_vbackend *be = NULL;
    tps_error err;
    tps_error_clear(&err);
    char dev[200] = "", dir[PATH_MAX];
    int count = 0;
    if (tps_vbackend_open(&cfg, &be, &err) != TPS_OK ||
        be->devapi->devices(&count, dev, sizeof dev, &err) != TPS_OK) {
        snprintf(p->detail, sizeof p->detail, "%s", err.msg);
    } else if (count == 0) {
        snprintf(p->detail, sizeof p->detail, "%s/libtpshard-%s.so loads, but finds no device (%s)",
                 plugin_origin(be->dev_dl, dir), be->devapi->name, dev);
    } else {
        p->usable = true;
        snprintf(p->detail, sizeof p->detail, "%d device%s: %s (%s/libtpshard-%s.so)", count, count == 1 ? "" : "s",
                 dev, plugin_origin(be->dev_dl, dir), be->devapi->name);
    }
    tps_vbackend_close(be);
}

void tps_vbackend_probe_all(tps_vbackend_probe out[TPS_VBACKEND_PROBES])
{
    memset(out, 0, TPS_VBACKEND_PROBES * sizeof *out);
    tps_vbackend_info cpu;
    describe_kernels("cpu", &cpu);
    out[0] = (tps_vbackend_probe){.name = "cpu", .usable = true};
    snprintf(out[0].detail, sizeof out[0].detail, "threads, one a rank; ranks' GEMM: %s; reference: %s", cpu.gemm,
             cpu.reference);
    out[1].name = "devsim";
    probe_device(TPS_VDEV_DEVSIM, &out[1]);
    out[2].name = "cuda";
    probe_device(TPS_VDEV_CUDA, &out[2]);
    out[3].name = "mpi";
    tps_error err;
    tps_error_clear(&err);
    void *dl = NULL;
    char dir[PATH_MAX];
    if (load_plugin("libtpshard-mpi.so", RTLD_NOW | RTLD_LOCAL, "the MPI launcher", &dl, &err) != TPS_OK) {
        snprintf(out[3].detail, sizeof out[3].detail, "%s", err.msg);
        return;
    }
    out[3].usable = true;
    snprintf(out[3].detail, sizeof out[3].detail,
             "%s/libtpshard-mpi.so loads; run verify under the launcher, one process a rank (mpirun -np T)",
             plugin_origin(dl, dir)); /* left loaded, as tps_vbackend_close leaves its plugins */
}

static tps_status start_device(tps_vbackend *be, uint64_t T, tps_error *err)
{
    tps_status st = TPS_OK;
    int count = 0;
    char dev[200] = "";
    const char *what = be->devapi->name;
    bool cuda = be->cfg.device == TPS_VDEV_CUDA;
    st = be->devapi->devices(&count, dev, sizeof dev, err);
    /* Ranks that share a device: all of them in one process; under MPI, a node's processes
     * beyond its device count. */
    uint64_t need = be->mpi ? (uint64_t)be->local_size : T;
    bool share = st == TPS_OK && (uint64_t)count < need;
    if (share && !be->cfg.emulate)
        st = tps_fail(err, TPS_EBACKEND,
                      "%llu ranks%s need %llu %s, %d found (%s); --emulate runs them on the ones there are (%s is "
                      "then not exercised)",
                      (unsigned long long)need, be->mpi ? " on this node" : "", (unsigned long long)need,
                      cuda ? "GPUs" : "devices", count, dev, cuda ? "NCCL" : "the devices' all-reduce");
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    if (be->mpi) { /* a communicator between devices needs every process on a device of its own */
        int s = share;
        char msg[256] = "";
        int rc = be->mpiapi->allreduce_max_int(&s, msg, sizeof msg);
        if (rc) return mpi_fail(be, err, "MPI_Allreduce", rc, msg);
        share = s != 0;
    }
    be->host_sums = be->mpi && (share || !be->devapi->comm_id);
    unsigned char id[TPS_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    if (be->mpi && !be->host_sums) {
        if (be->prank == 0) st = be->devapi->comm_id(id, err);
        st = tps_vbackend_agree(be, st, err);
        if (st == TPS_OK) st = tps_vbackend_bcast(be, id, sizeof id, err);
        if (st != TPS_OK) return st;
    }
    tps_dev_setup s = {.T = T, .first = be->mpi ? (uint64_t)be->prank : 0, .count = be->mpi ? 1 : T,
                       .local_rank = be->mpi ? be->local_rank : -1, .emulate = share,
                       .nccl_id = be->mpi && !be->host_sums ? id : NULL, .host_comm = be->mpi ? &be->hostcomm : NULL};
    st = tps_vdev_open(be->devapi, &s, &be->vdev, err);
    st = tps_vbackend_agree(be, st, err);
    if (st != TPS_OK) return st;
    tps_vdev_ref_attach(be->vdev, 0); /* the reference's float64 GEMMs on this process's first device */
    uint64_t used = (uint64_t)count < need ? (uint64_t)count : need;
    be->devices = used;
    be->ranks_per_device = (need + used - 1) / used;
    be->nccl = cuda && !share;
    const char *unit = cuda ? "GPU" : "device";
    if (!share)
        snprintf(be->desc, sizeof be->desc, "%s (%llu ranks, one %s each%s, %s; %s)", what, (unsigned long long)T,
                 unit, be->mpi ? ", one MPI process each" : "",
                 be->host_sums ? "MPI all-reduce through the host"
                 : cuda        ? "NCCL all-reduce"
                               : "all-reduce over the devices' buffers in rank order",
                 dev);
    else
        snprintf(be->desc, sizeof be->desc,
                 "%s, emulated (%llu ranks on %llu %s%s, %llu per %s%s; %s NOT exercised: all-reduce %s; %s)", what,
                 (unsigned long long)T, (unsigned long long)used, unit, used == 1 ? "" : "s",
                 (unsigned long long)be->ranks_per_device, unit, be->mpi ? " per node" : "",
                 cuda ? "NCCL" : "the one-device-per-rank all-reduce",
                 be->mpi ? "by MPI through the host" : "on the device in rank order", dev);
    size_t len = strlen(be->desc);
    if (len && be->desc[len - 1] == ')')
        snprintf(be->desc + len - 1, sizeof be->desc - (len - 1), "; the reference's GEMMs in float64 on the first %s)",
                 unit);
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
    if (be->devapi) return start_device(be, T, err);
    if (be->mpi)
        snprintf(be->desc, sizeof be->desc, "cpu over MPI (%d processes, one rank each, MPI_Allreduce)", be->psize);
    else
        snprintf(be->desc, sizeof be->desc, "cpu (threads)");
    return TPS_OK;
}

/* The report's gemm and reference lines: a device runs both itself (the reference through
 * the device's float64 GEMM); the CPU's ranks run the BLAS or the plain loops, its reference
 * the host kernel. */
static void describe_kernels(const char *device, tps_vbackend_info *out)
{
    if (strcmp(device, "cpu") != 0) {
        snprintf(out->gemm, sizeof out->gemm, "%s's GEMM", device);
        snprintf(out->reference, sizeof out->reference, "%s's float64 GEMM", device);
        return;
    }
    bool missing;
    snprintf(out->gemm, sizeof out->gemm, "%s", tps_verify_gemm_desc(&missing));
    if (missing) out->blas_searched = tps_blas_searched();
    snprintf(out->reference, sizeof out->reference, "host float64 kernel %s", tps_vref_kernel_name());
}

void tps_vbackend_get_info(const tps_vbackend *be, tps_vbackend_info *out)
{
    memset(out, 0, sizeof *out);
    out->processes = 1;
    describe_kernels(be && be->devapi ? be->devapi->name : "cpu", out);
    if (!be) {
        out->device = "cpu";
        out->launcher = "threads";
        snprintf(out->desc, sizeof out->desc, "cpu (threads)");
        return;
    }
    out->device = be->devapi ? be->devapi->name : "cpu";
    out->launcher = be->mpi ? "mpi" : be->devapi ? "local" : "threads";
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
    tps_vdev_close(be->vdev);
    /* The device plugin stays loaded: unloading libraries that started driver threads is
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

/* This process's comm under MPI: the processes' MPI all-reduce or the devices', with its
 * rank's device when it has one. */
static tps_vcomm process_comm(tps_vbackend *be, uint64_t T)
{
    if (!be->vdev) return be->hostcomm;
    tps_vcomm c = tps_vdev_comm(tps_vdev_rank_of(be->vdev, (uint64_t)be->prank), be->host_sums ? &be->hostcomm : NULL);
    c.size = T;
    return c;
}

tps_status tps_vbackend_run(tps_vbackend *be, const tps_block *b, const vdims *d, uint64_t layer, uint64_t T,
                            const tps_vsource *ranks, size_t n, const float *x, vrank_out *outs, vstats *stats,
                            const tps_verify_opts *vo, tps_error *err)
{
    tps_status st = TPS_OK;
    size_t nh = n * (size_t)d->hidden;
    *stats = (vstats){0, 0, 0};
    double t0 = tps_vnow();
    if (!be || !be->mpi) {
        st = tps_vrank_run(b, d, layer, T, ranks, n, x, be ? be->vdev : NULL, outs, vo, err);
    } else {
        uint64_t r = (uint64_t)be->prank;
        bool elsewhere = false;
        tps_vcomm comm = process_comm(be, T);
        st = tps_vrank_out_alloc(&outs[r], nh, err);
        TPS_CHECK(tps_vbackend_agree(be, st, err));
        st = tps_vrank_one(b, d, layer, &ranks[r], n, x, &comm, &outs[r], &elsewhere, vo, err);
        /* A rank stopped by another's failure defers to that one's status and message. */
        TPS_CHECK(tps_vbackend_agree(be, elsewhere ? TPS_OK : st, err));
        if (st != TPS_OK) { /* cannot happen after an agreed OK: every rank stops together */
            st = tps_fail(err, st, "rank %llu stopped with status %d", (unsigned long long)r, (int)st);
            goto cleanup;
        }
    }
    if (be && be->vdev) {
        tps_vdev_take_stats(be->vdev, &stats->upload_bytes, &stats->upload_seconds);
        stats->layer_seconds = tps_vnow() - t0;
    }
    TPS_CHECK(st);
    if (be && be->mpi) TPS_CHECK(gather_outs(be, T, nh, outs, stats, err));
cleanup:
    return st;
}

tps_status tps_vbackend_each(tps_vbackend *be, uint64_t T, size_t cap, tps_vrank_fn fn, void *arg, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return tps_vrank_each_thread(T, cap, be ? be->vdev : NULL, fn, arg, err);
    tps_vcomm comm = process_comm(be, T);
    tps_status st = fn(arg, &comm, err);
    return tps_vbackend_agree(be, st, err);
}

tps_status tps_vbackend_allreduce(tps_vbackend *be, float *buf, size_t n, tps_error *err)
{
    if (!tps_vbackend_multi(be)) return TPS_OK;
    return be->hostcomm.allreduce_sum(&be->hostcomm, buf, n, err);
}

tps_status tps_vbackend_config_parse(const char *backend, const char *launcher, bool emulate,
                                     tps_vbackend_config *c, tps_error *err)
{
    if (!backend) backend = "cpu";
    memset(c, 0, sizeof *c);
    c->launcher = TPS_VLAUNCH_AUTO;
    if (launcher) {
        if (strcmp(launcher, "local") == 0) c->launcher = TPS_VLAUNCH_LOCAL;
        else if (strcmp(launcher, "mpi") == 0) c->launcher = TPS_VLAUNCH_MPI;
        else if (strcmp(launcher, "auto") != 0)
            return tps_fail(err, TPS_EARG, "unknown launcher '%s' (auto, local or mpi)", launcher);
    }
    if (strcmp(backend, "cuda") == 0) c->device = TPS_VDEV_CUDA;
    else if (strcmp(backend, "devsim") == 0) c->device = TPS_VDEV_DEVSIM;
    else if (strcmp(backend, "mpi") == 0) {
        if (c->launcher == TPS_VLAUNCH_LOCAL)
            return tps_fail(err, TPS_EARG, "--backend mpi runs one rank per MPI process: not with --launcher local");
        c->launcher = TPS_VLAUNCH_MPI;
    } else if (strcmp(backend, "cpu") != 0) {
        return tps_fail(err, TPS_EARG, "unknown backend '%s' (cpu, cuda, devsim or mpi)", backend);
    }
    if (emulate && c->device == TPS_VDEV_CPU)
        return tps_fail(err, TPS_EARG, "--emulate shares devices between ranks: it needs --backend cuda or devsim");
    c->emulate = emulate;
    return TPS_OK;
}
