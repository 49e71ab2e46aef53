/* Backends: where the ranks of the sharded pass run.
 *
 * A backend is a device (cpu: float32 on threads or processes; cuda: the ranks' matrices
 * and GEMMs on GPUs, one per rank, NCCL between them; devsim: the same device primitives
 * in host memory) and a launcher (local: every rank in this process;
 * mpi: this process is one rank of an MPI job, `mpirun -np T tpshard verify ...`).  The
 * CUDA device and the MPI glue live in plugins (libtpshard-cuda.so, libtpshard-mpi.so)
 * loaded only when asked for, so tpshard starts on machines without CUDA or MPI runtime
 * libraries (verify/backends/backend.c says where they are looked for and why).
 *
 * Under MPI every process runs the same commands; the float64 reference, the comparison
 * and the report are rank 0's.  Failures are agreed: every collective step of the pass is
 * entered by every process, and tps_vbackend_finish makes the exit codes the same
 * everywhere (the highest status any process reached). */
#ifndef TPS_VERIFY_BACKENDS_BACKEND_H
#define TPS_VERIFY_BACKENDS_BACKEND_H

#include "../ranks/rank.h"

/* devsim: the device primitives of the cuda backend in host memory (verify/ranks/plugin.h). */
typedef enum tps_vdevice { TPS_VDEV_CPU, TPS_VDEV_CUDA, TPS_VDEV_DEVSIM } tps_vdevice;
typedef enum tps_vlauncher {
    TPS_VLAUNCH_AUTO,  /* mpi when an MPI launcher's variables are set (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) */
    TPS_VLAUNCH_LOCAL, /* every rank in this process */
    TPS_VLAUNCH_MPI
} tps_vlauncher;

typedef struct tps_vbackend_config {
    tps_vdevice device;
    tps_vlauncher launcher;
    bool emulate; /* cuda, devsim: more ranks than devices share them, joined without NCCL */
} tps_vbackend_config;

typedef struct tps_vbackend tps_vbackend;

/* The configuration verify's --backend NAME (cpu when NULL; cuda, devsim, mpi) and
 * --launcher HOW (auto when NULL; local, mpi) ask for, with --emulate.  TPS_EARG, with the
 * message the command prints as a usage error, for a name it does not know or a pair that
 * contradicts itself. */
tps_status tps_vbackend_config_parse(const char *backend, const char *launcher, bool emulate,
                                     tps_vbackend_config *c, tps_error *err);

/* Opens the backend: loads its plugins and, under MPI, joins the job (MPI_Init).
 * TPS_EBACKEND when a plugin or its runtime is missing, with a message saying which. */
tps_status tps_vbackend_open(const tps_vbackend_config *cfg, tps_vbackend **out, tps_error *err);

/* Readies the backend for T ranks: under MPI the job must have T processes (TPS_EARG);
 * cuda finds T GPUs, or fewer with emulate (TPS_EBACKEND otherwise), and sets up NCCL.
 * st is this process's status so far: the first step every process takes together, so a
 * process that failed before it stops the others here. */
tps_status tps_vbackend_start(tps_vbackend *be, uint64_t T, tps_status st, tps_error *err);

typedef struct tps_vbackend_info {
    const char *device;   /* "cpu", "cuda" or "devsim" */
    const char *launcher; /* "threads", "local" or "mpi" */
    uint64_t rank, processes; /* this process (0 of 1 without MPI) */
    uint64_t devices, ranks_per_device; /* cuda after start: GPUs used by this job's node(s) */
    bool nccl; /* all-reduce over NCCL (cuda), else emulated on the device or by MPI */
    char desc[320]; /* one line for the report */
    /* What the ranks' GEMMs and the float64 reference's linears run on, for the report:
     * on the CPU the BLAS found or the plain loops, and the host kernel (verify/math/blas.h,
     * verify/math/ref_kernel.h); on a device its own.  blas_searched: set for a CPU run on the
     * plain loops of a build that looks for a BLAS, where it looked (the command warns). */
    char gemm[192], reference[96];
    const char *blas_searched;
} tps_vbackend_info;

