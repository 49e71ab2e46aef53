/* lib/base/json.c: the strict parser (valid and invalid documents, each grammar rule broken
 * once), duplicate keys at scale, memory bounds, and the emitter (escaping round trip,
 * exact compact and pretty text, shortest round-tripping doubles). */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "lib/base/json.h"
#include "tps_test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* Parses n bytes; on success returns the doc, on failure NULL with err filled. */
static tps_json_doc *parse_n(const char *s, size_t n, tps_error *err)
{
    tps_json_doc *doc = (tps_json_doc *)1;
    tps_error_clear(err);
    tps_status st = tps_json_parse(s, n, "test", &doc, err);
    if (st != TPS_OK) {
        if (doc != NULL) printf("#   failed parse left *out non-NULL\n");
        return NULL;
    }
    return doc;
}

static tps_json_doc *parse(const char *s, tps_error *err) { return parse_n(s, strlen(s), err); }

TEST(nested_document)
{
    tps_error err;
    const char *s = "{\"a\": [1, {\"b\": null}, true, false, \"x\"], \"c\": {}, \"d\": []}";
    tps_json_doc *doc = parse(s, &err);
    CHECK(doc);
    if (!doc) {
        printf("#   %s\n", err.msg);
        return;
    }
    const tps_json *r = tps_json_root(doc);
    CHECK(r->type == TPS_JSON_OBJECT);
    CHECK_EQ_U64(r->u.object.n, 3);
    CHECK_EQ_U64(r->offset, 0);
    CHECK_STR(r->u.object.keys[0]->u.string.s, "a");
    CHECK_STR(r->u.object.keys[1]->u.string.s, "c");
    CHECK_STR(r->u.object.keys[2]->u.string.s, "d");
    const tps_json *a = tps_json_get(r, "a");
    CHECK(a && a->type == TPS_JSON_ARRAY && a->u.array.n == 5);
    CHECK_EQ_U64(a->offset, 6);
    CHECK(a->u.array.items[0]->type == TPS_JSON_NUMBER && a->u.array.items[0]->u.number.u64 == 1);
    CHECK_EQ_U64(a->u.array.items[0]->offset, 7);
    const tps_json *inner = a->u.array.items[1];
    CHECK(inner->type == TPS_JSON_OBJECT);
    CHECK(tps_json_get(inner, "b") && tps_json_get(inner, "b")->type == TPS_JSON_NULL);
    CHECK(a->u.array.items[2]->type == TPS_JSON_BOOL && a->u.array.items[2]->u.boolean);
    CHECK(a->u.array.items[3]->type == TPS_JSON_BOOL && !a->u.array.items[3]->u.boolean);
    CHECK_STR(a->u.array.items[4]->u.string.s, "x");
    const tps_json *c = tps_json_get(r, "c"), *d = tps_json_get(r, "d");
    CHECK(c && c->type == TPS_JSON_OBJECT && c->u.object.n == 0);
    CHECK(d && d->type == TPS_JSON_ARRAY && d->u.array.n == 0);
    CHECK(tps_json_get(r, "e") == NULL);
    CHECK(tps_json_get(a, "a") == NULL); /* not an object */
    CHECK(tps_json_get(NULL, "a") == NULL);
    tps_json_doc_free(doc);
    tps_json_doc_free(NULL);
}

TEST(all_escapes_decoded)
{
    tps_error err;
    const char *s = "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\\u0000z\"";
    const char want[] = "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\0z";
    tps_json_doc *doc = parse(s, &err);
    CHECK(doc);
    if (!doc) return;
    const tps_json *r = tps_json_root(doc);
    CHECK(r->type == TPS_JSON_STRING);
    CHECK_EQ_U64(r->u.string.len, sizeof want - 1);
    CHECK(memcmp(r->u.string.s, want, sizeof want) == 0); /* includes the terminating NUL */
    tps_json_doc_free(doc);
}

