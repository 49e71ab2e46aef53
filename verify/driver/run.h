/* One verify run, from what the command line asked to what it found: the backend opened
 * and started, the shard set, its layout and block, the ranks' sources, the layers (or the
 * whole model) run and compared, the --json report and the --dump-reference / --dump-logits
 * files written.  The command (cmd/cmd_verify.c) parses the options, shows the run through
 * an observer as it goes (its header, progress, a line per layer) and prints what it returns;
 * under MPI every process runs this, and the outcome says whether this one reports. */
#ifndef TPS_VERIFY_RUN_H
#define TPS_VERIFY_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "../backends/backend.h"
#include "lib/base/status.h"
#include "lib/layout/block.h"
#include "lib/set/manifest.h"
#include "pass.h"
#include "whole.h"

typedef struct tps_verify_request {
    const char *dir;              /* the shard set */
    const char *source, *config;  /* --source, --config, or NULL */
    const char *layer;            /* --layer as written (NULL: every layer), for the messages */
    uint64_t first;               /* with layer: its number (UINT64_MAX when too large to parse) */
    bool whole;                   /* --whole-model */
    uint64_t tokens, seed;
    double rtol, atol;            /* <= 0: by the shards' dtype, by the reference's RMS */
    const char *dump, *dump_logits; /* --dump-reference, --dump-logits, or NULL */
    tps_vbackend_config backend;  /* tps_vbackend_config_parse */
    bool json;                    /* build the --json report (outcome.json) */
} tps_verify_request;

/* What the run is about, once the backend has started. */
typedef struct tps_verify_run_info {
    const char *dir, *source;
    const char *config;            /* where the hyper-parameters came from */
    uint64_t tp, first, count;     /* the layers verified: [first, first + count) */
    const tps_block *block;
    const tps_manifest *manifest;
    const tps_vbackend_info *backend;
    bool root;                     /* this process reports (rank 0, or the only one) */
} tps_verify_run_info;

typedef struct tps_verify_outcome tps_verify_outcome;

/* Told as the run goes; every member may be NULL.  opened: the backend is open, and says
 * whether this process reports (under MPI only rank 0 does).  at: layer i of those verified starts
 * (done false) or has finished; layers_end: the layers are over (the whole model's head
 * follows); report: every comparison is made and the --json text built, before the dump is
 * written and the mismatch decided. */
typedef struct tps_verify_observer {
    void *arg;
    void (*opened)(void *arg, bool root);
    void (*begin)(void *arg, const tps_verify_run_info *run);
    void (*at)(void *arg, uint64_t i, bool done);
    void (*stage)(void *arg, const char *stage);
    void (*layer)(void *arg, const tps_verify_result *r);
    void (*layers_end)(void *arg);
    void (*whole)(void *arg, const tps_verify_whole *w);
    void (*report)(void *arg, const tps_verify_outcome *out);
} tps_verify_observer;

struct tps_verify_outcome {
    bool root;            /* this process reports; true until the backend says otherwise */
    bool started;         /* the run got as far as its layers (begin was told) */
    uint64_t tp, count;   /* ranks, layers asked for */
    uint64_t layers_run, checked_tensors, checked_bytes, mismatched;
    bool all_pass;        /* every layer run matched */
    uint64_t failed_layer;
    tps_verify_result bad; /* the first layer that differs (its buffers dropped) */
    tps_verify_whole whole; /* with --whole-model */
    const char *json;     /* the --json report, or NULL */
    bool mismatch;        /* the run got to its verdict, and a layer or the whole model differs: */
    char mismatch_line[2048]; /* the first that does, its stage, errors and the rank blamed */
    bool report_error;    /* the error is this process's to print: not a mismatch said already,
                             nor another process's failure */
    struct tps_verify_state *state; /* what tps_verify_outcome_close frees */
};

/* Runs req, telling obs as it goes.  Returns the status every process agrees on; err is set
 * and this process's to print when out->report_error.  out->mismatch: a numeric mismatch,
 * out->mismatch_line for the command to print.  The backend stays open until tps_verify_outcome_close: print the
 * report first (under MPI, closing lets the other processes exit). */
tps_status tps_verify_run(const tps_verify_request *req, const tps_verify_observer *obs, tps_verify_outcome *out,
                          tps_error *err);
void tps_verify_outcome_close(tps_verify_outcome *out);

#endif
