/* lib/base/junit.c: the exact document for a small suite (written out by hand here, not
 * produced by the code under test), XML escaping of markup, controls and bytes that are not
 * UTF-8, the outcome a case keeps, and allocation-failure reporting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base/junit.h"
#include "tps_test.h"

static char *render(const tps_junit *j)
{
    tps_buf b = TPS_BUF_INIT;
    tps_error err;
    tps_error_clear(&err);
    if (tps_junit_render(j, &b, &err) != TPS_OK) {
        tps_buf_release(&b);
        return NULL;
    }
    const char *s = tps_buf_cstr(&b);
    char *copy = s ? strdup(s) : NULL;
    tps_buf_release(&b);
    return copy;
}

static char *escaped(const char *s, int quote)
{
    tps_buf b = TPS_BUF_INIT;
    tps_xml_escape(&b, s, quote);
    const char *c = tps_buf_cstr(&b);
    char *copy = strdup(c ? c : "(oom)");
    tps_buf_release(&b);
    return copy;
}

TEST(exact_document)
{
    tps_junit *j = tps_junit_new("tpshard check");
    CHECK(j != NULL);
    tps_junit_set_origin(j, 86400 + 3600 + 60 + 1, "ci-host"); /* 1970-01-02T01:01:01 UTC */
    tps_junit_set_time(j, 1.5);
    tps_junit_property(j, "path", "tp2/");
    size_t a = tps_junit_case(j, "tpshard.check", "rank 0: a.safetensors", 0.25);
    size_t b = tps_junit_case(j, "tpshard.check", "rank 1: b.safetensors", 0);
    tps_junit_fail(j, b, TPS_JUNIT_FAILURE, "b.safetensors: CRC-32 0000abcd, the manifest says 12345678");
    tps_junit_fail(j, b, TPS_JUNIT_FAILURE, "tensor 'x' <bad> & \"worse\"");
    size_t c = tps_junit_case(j, "tpshard.check", "tensors", 0.0005);
    tps_junit_fail(j, c, TPS_JUNIT_ERROR, "cannot read");
    CHECK_EQ_U64(a, 0);
    CHECK_EQ_U64(b, 1);
    CHECK_EQ_U64(tps_junit_find(j, "tensors"), 2);
    CHECK_EQ_U64(tps_junit_find(j, "nope"), (size_t)-1);
    char *got = render(j);
    const char *want =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<testsuite name=\"tpshard check\" tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\" time=\"1.500\" "
        "timestamp=\"1970-01-02T01:01:01\" hostname=\"ci-host\">\n"
        "  <properties>\n"
        "    <property name=\"path\" value=\"tp2/\"/>\n"
        "  </properties>\n"
        "  <testcase classname=\"tpshard.check\" name=\"rank 0: a.safetensors\" time=\"0.250\"/>\n"
        "  <testcase classname=\"tpshard.check\" name=\"rank 1: b.safetensors\" time=\"0.000\">\n"
        "    <failure type=\"mismatch\" message=\"b.safetensors: CRC-32 0000abcd, the manifest says 12345678\">"
        "b.safetensors: CRC-32 0000abcd, the manifest says 12345678\n"
        "tensor 'x' &lt;bad&gt; &amp; \"worse\"\n"
        "</failure>\n"
        "  </testcase>\n"
        "  <testcase classname=\"tpshard.check\" name=\"tensors\" time=\"0.001\">\n"
        "    <error type=\"invalid\" message=\"cannot read\">cannot read\n</error>\n"
        "  </testcase>\n"
        "  <system-out></system-out>\n"
        "  <system-err></system-err>\n"
        "</testsuite>\n";
    CHECK_STR(got, want);
    free(got);
    tps_junit_free(j);
}