TEST(surrogate_pairs_and_raw_utf8)
{
    static const struct {
        const char *json, *utf8;
    } cases[] = {
        {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80"},         /* U+1F600 */
        {"\"\\uD834\\uDD1E\"", "\xf0\x9d\x84\x9e"},         /* U+1D11E */
        {"\"\\udbff\\udfff\"", "\xf4\x8f\xbf\xbf"},         /* U+10FFFF */
        {"\"\\ud800\\udc00\"", "\xf0\x90\x80\x80"},         /* U+10000 */
        {"\"\xf0\x9f\x98\x80\"", "\xf0\x9f\x98\x80"},       /* raw 4-byte */
        {"\"\xf4\x8f\xbf\xbf\"", "\xf4\x8f\xbf\xbf"},       /* raw U+10FFFF */
        {"\"\xe2\x82\xac\xc3\xa9\x7f\"", "\xe2\x82\xac\xc3\xa9\x7f"},
        {"\"\xef\xbf\xbf\xee\x80\x80\"", "\xef\xbf\xbf\xee\x80\x80"}, /* U+FFFF, U+E000 */
        {"\"\xed\x9f\xbf\"", "\xed\x9f\xbf"},               /* U+D7FF, just below surrogates */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tps_error err;
        tps_json_doc *doc = parse(cases[i].json, &err);
        CHECK(doc);
        if (!doc) {
            printf("#   case %zu: %s\n", i, err.msg);
            continue;
        }
        const tps_json *r = tps_json_root(doc);
        CHECK_EQ_U64(r->u.string.len, strlen(cases[i].utf8));
        CHECK_STR(r->u.string.s, cases[i].utf8);
        tps_json_doc_free(doc);
    }
}

TEST(numbers)
{
    static const struct {
        const char *text;
        bool is_u64;
        uint64_t u64;
        double f64;
    } cases[] = {
        {"0", true, 0, 0.0},
        {"7", true, 7, 7.0},
        {"18446744073709551615", true, UINT64_MAX, 18446744073709551615.0},
        {"18446744073709551614", true, UINT64_MAX - 1, 18446744073709551614.0},
        {"18446744073709551616", false, 0, 18446744073709551616.0},
        {"99999999999999999999", false, 0, 99999999999999999999.0},
        {"9007199254740993", true, 9007199254740993ull, 9007199254740992.0},
        {"-1", false, 0, -1.0},
        {"-0", false, 0, -0.0},
        {"1.0", false, 0, 1.0},
        {"1e2", false, 0, 100.0},
        {"1E+2", false, 0, 100.0},
        {"25e-1", false, 0, 2.5},
        {"-0.5e-3", false, 0, -0.0005},
        {"0.1", false, 0, 0.1},
        {"1e400", false, 0, HUGE_VAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tps_error err;
        char wrapped[64];
        snprintf(wrapped, sizeof wrapped, " [%s] ", cases[i].text);
        tps_json_doc *doc = parse(wrapped, &err);
        CHECK(doc);
        if (!doc) {
            printf("#   %s: %s\n", cases[i].text, err.msg);
            continue;
        }
        const tps_json *n = tps_json_root(doc)->u.array.items[0];
        CHECK(n->type == TPS_JSON_NUMBER);
        CHECK_EQ_U64(n->offset, 2);
        CHECK_EQ_U64(n->u.number.len, strlen(cases[i].text));
        CHECK(memcmp(n->u.number.text, cases[i].text, n->u.number.len) == 0);
        if (n->u.number.is_u64 != cases[i].is_u64) printf("#   %s: is_u64 wrong\n", cases[i].text);
        CHECK(n->u.number.is_u64 == cases[i].is_u64);
        if (cases[i].is_u64) CHECK_EQ_U64(n->u.number.u64, cases[i].u64);
        CHECK(memcmp(&n->u.number.f64, &cases[i].f64, sizeof(double)) == 0);
        tps_json_doc_free(doc);
    }
}

TEST(whitespace_around_and_scalars)
{
    static const char *const ok[] = {" \t\r\n{} \n\t\r ", "true", "false", "null", "\"\"", "0", "[ ]",
                                     "{ \"a\" : 1 , \"b\" : [ 1 , 2 ] }", "\n[\n1\n,\n2\n]\n"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tps_error err;
        tps_json_doc *doc = parse(ok[i], &err);
        if (!doc) printf("#   '%s': %s\n", ok[i], err.msg);
        CHECK(doc);
        tps_json_doc_free(doc);
    }
}

TEST(keys_compared_as_decoded_bytes)
{
    tps_error err;
    /* "a\0" and "a" differ; "ab" and "a" differ; lookups use exact bytes */
    tps_json_doc *doc = parse("{\"a\\u0000\": 1, \"a\": 2, \"ab\": 3, \"\": 4}", &err);
    CHECK(doc);
    if (!doc) {
        printf("#   %s\n", err.msg);
        return;
    }
    const tps_json *r = tps_json_root(doc);
    CHECK_EQ_U64(r->u.object.keys[0]->u.string.len, 2);
    CHECK(tps_json_get(r, "a") && tps_json_get(r, "a")->u.number.u64 == 2);
    CHECK(tps_json_get(r, "ab") && tps_json_get(r, "ab")->u.number.u64 == 3);
    CHECK(tps_json_get(r, "") && tps_json_get(r, "")->u.number.u64 == 4);
    tps_json_doc_free(doc);
}

TEST(depth_64_accepted)
{
    char s[2 * TPS_JSON_MAX_DEPTH + 1];
    memset(s, '[', TPS_JSON_MAX_DEPTH);
    memset(s + TPS_JSON_MAX_DEPTH, ']', TPS_JSON_MAX_DEPTH);
    s[2 * TPS_JSON_MAX_DEPTH] = '\0';
    tps_error err;
    tps_json_doc *doc = parse(s, &err);
    CHECK(doc);
    if (!doc) printf("#   %s\n", err.msg);
    tps_json_doc_free(doc);
}

struct bad_case {
    const char *name;
    const char *text;
    size_t len; /* 0: strlen(text) */
    size_t offset;
    const char *fragment;
};

static const struct bad_case bad_cases[] = {
    {"empty input", "", 0, 0, "expected a value, found end of input"},
    {"only whitespace", " \n ", 0, 3, "expected a value, found end of input"},
    {"trailing comma in array", "[1,2,]", 0, 5, "trailing comma before ']'"},
    {"trailing comma in object", "{\"a\":1,}", 0, 7, "trailing comma before '}'"},
    {"leading zero", "[01]", 0, 1, "leading zeros"},
    {"leading zero negative", "-012", 0, 0, "leading zeros"},
    {"plus sign", "+1", 0, 0, "expected a value, found '+'"},
    {"bare fraction", ".5", 0, 0, "expected a value, found '.'"},
    {"no fraction digits", "1.", 0, 2, "a digit after the decimal point"},
    {"fraction then exponent", "1.e5", 0, 2, "a digit after the decimal point"},
    {"no exponent digits", "1e", 0, 2, "a digit in the exponent"},
    {"exponent sign only", "1e+", 0, 3, "a digit in the exponent"},
    {"lone minus", "-", 0, 1, "a digit after '-'"},
    {"minus letter", "-a", 0, 1, "a digit after '-'"},
    {"hex number", "0x10", 0, 1, "expected the end of input after the value, found 'x'"},
    {"NaN", "NaN", 0, 0, "expected a value, found 'N'"},
    {"Infinity", "[Infinity]", 0, 1, "expected a value, found 'I'"},
    {"bad literal", "[tru]", 0, 1, "invalid literal (expected 'true')"},
    {"capital literal", "True", 0, 0, "expected a value, found 'T'"},
    {"nul literal", "nul", 0, 0, "invalid literal (expected 'null')"},
    {"single quotes", "['a']", 0, 1, "expected a value, found '''"},
    {"comment", "/**/{}", 0, 0, "expected a value, found '/'"},
    {"unterminated string", "[\"abc", 0, 1, "unterminated string"},
    {"unterminated escape", "\"\\", 0, 1, "unterminated escape"},
    {"bad escape", "\"a\\x\"", 0, 2, "invalid escape: backslash followed by 'x'"},
    {"short \\u", "\"\\u12\"", 0, 1, "expected 4 hex digits after \\u"},
    {"non-hex \\u", "\"\\u12g4\"", 0, 1, "expected 4 hex digits after \\u"},
    {"lone high surrogate", "\"\\ud800\"", 0, 1, "lone surrogate \\uD800"},
    {"high surrogate then BMP", "\"x\\uD83D\\u0041\"", 0, 2, "lone surrogate \\uD83D"},
    {"high surrogate then high", "\"\\ud800\\ud800\"", 0, 1, "lone surrogate \\uD800"},
    {"lone low surrogate", "\"\\udc00\"", 0, 1, "lone surrogate \\uDC00"},
    {"overlong 2-byte", "\"\xc0\xaf\"", 0, 1, "overlong"},
    {"overlong 2-byte c1", "\"\xc1\xbf\"", 0, 1, "overlong"},
    {"overlong 3-byte", "\"\xe0\x80\xaf\"", 0, 1, "overlong"},
    {"overlong 4-byte", "\"\xf0\x80\x80\xaf\"", 0, 1, "overlong"},
    {"UTF-8 surrogate", "\"ab\xed\xa0\x80\"", 0, 3, "encoded surrogate"},
    {"UTF-8 low surrogate", "\"\xed\xbf\xbf\"", 0, 1, "encoded surrogate"},
    {"above U+10FFFF (F4 90)", "\"\xf4\x90\x80\x80\"", 0, 1, "above U+10FFFF"},
    {"above U+10FFFF (F5)", "\"\xf5\x80\x80\x80\"", 0, 1, "above U+10FFFF"},
    {"byte 0xff", "\"\xff\"", 0, 1, "0xff never occurs in UTF-8"},
    {"stray continuation byte", "\"\x80\"", 0, 1, "unexpected continuation byte 0x80"},
    {"truncated 2-byte", "\"\xc3\"", 0, 1, "not followed by a continuation byte"},
    {"truncated 3-byte", "\"\xe2\x82\"", 0, 1, "not followed by a continuation byte"},
    {"sequence cut by end", "\"\xe2\x82", 0, 1, "cut off by the end of input"},
    {"non-ASCII outside string", "\xc3\xa9", 0, 0, "expected a value, found byte 0xc3"},
    {"newline in string", "\"a\nb\"", 0, 2, "control character 0x0a"},
    {"tab in string", "\"\t\"", 0, 1, "control character 0x09"},
    {"0x1f in string", "[\"\x1f\"]", 0, 2, "control character 0x1f"},
    {"NUL in string", "\"a\0b\"", 5, 2, "control character 0x00"},
    {"duplicate key depth 1", "{\"a\":1,\"b\":2,\"a\":3}", 0, 13, "duplicate key \"a\" (first at byte 1)"},
    {"duplicate key depth 3", "{\"x\":{\"y\":{\"k\":1,\"k\":2}}}", 0, 17, "duplicate key \"k\" (first at byte 11)"},
    {"duplicate via escape", "{\"a\":1,\"\\u0061\":2}", 0, 7, "duplicate key \"a\" (first at byte 1)"},
    {"earliest duplicate reported", "{\"z\":1,\"a\":1,\"a\":2,\"z\":3}", 0, 13, "duplicate key \"a\" (first at byte 7)"},
    {"duplicate empty key", "{\"\":1,\"\":2}", 0, 6, "duplicate key \"\""},
    {"two top-level values", "1 2", 0, 2, "expected the end of input after the value, found '2'"},
    {"two objects", "{} {}", 0, 3, "found '{'"},
    {"trailing garbage", "{}x", 0, 2, "found 'x'"},
    {"NUL after value", "{}\0", 3, 2, "found byte 0x00"},
    {"missing colon", "{\"a\" 1}", 0, 5, "expected ':' after an object key, found '1'"},
    {"number key", "{1:2}", 0, 1, "expected a string key in an object, found '1'"},
    {"missing comma", "[1 2]", 0, 3, "expected ',' or ']' in an array, found '2'"},
    {"missing comma in object", "{\"a\":1 \"b\":2}", 0, 7, "expected ',' or '}' in an object, found '\"'"},
    {"unclosed array", "[1,2", 0, 4, "expected ',' or ']' in an array, found end of input"},
    {"unclosed object", "{\"a\":1", 0, 6, "expected ',' or '}' in an object, found end of input"},
    {"missing value", "{\"a\":}", 0, 5, "expected a value, found '}'"},
    {"leading comma", "[,1]", 0, 1, "expected a value, found ','"},
    {"vertical tab whitespace", "\v{}", 0, 0, "found byte 0x0b"},
};

TEST(invalid_documents)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        tps_error err;
        tps_error_clear(&err);
        tps_json_doc *doc = (tps_json_doc *)1;
        size_t len = c->len ? c->len : strlen(c->text);
        tps_status st = tps_json_parse(c->text, len, "hdr.json", &doc, &err);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "hdr.json: byte %zu: ", c->offset);
        bool good = st == TPS_EINVALID && err.code == TPS_EINVALID && doc == NULL &&
                    strncmp(err.msg, prefix, strlen(prefix)) == 0 && strstr(err.msg, c->fragment);
        if (!good) {
            printf("#   %s: status %d, message \"%s\"; want \"%s...%s\"\n", c->name, (int)st, err.msg, prefix,
                   c->fragment);
            tps_test_failed_now = 1;
        }
        if (st == TPS_OK) tps_json_doc_free(doc);
    }
}

