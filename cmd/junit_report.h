/* `--junit FILE` of check and verify: the run as a JUnit XML report for CI (lib/base/junit.h
 * renders it; README "tpshard in CI" and docs/ci.md say how CI systems read it).
 *
 *   check:  one test case per rank file the set holds ("rank R: FILE"), and one for the set
 *           as a whole ("set: manifest and tensors"); each finding fails the case of the
 *           file it names, else of the rank it names, else the set's.
 *   verify: one test case per layer ("layer L"), and "whole model" with --whole-model; a
 *           mismatch fails its case with the stage, the errors and the rank blamed.
 * A run that ends in an error (exit 2 to 5) adds an errored case carrying the message, so
 * the report never shows a pass the run did not reach.  The suite's time is the whole run's.
 * main() brackets every command with tps_cli_junit_start / tps_cli_junit_finish; the file is
 * written once, at the end, atomically (temp name, fsync, rename): never half a report. */
#ifndef TPS_CMD_JUNIT_REPORT_H
#define TPS_CMD_JUNIT_REPORT_H

#include <stddef.h>

#include "lib/set.h"
#include "verify/verify.h"

/* The --junit option's value (NULL: no report); the option tables of check and verify point here. */
extern const char *tps_junit_path;

void tps_cli_junit_start(const char *cmd);
/* rc: the command's exit code; returns it, or 4 when the report could not be written. */
int tps_cli_junit_finish(const char *input, int rc);
/* The process writes no report (an MPI rank other than 0: rank 0 reports for the job). */
void tps_cli_junit_silence(void);

/* check's result: the manifest (NULL when it could not be read) and its findings. */
void tps_cli_junit_check(const char *dir, const tps_manifest *m, char *const *findings, size_t n);
/* verify's results, as they come. */
void tps_cli_junit_property(const char *name, const char *value);
void tps_cli_junit_layer(const tps_verify_result *r);
void tps_cli_junit_whole(const tps_verify_whole *r);

#endif
