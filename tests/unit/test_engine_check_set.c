/* check's findings and its --json report, built in the library (lib/engine/check_set.c;
 * issue 34: cmd/ only prints). */
#include <stdbool.h>
#include <stdlib.h>

#include "lib/base/buf.h"
#include "lib/engine/check_set.h"
#include "tps_test.h"

TEST(a_finding_that_cannot_be_recorded_marks_the_list_incomplete)
{
    tps_check_findings f = {0};
    tps_check_findingf(&f, "tensor '%s': differs", "a");
    CHECK_EQ_U64(f.n, 1);
    CHECK_STR(f.msg[0], "tensor 'a': differs");
    CHECK(!f.oom);
    tps_check_findings_free(&f);
    tps_check_findings g = {.fail_alloc = true};
    tps_check_finding(&g, "lost");
    CHECK(g.oom);
    CHECK_EQ_U64(g.n, 0);
    tps_check_findings_free(&g);
}

TEST(check_json_of_a_set_that_did_not_open)
{
    tps_check_findings f = {0};
    tps_check_coverage cov = {0};
    tps_check_finding(&f, "no manifest");
    tps_buf b = TPS_BUF_INIT;
    tps_check_json(&b, "d", NULL, &f, &cov);
    const char *s = tps_buf_cstr(&b);
    CHECK(s != NULL);
    if (s) {
        CHECK_CONTAINS(s, "\"ok\": false");
        CHECK_CONTAINS(s, "\"partial\": false");
        CHECK_CONTAINS(s, "\"no manifest\"");
    }
    tps_buf_release(&b);
    tps_check_findings_free(&f);
}

int main(void)
{
    RUN(a_finding_that_cannot_be_recorded_marks_the_list_incomplete);
    RUN(check_json_of_a_set_that_did_not_open);
    return tps_test_done();
}