TEST(depth_65_refused)
{
    /* alternate arrays and objects so both container kinds count toward the depth */
    tps_buf b = TPS_BUF_INIT;
    size_t off65 = 0;
    for (int i = 0; i <= TPS_JSON_MAX_DEPTH; i++) {
        if (i == TPS_JSON_MAX_DEPTH) off65 = b.len;
        tps_buf_puts(&b, i % 2 ? "{\"k\":" : "[");
    }
    for (int i = TPS_JSON_MAX_DEPTH; i >= 0; i--) tps_buf_puts(&b, i % 2 ? "}" : "]");
    tps_error err;
    tps_json_doc *doc = parse_n(b.data, b.len, &err);
    CHECK(doc == NULL);
    CHECK_EQ_U64(err.code, TPS_EINVALID);
    char want[96];
    snprintf(want, sizeof want, "test: byte %zu: nesting deeper than 64", off65);
    CHECK_CONTAINS(err.msg, want);
    tps_json_doc_free(doc);

    /* a deep hostile input far beyond the cap fails the same way, without deep recursion */
    size_t big = 1u << 20;
    char *deep = malloc(big);
    CHECK(deep);
    if (deep) {
        memset(deep, '[', big);
        doc = parse_n(deep, big, &err);
        CHECK(doc == NULL);
        CHECK_CONTAINS(err.msg, "test: byte 64: nesting deeper than 64");
        free(deep);
    }
    tps_buf_release(&b);
}

static double cpu_seconds(void) { return (double)clock() / CLOCKS_PER_SEC; }