TEST(escapes_attributes_and_text)
{
    char *s = escaped("a&b<c>d\"e'f", 1);
    CHECK_STR(s, "a&amp;b&lt;c&gt;d&quot;e&apos;f");
    free(s);
    s = escaped("a&b<c>d\"e'f", 0);
    CHECK_STR(s, "a&amp;b&lt;c&gt;d\"e'f");
    free(s);
    /* tab, newline, CR survive an attribute as references; other controls are not XML */
    s = escaped("x\ty\nz\rw\x01v\x1f", 1);
    CHECK_STR(s, "x&#9;y&#10;z&#13;w\xef\xbf\xbdv\xef\xbf\xbd");
    free(s);
    s = escaped("x\ty\nz", 0);
    CHECK_STR(s, "x\ty\nz");
    free(s);
}

TEST(escapes_invalid_utf8)
{
    /* valid: e-acute (2 bytes), euro sign (3), U+1F600 (4) pass through */
    char *s = escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0);
    CHECK_STR(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    free(s);
    /* a Latin-1 byte, a stray continuation, an overlong '/', a surrogate, a cut sequence */
    s = escaped("a\xe9z", 0);
    CHECK_STR(s, "a\xef\xbf\xbdz");
    free(s);
    s = escaped("\x80", 0);
    CHECK_STR(s, "\xef\xbf\xbd");
    free(s);
    s = escaped("\xc0\xaf", 0);
    CHECK_STR(s, "\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    s = escaped("\xed\xa0\x80", 0);
    CHECK_STR(s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    s = escaped("\xe2\x82", 0);
    CHECK_STR(s, "\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    /* U+FFFF is not an XML character */
    s = escaped("\xef\xbf\xbf", 0);
    CHECK_STR(s, "\xef\xbf\xbd");
    free(s);
}

TEST(outcome_kept_is_the_worst)
{
    tps_junit *j = tps_junit_new("s");
    tps_junit_set_origin(j, 0, NULL);
    size_t c = tps_junit_case(j, "k", "c", 0);
    tps_junit_fail(j, c, TPS_JUNIT_SKIPPED, "later");
    tps_junit_fail(j, c, TPS_JUNIT_ERROR, "e");
    tps_junit_fail(j, c, TPS_JUNIT_FAILURE, "f");
    tps_junit_fail(j, c, TPS_JUNIT_ERROR, "e2");
    CHECK_EQ_U64(tps_junit_count(j, TPS_JUNIT_FAILURE), 1);
    CHECK_EQ_U64(tps_junit_count(j, TPS_JUNIT_ERROR), 0);
    char *got = render(j);
    /* the first message is the attribute, whatever outcome it came with */
    CHECK_CONTAINS(got, "<failure type=\"mismatch\" message=\"later\">later\ne\nf\ne2\n</failure>");
    CHECK_CONTAINS(got, "hostname=\"localhost\"");
    CHECK_CONTAINS(got, "timestamp=\"1970-01-01T00:00:00\"");
    free(got);
    tps_junit_fail(j, 7, TPS_JUNIT_FAILURE, "out of range: ignored");
    tps_junit_free(j);
    tps_junit_free(NULL);
}

TEST(time_is_a_plain_decimal)
{
    tps_junit *j = tps_junit_new("s");
    tps_junit_set_time(j, -1); /* a clock that stepped back */
    tps_junit_case(j, "k", "nan", NAN);
    tps_junit_case(j, "k", "huge", 1e300);
    char *got = render(j);
    CHECK_CONTAINS(got, "skipped=\"0\" time=\"0.000\"");
    CHECK_CONTAINS(got, "name=\"nan\" time=\"0.000\"");
    CHECK_CONTAINS(got, "name=\"huge\" time=\"1000000000000.000\"");
    free(got);
    tps_junit_free(j);
}

int main(void)
{
    RUN(exact_document);
    RUN(escapes_attributes_and_text);
    RUN(escapes_invalid_utf8);
    RUN(outcome_kept_is_the_worst);
    RUN(time_is_a_plain_decimal);
    return tps_test_done();
}