void tps_vbackend_get_info(const tps_vbackend *be, tps_vbackend_info *out);

/* Whether a backend can run here, and on what or why not, without starting it (tpshard
 * backends): cpu always (its GEMM and reference kernel); cuda and devsim open their plugin
 * and count its devices (a machine without a GPU: what the plugin found, and that there is no
 * device); mpi loads its plugin (MPI itself starts under the launcher). */
typedef struct tps_vbackend_probe {
    const char *name;     /* "cpu", "devsim", "cuda", "mpi" */
    bool usable;
    char detail[6144];    /* what it runs on, or why it cannot run (a plugin's path, an error) */
} tps_vbackend_probe;
enum { TPS_VBACKEND_PROBES = 4 };
void tps_vbackend_probe_all(tps_vbackend_probe out[TPS_VBACKEND_PROBES]);

/* Whether this process prints the report (rank 0, or the only process). */
bool tps_vbackend_is_root(const tps_vbackend *be);

/* Whether this process opens rank r's shard file (its own rank under MPI, all otherwise). */
bool tps_vbackend_holds_rank(const tps_vbackend *be, uint64_t r);

/* The status all processes agree on (the highest), unless a failure was agreed already;
 * when it came from another process, err says so and tps_vbackend_failed_elsewhere is
 * true (its process reports why).  Call once at the end, on every path. */
tps_status tps_vbackend_finish(tps_vbackend *be, tps_status st, tps_error *err);
bool tps_vbackend_failed_elsewhere(const tps_vbackend *be);

/* Tears down NCCL and MPI (MPI_Finalize); NULL is fine. */
void tps_vbackend_close(tps_vbackend *be);

/* ---- backends (verify/backends/backend.c) ---- */

/* fn on the ranks this process runs: every rank on threads (cpu and cuda in one process;
 * the steps outside the layers run on the host), or this process's rank under MPI.  Every
 * process returns the same status. */
/* Under MPI: MPI_Allreduce of buf between the processes (sum); one process: nothing. */
tps_status tps_vbackend_allreduce(tps_vbackend *be, float *buf, size_t n, tps_error *err);

tps_status tps_vbackend_each(tps_vbackend *be, uint64_t T, size_t cap, tps_vrank_fn fn, void *arg, tps_error *err);

/* What a backend measured of one layer's pass (verify.h, tps_verify_result). */
typedef struct vstats {
    double upload_bytes, upload_seconds, layer_seconds;
} vstats;

/* Whether the pass spans several processes (MPI); be may be NULL (CPU threads). */
bool tps_vbackend_multi(const tps_vbackend *be);

/* This process's rank under MPI, else 0. */
uint64_t tps_vbackend_rank(const tps_vbackend *be);

/* The highest status of all processes (st itself in one process).  When it is another
 * process's failure, err says so; the agreement is recorded for tps_vbackend_finish. */
tps_status tps_vbackend_agree(tps_vbackend *be, tps_status st, tps_error *err);

/* Rank 0's n bytes of buf into every process's buf. */
tps_status tps_vbackend_bcast(tps_vbackend *be, void *buf, size_t n, tps_error *err);

/* The sharded pass of one layer: runs the ranks this process holds, and leaves every
 * rank's results in outs[0..T) on rank 0 (allocated there, released by the caller with
 * tps_vrank_out_release; elsewhere outs is only written for the process's own rank).  Every
 * process enters it and returns the same status. */
tps_status tps_vbackend_run(tps_vbackend *be, const tps_block *b, const vdims *d, uint64_t layer, uint64_t T,
                        const tps_vsource *ranks, size_t n, const float *x, vrank_out *outs, vstats *stats,
                        const tps_verify_opts *vo, tps_error *err);

#endif