TEST(large_objects_fast_and_duplicates_found)
{
    enum { N = 200000 };
    tps_buf b = TPS_BUF_INIT;
    tps_buf_putc(&b, '{');
    for (int i = 0; i < N; i++) tps_buf_printf(&b, "%s\"key.%d\":%d", i ? "," : "", i, i);
    tps_buf_putc(&b, '}');
    CHECK(!b.oom);
    tps_error err;
    double t0 = cpu_seconds();
    tps_json_doc *doc = parse_n(b.data, b.len, &err);
    double t1 = cpu_seconds();
    CHECK(doc);
    if (doc) {
        const tps_json *r = tps_json_root(doc);
        CHECK_EQ_U64(r->u.object.n, N);
        for (int i = 0; i < N; i += 9973) {
            char k[32];
            snprintf(k, sizeof k, "key.%d", i);
            CHECK(r->u.object.values[i]->u.number.u64 == (uint64_t)i);
            CHECK_STR(r->u.object.keys[i]->u.string.s, k);
        }
    }
    tps_json_doc_free(doc);
    /* A quadratic duplicate check would take minutes here; sorting takes milliseconds. */
    if (t1 - t0 > 3.0) printf("#   %d keys took %.2f s of CPU\n", N, t1 - t0);
    CHECK(t1 - t0 <= 3.0);

    /* the same object with one key repeated at the end */
    b.len--;
    size_t dup_at = b.len + 1;
    tps_buf_puts(&b, ",\"key.123456\":0}");
    doc = parse_n(b.data, b.len, &err);
    CHECK(doc == NULL);
    const char *first = strstr(b.data, "\"key.123456\"");
    char want[128];
    snprintf(want, sizeof want, "test: byte %zu: duplicate key \"key.123456\" (first at byte %zu)", dup_at,
             (size_t)(first - b.data));
    CHECK_CONTAINS(err.msg, want);
    tps_buf_release(&b);
}

#ifdef __GLIBC__
static size_t heap_in_use(void) { return mallinfo2().uordblks; }
#endif

TEST(memory_bounded_by_input)
{
#ifdef __GLIBC__
    /* The densest input: one value per two bytes. */
    enum { N = 500000 };
    size_t len = 2 * N + 1;
    char *s = malloc(len);
    CHECK(s);
    if (!s) return;
    for (size_t i = 0; i < N; i++) {
        s[2 * i] = i ? ',' : '[';
        s[2 * i + 1] = '0';
    }
    s[len - 1] = ']';
    size_t before = heap_in_use();
    tps_error err;
    tps_json_doc *doc = parse_n(s, len, &err);
    size_t used = heap_in_use() - before;
    CHECK(doc);
    if (doc) CHECK_EQ_U64(tps_json_root(doc)->u.array.n, N);
    if (used > 48 * len) printf("#   %zu bytes of input kept %zu bytes\n", len, used);
    CHECK(used <= 48 * len);
    tps_json_doc_free(doc);

    /* One long string costs about its own length. */
    memset(s, 'a', len);
    s[0] = s[len - 1] = '"';
    before = heap_in_use();
    doc = parse_n(s, len, &err);
    used = heap_in_use() - before;
    CHECK(doc);
    if (used > len + 16384) printf("#   a %zu-byte string kept %zu bytes\n", len, used);
    CHECK(used <= len + 16384);
    tps_json_doc_free(doc);
    free(s);
#endif
}

/* Emitting s with tps_json_escape and parsing the text back gives the same bytes. */
static bool escape_round_trip(const char *s, size_t n)
{
    tps_buf b = TPS_BUF_INIT;
    tps_json_escape(&b, s, n);
    tps_error err;
    tps_json_doc *doc = b.oom ? NULL : parse_n(b.data, b.len, &err);
    bool ok = doc && tps_json_root(doc)->type == TPS_JSON_STRING && tps_json_root(doc)->u.string.len == n &&
              memcmp(tps_json_root(doc)->u.string.s, s, n) == 0;
    if (!ok) printf("#   round trip failed for %zu bytes; emitted %s; %s\n", n, b.data ? b.data : "?",
                    doc ? "bytes differ" : err.msg);
    tps_json_doc_free(doc);
    tps_buf_release(&b);
    return ok;
}

/* UTF-8 of code point cp, written from the RFC 3629 table. */
static size_t encode_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 + cp / 64);
        out[1] = (char)(0x80 + cp % 64);
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 + cp / 4096);
        out[1] = (char)(0x80 + cp / 64 % 64);
        out[2] = (char)(0x80 + cp % 64);
        return 3;
    }
    out[0] = (char)(0xf0 + cp / 262144);
    out[1] = (char)(0x80 + cp / 4096 % 64);
    out[2] = (char)(0x80 + cp / 64 % 64);
    out[3] = (char)(0x80 + cp % 64);
    return 4;
}

TEST(escape_round_trip_all_ascii_and_utf8)
{
    char all[0x80];
    for (int c = 0; c < 0x80; c++) {
        char one = (char)c;
        CHECK(escape_round_trip(&one, 1));
        all[c] = (char)c;
    }
    CHECK(escape_round_trip(all, sizeof all));
    CHECK(escape_round_trip(all + 1, sizeof all - 1));
    CHECK(escape_round_trip("", 0));
    static const char *const multi[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf",
                                        "\xe2\x80\xa8\xe2\x80\xa9", "caf\xc3\xa9\n\"q\"\\\t\x01"};
    for (size_t i = 0; i < sizeof multi / sizeof multi[0]; i++) CHECK(escape_round_trip(multi[i], strlen(multi[i])));
    /* random strings of code points from every UTF-8 length class, controls included */
    char s[4 * 64];
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = 0, count = rng() % 64;
        for (size_t k = 0; k < count; k++) {
            uint32_t cp;
            switch (rng() % 4) {
            case 0: cp = (uint32_t)(rng() % 0x80); break;
            case 1: cp = 0x80 + (uint32_t)(rng() % (0x800 - 0x80)); break;
            case 2:
                do cp = 0x800 + (uint32_t)(rng() % (0x10000 - 0x800));
                while (cp >= 0xd800 && cp <= 0xdfff);
                break;
            default: cp = 0x10000 + (uint32_t)(rng() % (0x110000 - 0x10000)); break;
            }
            n += encode_utf8(cp, s + n);
        }
        if (!escape_round_trip(s, n)) {
            tps_test_failed_now = 1;
            break;
        }
    }
}

TEST(escape_forms)
{
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"\"", 1, "\"\\\"\""},
        {"\\", 1, "\"\\\\\""},
        {"/", 1, "\"/\""},
        {"\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\""},
        {"\x01\x1f", 2, "\"\\u0001\\u001f\""},
        {"a\0b", 3, "\"a\\u0000b\""},
        {"\x7f\xc3\xa9", 3, "\"\x7f\xc3\xa9\""},
        {"\xe2\x80\xa8", 3, "\"\xe2\x80\xa8\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tps_buf b = TPS_BUF_INIT;
        tps_json_escape(&b, cases[i].in, cases[i].n);
        CHECK_STR(tps_buf_cstr(&b), cases[i].out);
        tps_buf_release(&b);
    }
}

