/* What `tpshard check` proves of a shard set, in one read of its shards: every rank's files
 * open and agree with the manifest, every tensor reassembles to the manifest's CRC-32 (each
 * element covered once, replicas equal), every file's size and CRC-32 match (rebuilt from
 * its header and its tensors' CRCs, without reading twice), and with a source every tensor
 * equals the source's bit for bit.  A partial set (the ranks of one node) is checked file by
 * file.  Findings are collected, never stopped at, so one run lists every fault; the command
 * line (cmd/cmd_check.c) opens the set and the source and prints what is found. */
#ifndef TPS_CHECK_SET_H
#define TPS_CHECK_SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/buf.h"
#include "../base/index.h"
#include "../base/status.h"
#include "../set/manifest.h"
#include "cut.h"
#include "shardset.h"

/* The findings, in report order.  A finding that could not be recorded (out of memory)
 * sets oom: the run then fails with exit 4, since a list missing a finding could read as a
 * pass. */
typedef struct tps_check_findings {
    char **msg;
    size_t n, cap;
    bool oom;
    bool fail_alloc; /* test hook (TPSHARD_TEST_FINDING_OOM): recording fails as out of memory would */
} tps_check_findings;

void tps_check_finding(tps_check_findings *f, const char *msg);
void tps_check_findingf(tps_check_findings *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tps_check_findings_free(tps_check_findings *f);

/* What check covered, for the footer: a run that covered nothing fails. */
typedef struct tps_check_coverage {
    uint64_t ranks;   /* opened and checked */
    uint64_t files;   /* whose size and CRC-32 were compared with the manifest */
    uint64_t bytes;   /* the sizes of those files */
    uint64_t tensors; /* whose reassembled global CRC-32 was compared with the manifest */
    bool zip_records; /* a Megatron set's torch zip records' own CRC-32s were proved */
} tps_check_coverage;

typedef struct tps_check_opts {
    const tps_index *src; /* --source, or NULL */
    /* Proves a Megatron rank file's torch zip records' CRC-32s, which its reader leaves
     * unchecked at open (formats/torch/torch.h: tps_torch_verify_records). */
    tps_status (*verify_records)(const char *path, tps_error *err);
    /* The progress line: phase(arg, true) before a pass over the bytes, progress during it,
     * phase(arg, false) after. */
    void (*phase)(void *arg, bool begin);
    void (*progress)(const tps_progress *p, void *arg);
    void *progress_arg;
} tps_check_opts;

/* Opens each rank the set holds, a finding for each that fails; true when all opened. */
bool tps_check_open_ranks(tps_shardset *ss, tps_check_findings *f, tps_check_coverage *cov);

/* Every check after the ranks are open (ranks_ok: tps_check_open_ranks's answer), findings
 * into f.  Fails (out of memory for its tables) only when no verdict can be given. */
tps_status tps_check_run(tps_shardset *ss, bool ranks_ok, const tps_check_opts *o, tps_check_findings *f,
                         tps_check_coverage *cov, tps_error *err);

/* The --json report: dir, the verdict, the manifest's counts (m NULL when it did not open),
 * what was covered and every finding. */
void tps_check_json(tps_buf *out, const char *dir, const tps_manifest *m, const tps_check_findings *f,
                    const tps_check_coverage *cov);

#endif
