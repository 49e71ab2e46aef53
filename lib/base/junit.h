/* JUnit XML reports (`check --junit FILE`, `verify --junit FILE`): one suite of test cases,
 * each passed, failed (a finding: exit 1's kind), errored (the run could not judge it) or
 * skipped, rendered as one <testsuite> document in the shape Apache Ant's JUnit task first
 * wrote and Jenkins, GitLab and GitHub Actions' report actions read (tests/schema/junit.xsd
 * states it: properties, the cases, system-out and system-err; a timestamp without a zone,
 * a hostname; at most one failure or error per case).
 *
 * Every string is escaped for XML 1.0: markup characters become entities, bytes that are not
 * UTF-8 and characters XML cannot carry (controls other than tab, newline, carriage return)
 * become U+FFFD, so any file name or message gives a well-formed document.  A case's
 * failure carries its first finding as the message attribute and every finding, one a line,
 * as its text.  The report is rendered into a buffer; writing it (atomically) is the
 * caller's (lib/engine/publish.h's tps_write_file_atomic).
 *
 *   tps_junit *j = tps_junit_new("tpshard check");
 *   size_t c = tps_junit_case(j, "tpshard.check", "rank 0: model-rank-0-of-2.safetensors", 0.1);
 *   tps_junit_fail(j, c, TPS_JUNIT_FAILURE, "CRC-32 differs");
 *   tps_junit_render(j, &buf);   ...   tps_junit_free(j);
 * An allocation failure anywhere is remembered and reported by tps_junit_render (tps_fail_oom: TPS_EIO),
 * so calls need not be checked one by one. */
#ifndef TPS_JUNIT_H
#define TPS_JUNIT_H

#include <stddef.h>
#include <time.h>

#include "buf.h"
#include "status.h"

typedef enum tps_junit_outcome {
    TPS_JUNIT_PASS,
    TPS_JUNIT_FAILURE, /* the thing tested is wrong: a finding, a mismatch */
    TPS_JUNIT_ERROR,   /* the run could not judge it: unreadable, invalid input */
    TPS_JUNIT_SKIPPED,
} tps_junit_outcome;

typedef struct tps_junit tps_junit;

/* A suite called name (NULL on allocation failure); its timestamp is now, its hostname this
 * machine's, until tps_junit_set_origin says otherwise. */
tps_junit *tps_junit_new(const char *name);
void tps_junit_free(tps_junit *j);

/* For reproducible output (tests): the suite's start time (UTC) and host name. */
void tps_junit_set_origin(tps_junit *j, time_t when, const char *hostname);
/* The whole run's wall time in seconds (the suite's time attribute). */
void tps_junit_set_time(tps_junit *j, double seconds);
/* A <property name= value=> of the suite (the path checked, the backend, ...). */
void tps_junit_property(tps_junit *j, const char *name, const char *value);

/* Adds a passing case and returns its index (for tps_junit_fail). */
size_t tps_junit_case(tps_junit *j, const char *classname, const char *name, double seconds);
/* Case idx gets outcome (a failure outranks an error, which outranks a skip) and msg: the
 * first message becomes the element's message attribute, every one a line of its text. */
void tps_junit_fail(tps_junit *j, size_t idx, tps_junit_outcome outcome, const char *msg);
/* Index of the case called name, or (size_t)-1. */
size_t tps_junit_find(const tps_junit *j, const char *name);
size_t tps_junit_count(const tps_junit *j, tps_junit_outcome outcome);

/* The XML document into out (appended).  TPS_ENOMEM when any earlier call ran out of memory. */
tps_status tps_junit_render(const tps_junit *j, tps_buf *out, tps_error *err);

/* s escaped for an XML attribute value (quote) or text (!quote), appended to out. */
void tps_xml_escape(tps_buf *out, const char *s, int quote);

#endif