static void write_fixture(tps_jw *w)
{
    tps_jw_object_begin(w);
    tps_jw_key(w, "name");
    tps_jw_string(w, "x\"y");
    tps_jw_key(w, "n");
    tps_jw_array_begin(w);
    tps_jw_u64(w, 1);
    tps_jw_i64(w, -2);
    tps_jw_object_begin(w);
    tps_jw_object_end(w);
    tps_jw_array_end(w);
    tps_jw_key(w, "e");
    tps_jw_array_begin(w);
    tps_jw_array_end(w);
    tps_jw_key(w, "o");
    tps_jw_object_begin(w);
    tps_jw_key(w, "t");
    tps_jw_bool(w, true);
    tps_jw_key(w, "f");
    tps_jw_bool(w, false);
    tps_jw_key(w, "z");
    tps_jw_null(w);
    tps_jw_key(w, "d");
    tps_jw_double(w, 0.5);
    tps_jw_key(w, "inf");
    tps_jw_double(w, INFINITY);
    tps_jw_key(w, "big");
    tps_jw_u64(w, UINT64_MAX);
    tps_jw_key(w, "min");
    tps_jw_i64(w, INT64_MIN);
    tps_jw_key(w, "s\n");
    tps_jw_string_n(w, "a\0b", 3);
    tps_jw_object_end(w);
    tps_jw_key(w, "nest");
    tps_jw_array_begin(w);
    tps_jw_array_begin(w);
    tps_jw_string(w, "");
    tps_jw_array_end(w);
    tps_jw_array_end(w);
    tps_jw_object_end(w);
}

TEST(emit_compact)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    write_fixture(&w);
    const char *want = "{\"name\":\"x\\\"y\",\"n\":[1,-2,{}],\"e\":[],\"o\":{\"t\":true,\"f\":false,\"z\":null,"
                       "\"d\":0.5,\"inf\":null,\"big\":18446744073709551615,\"min\":-9223372036854775808,"
                       "\"s\\n\":\"a\\u0000b\"},\"nest\":[[\"\"]]}";
    CHECK_STR(tps_buf_cstr(&b), want);
    tps_error err;
    tps_json_doc *doc = parse_n(b.data, b.len, &err);
    CHECK(doc);
    tps_json_doc_free(doc);
    tps_buf_release(&b);
}

TEST(emit_pretty)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, true);
    write_fixture(&w);
    const char *want = "{\n"
                       "  \"name\": \"x\\\"y\",\n"
                       "  \"n\": [\n"
                       "    1,\n"
                       "    -2,\n"
                       "    {}\n"
                       "  ],\n"
                       "  \"e\": [],\n"
                       "  \"o\": {\n"
                       "    \"t\": true,\n"
                       "    \"f\": false,\n"
                       "    \"z\": null,\n"
                       "    \"d\": 0.5,\n"
                       "    \"inf\": null,\n"
                       "    \"big\": 18446744073709551615,\n"
                       "    \"min\": -9223372036854775808,\n"
                       "    \"s\\n\": \"a\\u0000b\"\n"
                       "  },\n"
                       "  \"nest\": [\n"
                       "    [\n"
                       "      \"\"\n"
                       "    ]\n"
                       "  ]\n"
                       "}";
    CHECK_STR(tps_buf_cstr(&b), want);
    tps_buf_release(&b);

    /* top-level scalars and arrays need no separators */
    tps_jw_init(&w, &b, true);
    tps_jw_array_begin(&w);
    tps_jw_double(&w, NAN);
    tps_jw_double(&w, -0.0);
    tps_jw_array_end(&w);
    CHECK_STR(tps_buf_cstr(&b), "[\n  null,\n  -0\n]");
    tps_buf_release(&b);
    tps_jw_init(&w, &b, false);
    tps_jw_string(&w, "only");
    CHECK_STR(tps_buf_cstr(&b), "\"only\"");
    tps_buf_release(&b);
}

static void emit_double(double v, char *out, size_t size)
{
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_double(&w, v);
    snprintf(out, size, "%s", tps_buf_cstr(&b) ? b.data : "(oom)");
    tps_buf_release(&b);
}

/* Significant digits of a decimal text: first to last non-zero digit of its mantissa. */
static int sig_digits(const char *t)
{
    int n = 0, last = 0;
    bool started = false;
    for (; *t && *t != 'e'; t++) {
        if (*t < '0' || *t > '9') continue;
        if (*t != '0') started = true;
        if (started) n++;
        if (*t != '0') last = n;
    }
    return last ? last : 1;
}

TEST(doubles_shortest_round_trip)
{
    static const struct {
        double v;
        const char *text;
    } fixed[] = {
        {0.1, "0.1"},       {1.0, "1"},         {100.0, "100"},       {1e21, "1e+21"},
        {1.5e10, "15000000000"}, {1e16, "10000000000000000"}, {1e17, "1e+17"}, {1e-5, "1e-05"},
        {123456789012345678.0, "1.2345678901234568e+17"}, {4096.0, "4096"},
        {5e-324, "5e-324"}, {-2.5, "-2.5"},     {0.0, "0"},           {-0.0, "-0"},
        {1.0 / 3, "0.3333333333333333"},        {DBL_MAX, "1.7976931348623157e+308"},
        {0.30000000000000004, "0.30000000000000004"},
    };
    char text[64];
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        emit_double(fixed[i].v, text, sizeof text);
        CHECK_STR(text, fixed[i].text);
    }
    for (int iter = 0; iter < 100000; iter++) {
        uint64_t bits = rng();
        double v;
        if (iter % 4 == 0) { /* also plain-looking values: small integers and short decimals */
            v = (double)(int64_t)(rng() % 2000001 - 1000000) / (double)(1 + rng() % 1000);
        } else {
            memcpy(&v, &bits, 8);
            if (!isfinite(v)) continue;
        }
        emit_double(v, text, sizeof text);
        double back = strtod(text, NULL);
        if (memcmp(&back, &v, 8) != 0) {
            printf("#   %.17g emitted as %s reads back as %.17g\n", v, text, back);
            tps_test_failed_now = 1;
            break;
        }
        /* shortest: one digit fewer does not read back */
        int d = sig_digits(text);
        if (d > 1) {
            char shorter[400];
            snprintf(shorter, sizeof shorter, "%.*g", d - 1, v);
            double s = strtod(shorter, NULL);
            if (memcmp(&s, &v, 8) == 0) {
                printf("#   %.17g emitted as %s but %s also reads back\n", v, text, shorter);
                tps_test_failed_now = 1;
                break;
            }
        }
        /* the text is valid JSON and our parser reads the same double */
        tps_error err;
        tps_json_doc *doc = parse(text, &err);
        if (!doc || memcmp(&tps_json_root(doc)->u.number.f64, &v, 8) != 0) {
            printf("#   %s: %s\n", text, doc ? "parsed to another double" : err.msg);
            tps_test_failed_now = 1;
            tps_json_doc_free(doc);
            break;
        }
        tps_json_doc_free(doc);
    }
}

/* Re-emitting a parsed document keeps every number's text (nothing rounded or reformatted),
 * decoded strings re-escaped, and the document order of keys. */
TEST(value_reemitted_verbatim)
{
    const char *in = " { \"rope_theta\" : 10000.0, \"eps\": 1e-05, \"big\": 18446744073709551615,"
                     " \"neg\": -0.50, \"s\": \"a\\u00e9\\n\\\"\", \"n\": null,"
                     " \"list\": [true, false, [], {}], \"k\\u0000\": 1 } ";
    const char *want = "{\"rope_theta\":10000.0,\"eps\":1e-05,\"big\":18446744073709551615,\"neg\":-0.50,"
                       "\"s\":\"a\xc3\xa9\\n\\\"\",\"n\":null,\"list\":[true,false,[],{}],\"k\\u0000\":1}";
    tps_error err;
    tps_json_doc *doc = parse(in, &err);
    CHECK(doc != NULL);
    if (!doc) return;
    tps_buf b = TPS_BUF_INIT;
    tps_jw w;
    tps_jw_init(&w, &b, false);
    tps_jw_value(&w, tps_json_root(doc));
    CHECK_STR(tps_buf_cstr(&b), want);
    /* and pretty, inside an object being written: the same separators as hand-written keys */
    tps_buf p = TPS_BUF_INIT;
    tps_jw_init(&w, &p, true);
    tps_jw_object_begin(&w);
    tps_jw_key(&w, "keys");
    tps_jw_value(&w, tps_json_get(tps_json_root(doc), "list"));
    tps_jw_object_end(&w);
    CHECK_STR(tps_buf_cstr(&p), "{\n  \"keys\": [\n    true,\n    false,\n    [],\n    {}\n  ]\n}");
    tps_buf_release(&b);
    tps_buf_release(&p);
    tps_json_doc_free(doc);
}

/* ---- tps_json_parse_lazy and tps_json_each: the full parse is the reference ---- */

typedef struct lazy_seen {
    tps_buf text; /* each element re-emitted compactly, one a line */
    size_t n, heap_before, heap_max;
} lazy_seen;

static tps_status lazy_collect(void *ctx, size_t i, const tps_json *item)
{
    lazy_seen *s = ctx;
    if (i != s->n) printf("#   element %zu handed over as %zu\n", s->n, i);
    s->n++;
    tps_jw w;
    tps_jw_init(&w, &s->text, false);
    tps_jw_value(&w, item);
    tps_buf_putc(&s->text, '\n');
    return TPS_OK;
}

#ifdef __GLIBC__
/* The heap in use while element i is in hand, the parse's own documents included. */
static tps_status lazy_measure(void *ctx, size_t i, const tps_json *item)
{
    (void)i, (void)item;
    lazy_seen *s = ctx;
    s->n++;
    size_t h = heap_in_use() - s->heap_before;
    if (h > s->heap_max) s->heap_max = h;
    return TPS_OK;
}
#endif

/* Parses text both ways; the lazy member "t" must give the elements the full parse gives,
 * the other members the same tree, and both must fail alike (with the same message when the
 * lazy scan itself found the array's end). */
static void lazy_against_full(const char *text, size_t len, const char *name)
{
    tps_error ef, el;
    tps_error_clear(&ef);
    tps_error_clear(&el);
    tps_json_doc *full = NULL, *lazy = NULL;
    tps_status sf = tps_json_parse(text, len, "doc", &full, &ef);
    tps_status sl = tps_json_parse_lazy(text, len, "doc", "t", &lazy, &el);
    lazy_seen seen = {TPS_BUF_INIT, 0, 0, 0};
    tps_buf want = TPS_BUF_INIT;
    bool scanned = sl == TPS_OK;
    if (sl == TPS_OK) {
        const tps_json *t = tps_json_get(tps_json_root(lazy), "t");
        if (t && t->type == TPS_JSON_ARRAY) sl = tps_json_each(text, len, "doc", t, lazy_collect, &seen, &el);
    }
    if ((sf == TPS_OK) != (sl == TPS_OK) || (sf && scanned && strcmp(ef.msg, el.msg) != 0)) {
        printf("#   %s: full parse %d \"%s\", lazy %d \"%s\"\n", name, (int)sf, ef.msg, (int)sl, el.msg);
        tps_test_failed_now = 1;
    }
    if (sf == TPS_OK && sl == TPS_OK) {
        const tps_json *t = tps_json_get(tps_json_root(full), "t");
        for (size_t i = 0; t && t->type == TPS_JSON_ARRAY && i < t->u.array.n; i++) {
            tps_jw w;
            tps_jw_init(&w, &want, false);
            tps_jw_value(&w, t->u.array.items[i]);
            tps_buf_putc(&want, '\n');
        }
        CHECK(want.len == seen.text.len && (!want.len || memcmp(want.data, seen.text.data, want.len) == 0));
        /* the rest of the tree: "t" itself differs (lazy), so compare the other members */
        const tps_json *rf = tps_json_root(full), *rl = tps_json_root(lazy);
        CHECK_EQ_U64(rf->u.object.n, rl->u.object.n);
        for (size_t i = 0; i < rf->u.object.n && i < rl->u.object.n; i++) {
            if (strcmp(rf->u.object.keys[i]->u.string.s, "t") == 0) continue;
            tps_buf a = TPS_BUF_INIT, b = TPS_BUF_INIT;
            tps_jw wa, wb;
            tps_jw_init(&wa, &a, false);
            tps_jw_init(&wb, &b, false);
            tps_jw_value(&wa, rf->u.object.values[i]);
            tps_jw_value(&wb, rl->u.object.values[i]);
            CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
            tps_buf_release(&a);
            tps_buf_release(&b);
        }
    }
    tps_buf_release(&want);
    tps_buf_release(&seen.text);
    tps_json_doc_free(full);
    tps_json_doc_free(lazy);
}

/* Compares the two ways of parsing text (len bytes), naming the case name in failures. */
typedef void (*both_ways_fn)(const char *text, size_t len, const char *name);

/* Every one-byte change of base to each of a few structural bytes, compared by fn. */
static void each_byte_changed(const char *base, both_ways_fn fn)
{
    size_t n = strlen(base);
    static const char repl[] = "[]{},:\"\\ 0a-";
    char *m = malloc(n);
    CHECK(m);
    if (!m) return;
    for (size_t at = 0; at < n; at++)
        for (size_t r = 0; r < sizeof repl - 1; r++) {
            memcpy(m, base, n);
            m[at] = repl[r];
            char name[64];
            snprintf(name, sizeof name, "byte %zu as '%c'", at, repl[r]);
            fn(m, n, name);
        }
    free(m);
}

/* Every malformed document of invalid_documents, between pre[k] and post[k] for k = 0, 1,
 * compared by fn. */
static void each_bad_case_inside(const char *const pre[2], const char *const post[2], both_ways_fn fn)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        size_t len = c->len ? c->len : strlen(c->text);
        for (int k = 0; k < 2; k++) {
            tps_buf b = TPS_BUF_INIT;
            tps_buf_puts(&b, pre[k]);
            tps_buf_append(&b, c->text, len);
            tps_buf_puts(&b, post[k]);
            fn(b.data, b.len, c->name);
            tps_buf_release(&b);
        }
    }
}

TEST(lazy_array_same_elements_as_full_parse)
{
    static const char *docs[] = {
        "{\"t\": []}",
        "{\"t\": [ ]}",
        "{\"a\": 1, \"t\": [1], \"z\": {\"t\": [2]}}",
        "{\"t\": [\"]\", \"[\", \"\\\"]\", {\"k\": [[], {}]}, -1.5e3, null, true, false], \"b\": \"x\"}",
        "{\"z\": [3], \"t\": [{\"name\": \"a,b\", \"shape\": [1, 2]}, {\"name\": \"\\u005d\"}]}",
        "[1, 2]",       /* no root object: nothing lazy */
        "{\"t\": 5}",   /* not an array: parsed as it is */
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) lazy_against_full(docs[i], strlen(docs[i]), docs[i]);
    /* the lazy node says how many elements and where the array ends */
    tps_error err;
    tps_json_doc *doc = NULL;
    const char *s = "{\"t\": [1, [2, 3], {\"x\": \",\"}] }";
    CHECK(tps_json_parse_lazy(s, strlen(s), "doc", "t", &doc, &err) == TPS_OK);
    const tps_json *t = doc ? tps_json_get(tps_json_root(doc), "t") : NULL;
    CHECK(t && t->u.array.lazy && t->u.array.n == 3 && t->u.array.items == NULL && s[t->u.array.end - 1] == ']' &&
          t->u.array.end == strlen(s) - 2);
    tps_json_doc_free(doc);
}

TEST(lazy_array_errors_as_full_parse)
{
    /* every malformed document of invalid_documents, as an element of the lazy array and as
     * the whole of a member after it */
    static const char *const pre[2] = {"{\"t\": [1, ", "{\"t\": [1], \"u\": "}, *const post[2] = {", 2]}", "}"};
    each_bad_case_inside(pre, post, lazy_against_full);
    /* a duplicate key inside an element, and the lazy member repeated */
    const char *dup = "{\"t\": [{\"a\": 1, \"b\": 2, \"a\": 3}]}", *twice = "{\"t\": [], \"t\": [1]}";
    lazy_against_full(dup, strlen(dup), "duplicate key in an element");
    lazy_against_full(twice, strlen(twice), "the member twice");
    /* one byte changed anywhere in a document with a lazy array: both parses agree */
    each_byte_changed("{\"a\": [1, 2], \"t\": [{\"n\": \"x\\\"y\", \"s\": [1, 2]}, [3, {\"k\": null}], \"e\\u00e9\"], \"z\": 1}",
                      lazy_against_full);
}

#ifdef __GLIBC__
static void manifest_entry(tps_buf *b, int i)
{
    tps_buf_printf(b, "{\"name\": \"layer.%d.w\", \"shape\": [64, 32], \"rank_shapes\": [[32, 32], [32, 32]], "
                      "\"partition\": {\"replicated\": false, \"dim\": 0}}", i);
}

static void header_entry(tps_buf *b, int i)
{
    tps_buf_printf(b, "\"model.layers.%d.mlp.experts.0.w1.weight\": {\"dtype\": \"BF16\", \"shape\": [64, 32], "
                      "\"data_offsets\": [%d, %d]}", i, i * 4096, (i + 1) * 4096);
}

/* open, 20,000 entries written by entry separated by commas, close, into b; returns the heap
 * a whole parse of it takes. */
static size_t big_document(tps_buf *b, const char *open, void (*entry)(tps_buf *, int), const char *close)
{
    tps_buf_puts(b, open);
    for (int i = 0; i < 20000; i++) {
        if (i) tps_buf_puts(b, ", ");
        entry(b, i);
    }
    tps_buf_puts(b, close);
    tps_error err;
    size_t before = heap_in_use();
    tps_json_doc *full = parse_n(b->data, b->len, &err);
    size_t used = heap_in_use() - before;
    CHECK(full);
    tps_json_doc_free(full);
    return used;
}
#endif

TEST(lazy_array_memory_is_one_element)
{
#ifdef __GLIBC__
    /* 20,000 manifest-like entries: the full tree is megabytes, one element a few KiB */
    tps_buf b = TPS_BUF_INIT;
    size_t full_bytes = big_document(&b, "{\"tp\": 2, \"t\": [", manifest_entry, "]}");
    tps_error err;
    tps_json_doc *lazy = NULL;
    lazy_seen seen = {TPS_BUF_INIT, 0, 0, 0};
    seen.heap_before = heap_in_use();
    CHECK(tps_json_parse_lazy(b.data, b.len, "doc", "t", &lazy, &err) == TPS_OK);
    const tps_json *t = lazy ? tps_json_get(tps_json_root(lazy), "t") : NULL;
    CHECK(t && tps_json_each(b.data, b.len, "doc", t, lazy_measure, &seen, &err) == TPS_OK);
    CHECK_EQ_U64(seen.n, 20000);
    if (seen.heap_max > 64 * 1024 || full_bytes < 100 * seen.heap_max)
        printf("#   full tree %zu bytes, lazy at most %zu bytes\n", full_bytes, seen.heap_max);
    CHECK(seen.heap_max <= 64 * 1024);
    CHECK(full_bytes >= 100 * seen.heap_max);
    tps_json_doc_free(lazy);
    tps_buf_release(&seen.text);
    tps_buf_release(&b);
#endif
}

/* ---- tps_json_parse_members: the full parse is the reference ---- */

typedef struct members_seen {
    tps_buf text; /* "key=value" of each member handed over, re-emitted compactly */
    size_t heap_before, heap_max;
    bool measure;
} members_seen;

static bool keep_k(void *ctx, const tps_json *key)
{
    (void)ctx;
    return strcmp(key->u.string.s, "k") == 0;
}

static void members_collect(void *ctx, const tps_json *key, const tps_json *value)
{
    members_seen *s = ctx;
#ifdef __GLIBC__
    if (s->measure) {
        size_t h = heap_in_use() - s->heap_before;
        if (h > s->heap_max) s->heap_max = h;
        return;
    }
#endif
    tps_jw w;
    tps_jw_init(&w, &s->text, false);
    tps_jw_string_n(&w, key->u.string.s, key->u.string.len);
    tps_buf_putc(&s->text, '=');
    tps_jw_init(&w, &s->text, false);
    tps_jw_value(&w, value);
    tps_buf_putc(&s->text, '\n');
}

/* Both parses of text: same status and message; the members handed over are the full tree's
 * root members in order; the tree keeps the keys, "k"'s value, and null nodes at the others'
 * offsets. */
static void members_against_full(const char *text, size_t len, const char *name)
{
    tps_error ef, em;
    tps_error_clear(&ef);
    tps_error_clear(&em);
    tps_json_doc *full = NULL, *mem = NULL;
    members_seen seen = {TPS_BUF_INIT, 0, 0, false};
    tps_status sf = tps_json_parse(text, len, "doc", &full, &ef);
    tps_status sm = tps_json_parse_members(text, len, "doc", keep_k, members_collect, &seen, &mem, &em);
    if (sf != sm || (sf && strcmp(ef.msg, em.msg) != 0)) {
        printf("#   %s: full parse %d \"%s\", members %d \"%s\"\n", name, (int)sf, ef.msg, (int)sm, em.msg);
        tps_test_failed_now = 1;
    }
    const tps_json *rf = full ? tps_json_root(full) : NULL, *rm = mem ? tps_json_root(mem) : NULL;
    if (sf == TPS_OK && sm == TPS_OK && rf->type == TPS_JSON_OBJECT) {
        members_seen want = {TPS_BUF_INIT, 0, 0, false};
        CHECK(rm->type == TPS_JSON_OBJECT && rm->u.object.n == rf->u.object.n);
        for (size_t i = 0; i < rf->u.object.n && i < rm->u.object.n; i++) {
            const tps_json *k = rf->u.object.keys[i], *vf = rf->u.object.values[i], *vm = rm->u.object.values[i];
            members_collect(&want, k, vf);
            CHECK_STR(rm->u.object.keys[i]->u.string.s, k->u.string.s);
            CHECK_EQ_U64(vm->offset, vf->offset);
            if (strcmp(k->u.string.s, "k") == 0) {
                tps_buf a = TPS_BUF_INIT, b = TPS_BUF_INIT;
                tps_jw wa, wb;
                tps_jw_init(&wa, &a, false);
                tps_jw_init(&wb, &b, false);
                tps_jw_value(&wa, vf);
                tps_jw_value(&wb, vm);
                CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
                tps_buf_release(&a);
                tps_buf_release(&b);
            } else {
                CHECK(vm->type == TPS_JSON_NULL);
            }
        }
        CHECK(want.text.len == seen.text.len && (!want.text.len || memcmp(want.text.data, seen.text.data, want.text.len) == 0));
        tps_buf_release(&want.text);
    }
    tps_buf_release(&seen.text);
    tps_json_doc_free(full);
    tps_json_doc_free(mem);
}

TEST(members_same_as_full_parse)
{
    static const char *docs[] = {
        "{}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3]}, \"k\": {\"x\": \"y\"}, \"b\": [1, [2]], \"c\": 3}",
        "{\"k\": [1], \"\\u00e9\": \"s\", \"n\": null}",
        "[{\"a\": 1}]", /* no root object: nothing handed over */
        "\"x\"",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) members_against_full(docs[i], strlen(docs[i]), docs[i]);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        members_against_full(bad_cases[i].text, bad_cases[i].len ? bad_cases[i].len : strlen(bad_cases[i].text),
                             bad_cases[i].name);
    /* as a root member's value, before and after others */
    static const char *const pre[2] = {"{\"v\": ", "{\"a\": {\"b\": 1}, \"v\": "}, *const post[2] = {", \"z\": [1]}", "}"};
    each_bad_case_inside(pre, post, members_against_full);
    const char *dup = "{\"a\": {\"x\": 1}, \"k\": {}, \"a\": {\"x\": 2}}";
    members_against_full(dup, strlen(dup), "a root key twice");
    each_byte_changed("{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [0, 12]}, \"k\": {\"m\": \"x\\\"y\"}, "
                      "\"e\\u00e9\": [1, {\"q\": null}]}",
                      members_against_full);
}

TEST(members_memory_is_keys_and_one_value)
{
#ifdef __GLIBC__
    /* 20,000 safetensors-like entries: the full tree against keys plus one value */
    tps_buf b = TPS_BUF_INIT;
    size_t full_bytes = big_document(&b, "{", header_entry, "}");
    tps_error err;
    members_seen seen = {TPS_BUF_INIT, 0, 0, true};
    tps_json_doc *mem = NULL;
    seen.heap_before = heap_in_use();
    CHECK(tps_json_parse_members(b.data, b.len, "doc", NULL, members_collect, &seen, &mem, &err) == TPS_OK);
    size_t kept = heap_in_use() - seen.heap_before;
    /* what stays is the keys (the names) and a null node a value: well under a third */
    if (3 * kept > full_bytes || 3 * seen.heap_max > full_bytes)
        printf("#   full tree %zu bytes; members kept %zu, at most %zu in hand\n", full_bytes, kept, seen.heap_max);
    CHECK(3 * kept <= full_bytes);
    CHECK(3 * seen.heap_max <= full_bytes);
    tps_json_doc_free(mem);
    tps_buf_release(&b);
#endif
}

int main(void)
{
    RUN(nested_document);
    RUN(all_escapes_decoded);
    RUN(surrogate_pairs_and_raw_utf8);
    RUN(numbers);
    RUN(whitespace_around_and_scalars);
    RUN(keys_compared_as_decoded_bytes);
    RUN(depth_64_accepted);
    RUN(invalid_documents);
    RUN(depth_65_refused);
    RUN(large_objects_fast_and_duplicates_found);
    RUN(memory_bounded_by_input);
    RUN(escape_round_trip_all_ascii_and_utf8);
    RUN(escape_forms);
    RUN(emit_compact);
    RUN(emit_pretty);
    RUN(doubles_shortest_round_trip);
    RUN(value_reemitted_verbatim);
    RUN(lazy_array_same_elements_as_full_parse);
    RUN(lazy_array_errors_as_full_parse);
    RUN(lazy_array_memory_is_one_element);
    RUN(members_same_as_full_parse);
    RUN(members_memory_is_keys_and_one_value);
    return tps_test_done();
}
