/* JSON parser and emitter (API and rules in json.h).
 *
 * Why our own parser rather than libyaml (already a dependency, and YAML 1.2 is nearly a
 * JSON superset) or a vendored library: safetensors headers and manifests are hostile input,
 * and we need exactly RFC 8259 -- libyaml accepts non-JSON (single quotes, comments,
 * anchors, unquoted scalars) and silently keeps duplicate keys, which is the safetensors
 * parser differential (TOB-SFTN-7).  We also want every error to carry the byte offset of
 * the problem and what was expected, and hard bounds on recursion and memory.  A strict
 * recursive-descent parser is small enough to audit:
 *   - recursion is bounded by TPS_JSON_MAX_DEPTH containers;
 *   - every node, decoded string and number text lives in one arena of a few large
 *     blocks, and each node is paid for by at least one input byte, so memory stays a small
 *     constant multiple of the input length;
 *   - duplicate keys are found by sorting each object's keys with a merge sort, which is
 *     O(n log n) even on adversarial input (a hash table could be flooded with colliding
 *     keys; qsort's complexity is not guaranteed by the C standard).
 * The document does not point into the input: the caller may free the text after parsing.
 *
 * strtod and "%g" follow LC_NUMERIC; tpshard never calls setlocale, so both use the "C"
 * locale's '.' as JSON requires. */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"

/* ------------------------------------------------------------------------------------ */
/* Arena */

typedef struct arena_block {
    struct arena_block *next;
    size_t cap, used;
    _Alignas(tps_json) unsigned char data[];
} arena_block;

struct tps_json_doc {
    arena_block *blocks; /* the first one is where small allocations go */
    size_t next_size;    /* capacity of the next shared block */
    size_t max_size;     /* blocks stop doubling here, so the last one wastes little */
    tps_json *root;
};

#define ARENA_FIRST_BLOCK 4096
#define ARENA_MAX_BLOCK (16u << 20)
/* Nodes hold pointers, size_t and double at most: their alignment is enough for all. */
#define ARENA_ALIGN _Alignof(tps_json)

static arena_block *block_new(size_t cap)
{
    if (cap > SIZE_MAX - sizeof(arena_block)) return NULL;
    arena_block *b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

static void *arena_alloc(tps_json_doc *doc, size_t n)
{
    if (n > SIZE_MAX - ARENA_ALIGN) return NULL;
    n = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    arena_block *cur = doc->blocks;
    if (cur && cur->cap - cur->used >= n) {
        void *p = cur->data + cur->used;
        cur->used += n;
        return p;
    }
    /* A request larger than a quarter of a shared block gets a block of its own, linked
     * behind the current one, so at most a quarter of each shared block is left unused. */
    if (cur && n > doc->next_size / 4) {
        arena_block *b = block_new(n);
        if (!b) return NULL;
        b->used = n;
        b->next = cur->next;
        cur->next = b;
        return b->data;
    }
    size_t cap = doc->next_size;
    if (cap < n) cap = n;
    arena_block *b = block_new(cap);
    if (!b) return NULL;
    if (doc->next_size < doc->max_size) doc->next_size *= 2;
    b->next = cur;
    doc->blocks = b;
    b->used = n;
    return b->data;
}

void tps_json_doc_free(tps_json_doc *doc)
{
    if (!doc) return;
    arena_block *b = doc->blocks;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

const tps_json *tps_json_root(const tps_json_doc *doc) { return doc ? doc->root : NULL; }

/* ------------------------------------------------------------------------------------ */
/* Parser */

typedef struct parser {
    const unsigned char *in;
    size_t len, pos;
    const char *what;
    tps_error *err;
    tps_json_doc *doc;
    /* Children of the open containers (object members as key, value pairs), moved into
     * the arena when their container closes; also the merge sort's scratch space. */
    tps_json **stack;
    size_t sp, stack_cap;
    tps_buf scratch; /* a string being decoded */
    const char *lazy_key; /* tps_json_parse_lazy: the root member only scanned, or NULL */
    tps_json_member_fn member_fn; /* tps_json_parse_members: the root's values, one at a time */
    tps_json_keep_fn keep;
    void *member_ctx;
} parser;

static tps_status fail_at(parser *ps, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static tps_status fail_at(parser *ps, size_t off, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tps_fail(ps->err, TPS_EINVALID, "%s: byte %zu: %s", ps->what, off, msg);
}

static tps_status fail_oom(parser *ps)
{
    char what[300];
    snprintf(what, sizeof what, "parsing %.250s", ps->what);
    return tps_fail_oom(ps->err, what);
}

/* What is at byte off, for "found ..." in messages. */
static const char *describe(const parser *ps, size_t off, char *buf, size_t size)
{
    if (off >= ps->len) return "end of input";
    unsigned char c = ps->in[off];
    if (c > 0x20 && c < 0x7f) snprintf(buf, size, "'%c'", c);
    else snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

static tps_status fail_expected(parser *ps, const char *expected)
{
    char d[32];
    return fail_at(ps, ps->pos, "expected %s, found %s", expected, describe(ps, ps->pos, d, sizeof d));
}

static void skip_ws(parser *ps)
{
    while (ps->pos < ps->len) {
        unsigned char c = ps->in[ps->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        ps->pos++;
    }
}

static tps_json *new_node(parser *ps, tps_json_type type, size_t offset)
{
    tps_json *v = arena_alloc(ps->doc, sizeof *v);
    if (!v) return NULL;
    memset(v, 0, sizeof *v);
    v->type = type;
    v->offset = offset;
    return v;
}

static tps_status push(parser *ps, tps_json *v)
{
    if (ps->sp == ps->stack_cap) {
        size_t cap = ps->stack_cap ? ps->stack_cap * 2 : 256;
        if (cap > SIZE_MAX / sizeof *ps->stack) return fail_oom(ps);
        tps_json **s = realloc(ps->stack, cap * sizeof *s);
        if (!s) return fail_oom(ps);
        ps->stack = s;
        ps->stack_cap = cap;
    }
    ps->stack[ps->sp++] = v;
    return TPS_OK;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at ps->pos + 2 (after "\u"); -1 when they are not all there. */
static long read_u4(const parser *ps, size_t at)
{
    if (ps->len - at < 6) return -1;
    long v = 0;
    for (int k = 2; k < 6; k++) {
        int h = hexval(ps->in[at + (size_t)k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static void put_utf8(tps_buf *b, unsigned long cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    tps_buf_append(b, u, n);
}

/* Length of the valid UTF-8 sequence of a non-ASCII lead byte at off, or fails naming what
 * is wrong with it (RFC 3629 table 4: the second byte's range depends on the lead byte). */
static tps_status utf8_seq(parser *ps, size_t off, size_t *seqlen)
{
    const unsigned char *p = ps->in + off;
    unsigned char c = p[0], lo = 0x80, hi = 0xbf;
    size_t n;
    if (c < 0xc2) {
        if (c >= 0xc0) return fail_at(ps, off, "invalid UTF-8: overlong encoding (lead byte 0x%02x)", c);
        return fail_at(ps, off, "invalid UTF-8: unexpected continuation byte 0x%02x", c);
    } else if (c < 0xe0) {
        n = 2;
    } else if (c < 0xf0) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c < 0xf5) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else if (c < 0xf8) {
        return fail_at(ps, off, "invalid UTF-8: code point above U+10FFFF (lead byte 0x%02x)", c);
    } else {
        return fail_at(ps, off, "invalid UTF-8: byte 0x%02x never occurs in UTF-8", c);
    }
    if (ps->len - off < n) return fail_at(ps, off, "invalid UTF-8: sequence cut off by the end of input");
    if (p[1] < lo || p[1] > hi) {
        if (p[1] >= 0x80 && p[1] <= 0xbf) {
            if (c == 0xed) return fail_at(ps, off, "invalid UTF-8: encoded surrogate (U+D800..U+DFFF)");
            if (c == 0xf4) return fail_at(ps, off, "invalid UTF-8: code point above U+10FFFF");
            return fail_at(ps, off, "invalid UTF-8: overlong encoding");
        }
        return fail_at(ps, off, "invalid UTF-8: lead byte 0x%02x not followed by a continuation byte", c);
    }
    for (size_t k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xbf)
            return fail_at(ps, off, "invalid UTF-8: lead byte 0x%02x not followed by a continuation byte", c);
    *seqlen = n;
    return TPS_OK;
}

/* The escape at ps->pos (a backslash) into ps->scratch; advances past it. */
static tps_status parse_escape(parser *ps)
{
    size_t at = ps->pos;
    if (ps->len - at < 2) return fail_at(ps, at, "unterminated escape at the end of input");
    unsigned char e = ps->in[at + 1];
    char c;
    switch (e) {
    case '"': c = '"'; break;
    case '\\': c = '\\'; break;
    case '/': c = '/'; break;
    case 'b': c = '\b'; break;
    case 'f': c = '\f'; break;
    case 'n': c = '\n'; break;
    case 'r': c = '\r'; break;
    case 't': c = '\t'; break;
    case 'u': {
        long u = read_u4(ps, at);
        if (u < 0) return fail_at(ps, at, "expected 4 hex digits after \\u");
        ps->pos = at + 6;
        if (u >= 0xdc00 && u <= 0xdfff)
            return fail_at(ps, at, "lone surrogate \\u%04lX (a low surrogate without a high one)", u);
        if (u >= 0xd800 && u <= 0xdbff) {
            long lo = -1;
            if (ps->len - ps->pos >= 2 && ps->in[ps->pos] == '\\' && ps->in[ps->pos + 1] == 'u')
                lo = read_u4(ps, ps->pos);
            if (lo < 0xdc00 || lo > 0xdfff)
                return fail_at(ps, at, "lone surrogate \\u%04lX (expected \\uDC00..\\uDFFF to follow)", u);
            ps->pos += 6;
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        put_utf8(&ps->scratch, (unsigned long)u);
        return TPS_OK;
    }
    default: {
        char d[32];
        return fail_at(ps, at, "invalid escape: backslash followed by %s", describe(ps, at + 1, d, sizeof d));
    }
    }
    tps_buf_putc(&ps->scratch, c);
    ps->pos = at + 2;
    return TPS_OK;
}

/* A string at ps->pos (the opening quote), decoded into the arena. */
static tps_status parse_string(parser *ps, tps_json **out)
{
    tps_status st;
    size_t open = ps->pos;
    tps_buf_reset(&ps->scratch);
    ps->pos++;
    size_t run = ps->pos; /* start of bytes copied as they are */
    for (;;) {
        if (ps->pos >= ps->len) return fail_at(ps, open, "unterminated string");
        unsigned char c = ps->in[ps->pos];
        if (c == '"' || c == '\\') {
            tps_buf_append(&ps->scratch, ps->in + run, ps->pos - run);
            if (c == '"') break;
            if ((st = parse_escape(ps)) != TPS_OK) return st;
            run = ps->pos;
        } else if (c < 0x20) {
            return fail_at(ps, ps->pos, "control character 0x%02x in a string (must be escaped)", c);
        } else if (c < 0x80) {
            ps->pos++;
        } else {
            size_t n = 0;
            if ((st = utf8_seq(ps, ps->pos, &n)) != TPS_OK) return st;
            ps->pos += n;
        }
    }
    ps->pos++; /* closing quote */
    if (ps->scratch.oom) return fail_oom(ps);
    size_t n = ps->scratch.len;
    tps_json *v = new_node(ps, TPS_JSON_STRING, open);
    char *s = n < SIZE_MAX ? arena_alloc(ps->doc, n + 1) : NULL;
    if (!v || !s) return fail_oom(ps);
    if (n) memcpy(s, ps->scratch.data, n);
    s[n] = '\0';
    v->u.string.s = s;
    v->u.string.len = n;
    *out = v;
    return TPS_OK;
}

static bool is_digit(const parser *ps, size_t at) { return at < ps->len && ps->in[at] >= '0' && ps->in[at] <= '9'; }

/* number = [ minus ] int [ frac ] [ exp ]; int = zero / ( digit1-9 *DIGIT ) (RFC 8259 §6) */
static tps_status parse_number(parser *ps, tps_json **out)
{
    size_t start = ps->pos, p = ps->pos;
    bool neg = false, plain = true;
    if (ps->in[p] == '-') {
        neg = true;
        p++;
    }
    if (!is_digit(ps, p)) {
        ps->pos = p;
        return fail_expected(ps, "a digit after '-'");
    }
    if (ps->in[p] == '0') {
        p++;
        if (is_digit(ps, p)) return fail_at(ps, start, "leading zeros are not allowed in numbers");
    } else {
        while (is_digit(ps, p)) p++;
    }
    size_t int_end = p;
    if (p < ps->len && ps->in[p] == '.') {
        plain = false;
        p++;
        if (!is_digit(ps, p)) {
            ps->pos = p;
            return fail_expected(ps, "a digit after the decimal point");
        }
        while (is_digit(ps, p)) p++;
    }
    if (p < ps->len && (ps->in[p] == 'e' || ps->in[p] == 'E')) {
        plain = false;
        p++;
        if (p < ps->len && (ps->in[p] == '+' || ps->in[p] == '-')) p++;
        if (!is_digit(ps, p)) {
            ps->pos = p;
            return fail_expected(ps, "a digit in the exponent");
        }
        while (is_digit(ps, p)) p++;
    }
    size_t n = p - start;
    tps_json *v = new_node(ps, TPS_JSON_NUMBER, start);
    char *text = arena_alloc(ps->doc, n + 1);
    if (!v || !text) return fail_oom(ps);
    memcpy(text, ps->in + start, n);
    text[n] = '\0';
    v->u.number.text = text;
    v->u.number.len = n;
    v->u.number.f64 = strtod(text, NULL); /* the grammar was checked, so strtod reads all of it */
    if (!neg && plain) {
        uint64_t u = 0;
        bool fits = true;
        for (size_t k = start; k < int_end && fits; k++)
            fits = tps_mul_u64(u, 10, &u) && tps_add_u64(u, (uint64_t)(ps->in[k] - '0'), &u);
        v->u.number.is_u64 = fits;
        v->u.number.u64 = fits ? u : 0;
    }
    ps->pos = p;
    *out = v;
    return TPS_OK;
}

static tps_status parse_literal(parser *ps, const char *word, tps_json_type type, bool b, tps_json **out)
{
    size_t n = strlen(word);
    if (ps->len - ps->pos < n || memcmp(ps->in + ps->pos, word, n) != 0) {
        char expected[32];
        snprintf(expected, sizeof expected, "'%s'", word);
        return fail_at(ps, ps->pos, "invalid literal (expected %s)", expected);
    }
    tps_json *v = new_node(ps, type, ps->pos);
    if (!v) return fail_oom(ps);
    v->u.boolean = b;
    ps->pos += n;
    *out = v;
    return TPS_OK;
}

/* Moves the top n stack entries into a new arena array. */
static tps_status pop_into(parser *ps, size_t n, tps_json ***out)
{
    *out = NULL;
    if (n == 0) return TPS_OK;
    tps_json **a = arena_alloc(ps->doc, n * sizeof *a); /* n <= stack_cap: no overflow */
    if (!a) return fail_oom(ps);
    memcpy(a, ps->stack + ps->sp - n, n * sizeof *a);
    ps->sp -= n;
    *out = a;
    return TPS_OK;
}

static int key_cmp(const tps_json *a, const tps_json *b)
{
    size_t n = a->u.string.len < b->u.string.len ? a->u.string.len : b->u.string.len;
    int c = n ? memcmp(a->u.string.s, b->u.string.s, n) : 0;
    if (c) return c;
    if (a->u.string.len != b->u.string.len) return a->u.string.len < b->u.string.len ? -1 : 1;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Bottom-up merge sort of k[0..n) by key_cmp, using tmp[0..n). */
static void sort_keys(tps_json **k, tps_json **tmp, size_t n)
{
    tps_json **src = k, **dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = mid + width < n ? mid + width : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) dst[o++] = key_cmp(src[j], src[i]) < 0 ? src[j++] : src[i++];
            while (i < mid) dst[o++] = src[i++];
            while (j < hi) dst[o++] = src[j++];
        }
        tps_json **t = src;
        src = dst;
        dst = t;
    }
    if (src != k) memcpy(k, src, n * sizeof *k);
}

/* Refuses a duplicate key among keys[0..n), naming its first repetition in the document. */
static tps_status check_duplicates(parser *ps, tps_json *const *keys, size_t n)
{
    if (n < 2) return TPS_OK;
    /* The pairs just moved out of the stack left 2n free slots above ps->sp. */
    tps_json **k = ps->stack + ps->sp, **tmp = k + n;
    memcpy(k, keys, n * sizeof *k);
    sort_keys(k, tmp, n);
    /* Equal keys sort together by offset: a run's first two are its earliest repetition. */
    const tps_json *first = NULL, *dup = NULL;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && k[j]->u.string.len == k[i]->u.string.len &&
                        memcmp(k[j]->u.string.s, k[i]->u.string.s, k[i]->u.string.len) == 0;
             j++)
            ;
        if (j > i + 1 && (!dup || k[i + 1]->offset < dup->offset)) {
            first = k[i];
            dup = k[i + 1];
        }
    }
    if (!dup) return TPS_OK;
    tps_buf name = TPS_BUF_INIT;
    tps_json_escape(&name, first->u.string.s, first->u.string.len > 200 ? 200 : first->u.string.len);
    const char *shown = tps_buf_cstr(&name);
    tps_status st = fail_at(ps, dup->offset, "duplicate key %s%s (first at byte %zu)", shown ? shown : "",
                            first->u.string.len > 200 ? " (truncated)" : "", first->offset);
    tps_buf_release(&name);
    return st;
}

static tps_status parse_value(parser *ps, int depth, tps_json **out);

static tps_status parse_array(parser *ps, int depth, tps_json **out)
{
    tps_status st;
    tps_json *v = new_node(ps, TPS_JSON_ARRAY, ps->pos);
    if (!v) return fail_oom(ps);
    size_t base = ps->sp;
    ps->pos++;
    skip_ws(ps);
    if (ps->pos < ps->len && ps->in[ps->pos] == ']') {
        ps->pos++;
        *out = v;
        return TPS_OK;
    }
    for (;;) {
        tps_json *item;
        if ((st = parse_value(ps, depth + 1, &item)) != TPS_OK) return st;
        if ((st = push(ps, item)) != TPS_OK) return st;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->in[ps->pos] == ']') break;
        if (ps->pos >= ps->len || ps->in[ps->pos] != ',') return fail_expected(ps, "',' or ']' in an array");
        ps->pos++;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->in[ps->pos] == ']') return fail_at(ps, ps->pos, "trailing comma before ']'");
    }
    ps->pos++;
    v->u.array.n = ps->sp - base;
    if ((st = pop_into(ps, v->u.array.n, &v->u.array.items)) != TPS_OK) return st;
    *out = v;
    return TPS_OK;
}

static bool is_lazy_key(const parser *ps, const tps_json *key)
{
    return ps->lazy_key && key->u.string.len == strlen(ps->lazy_key) &&
           memcmp(key->u.string.s, ps->lazy_key, key->u.string.len) == 0;
}

/* The extent and element count of the array at ps->pos, without building it: brackets
 * and braces counted outside strings, commas between elements counted at its own level.
 * Only bytes are looked at here; tps_json_each parses the elements strictly, and where
 * they are not JSON the two views part and that parse reports it. */
static tps_status scan_lazy_array(parser *ps, tps_json **out)
{
    tps_json *v = new_node(ps, TPS_JSON_ARRAY, ps->pos);
    if (!v) return fail_oom(ps);
    size_t depth = 0, commas = 0;
    bool any = false;
    for (size_t i = ps->pos; i < ps->len; i++) {
        unsigned char c = ps->in[i];
        if (c == '"') {
            for (i++; i < ps->len && ps->in[i] != '"'; i++)
                if (ps->in[i] == '\\') i++;
            if (i >= ps->len) break;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth == 0) {
                v->u.array.n = any ? commas + 1 : 0;
                v->u.array.lazy = true;
                v->u.array.end = ps->pos = i + 1;
                *out = v;
                return TPS_OK;
            }
        } else if (c == ',' && depth == 1) {
            commas++;
        }
        if (depth == 1 && c != '[' && c != ' ' && c != '\t' && c != '\n' && c != '\r') any = true;
    }
    return fail_at(ps, v->offset, "an array that does not end");
}

static tps_json_doc *doc_new(size_t len);

/* tps_json_parse_members: a root member's value, parsed into a document of its own (unless
 * kept), handed over, and left in the tree as a null node at its offset. */
static tps_status parse_member_value(parser *ps, const tps_json *key, tps_json **out)
{
    tps_json_doc *tree = ps->doc, *own = NULL;
    bool keep = ps->keep && ps->keep(ps->member_ctx, key);
    if (!keep && !(ps->doc = own = doc_new(ARENA_FIRST_BLOCK * 4))) {
        ps->doc = tree;
        return fail_oom(ps);
    }
    tps_json *val = NULL;
    tps_status st = parse_value(ps, 1, &val);
    ps->doc = tree;
    if (st == TPS_OK) {
        ps->member_fn(ps->member_ctx, key, val);
        if (!keep && !(val = new_node(ps, TPS_JSON_NULL, val->offset))) st = fail_oom(ps);
    }
    tps_json_doc_free(own);
    *out = val;
    return st;
}

static tps_status parse_object(parser *ps, int depth, tps_json **out)
{
    tps_status st;
    tps_json *v = new_node(ps, TPS_JSON_OBJECT, ps->pos);
    if (!v) return fail_oom(ps);
    size_t base = ps->sp;
    ps->pos++;
    skip_ws(ps);
    if (ps->pos < ps->len && ps->in[ps->pos] == '}') {
        ps->pos++;
        *out = v;
        return TPS_OK;
    }
    for (;;) {
        tps_json *key, *val;
        if (ps->pos >= ps->len || ps->in[ps->pos] != '"') return fail_expected(ps, "a string key in an object");
        if ((st = parse_string(ps, &key)) != TPS_OK) return st;
        skip_ws(ps);
        if (ps->pos >= ps->len || ps->in[ps->pos] != ':') return fail_expected(ps, "':' after an object key");
        ps->pos++;
        skip_ws(ps);
        if (depth == 0 && is_lazy_key(ps, key) && ps->pos < ps->len && ps->in[ps->pos] == '[')
            st = scan_lazy_array(ps, &val);
        else if (depth == 0 && ps->member_fn)
            st = parse_member_value(ps, key, &val);
        else
            st = parse_value(ps, depth + 1, &val);
        if (st != TPS_OK) return st;
        if ((st = push(ps, key)) != TPS_OK || (st = push(ps, val)) != TPS_OK) return st;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->in[ps->pos] == '}') break;
        if (ps->pos >= ps->len || ps->in[ps->pos] != ',') return fail_expected(ps, "',' or '}' in an object");
        ps->pos++;
        skip_ws(ps);
        if (ps->pos < ps->len && ps->in[ps->pos] == '}') return fail_at(ps, ps->pos, "trailing comma before '}'");
    }
    ps->pos++;
    size_t n = (ps->sp - base) / 2;
    tps_json **keys = arena_alloc(ps->doc, n * sizeof *keys), **vals = arena_alloc(ps->doc, n * sizeof *vals);
    if (!keys || !vals) return fail_oom(ps);
    for (size_t i = 0; i < n; i++) {
        keys[i] = ps->stack[base + 2 * i];
        vals[i] = ps->stack[base + 2 * i + 1];
    }
    ps->sp = base;
    v->u.object.keys = keys;
    v->u.object.values = vals;
    v->u.object.n = n;
    if ((st = check_duplicates(ps, keys, n)) != TPS_OK) return st;
    *out = v;
    return TPS_OK;
}

/* A value after optional whitespace; depth = containers already open around it. */
static tps_status parse_value(parser *ps, int depth, tps_json **out)
{
    skip_ws(ps);
    if (ps->pos >= ps->len) return fail_expected(ps, "a value");
    unsigned char c = ps->in[ps->pos];
    switch (c) {
    case '{':
    case '[':
        if (depth >= TPS_JSON_MAX_DEPTH)
            return fail_at(ps, ps->pos, "nesting deeper than %d arrays and objects", TPS_JSON_MAX_DEPTH);
        return c == '{' ? parse_object(ps, depth, out) : parse_array(ps, depth, out);
    case '"': return parse_string(ps, out);
    case 't': return parse_literal(ps, "true", TPS_JSON_BOOL, true, out);
    case 'f': return parse_literal(ps, "false", TPS_JSON_BOOL, false, out);
    case 'n': return parse_literal(ps, "null", TPS_JSON_NULL, false, out);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps, out);
        return fail_expected(ps, "a value");
    }
}

/* An empty document for about len bytes of input: its blocks stop doubling near that size. */
static tps_json_doc *doc_new(size_t len)
{
    tps_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) return NULL;
    doc->next_size = ARENA_FIRST_BLOCK;
    doc->max_size = ARENA_MAX_BLOCK;
    while (doc->max_size > ARENA_FIRST_BLOCK && doc->max_size / 2 >= len) doc->max_size /= 2;
    return doc;
}

static tps_status parse_document(parser *ps, tps_json_doc **out);

tps_status tps_json_parse(const char *text, size_t len, const char *what, tps_json_doc **out, tps_error *err)
{
    return tps_json_parse_lazy(text, len, what, NULL, out, err);
}

tps_status tps_json_parse_lazy(const char *text, size_t len, const char *what, const char *lazy_key, tps_json_doc **out,
                               tps_error *err)
{
    parser ps = {.in = (const unsigned char *)text, .len = len, .what = what, .err = err, .lazy_key = lazy_key};
    return parse_document(&ps, out);
}

tps_status tps_json_parse_members(const char *text, size_t len, const char *what, tps_json_keep_fn keep,
                                  tps_json_member_fn fn, void *ctx, tps_json_doc **out, tps_error *err)
{
    parser ps = {.in = (const unsigned char *)text, .len = len, .what = what, .err = err, .member_fn = fn,
                 .keep = keep, .member_ctx = ctx};
    return parse_document(&ps, out);
}

/* The whole input as one value, with ps's options. */
static tps_status parse_document(parser *ps, tps_json_doc **out)
{
    tps_status st;
    *out = NULL;
    ps->scratch = (tps_buf)TPS_BUF_INIT;
    if (!(ps->doc = doc_new(ps->len))) return fail_oom(ps);
    TPS_CHECK(parse_value(ps, 0, &ps->doc->root));
    skip_ws(ps);
    if (ps->pos < ps->len) {
        char d[32];
        st = fail_at(ps, ps->pos, "expected the end of input after the value, found %s",
                     describe(ps, ps->pos, d, sizeof d));
        goto cleanup;
    }
    *out = ps->doc;
    ps->doc = NULL;
cleanup:
    tps_json_doc_free(ps->doc);
    free(ps->stack);
    tps_buf_release(&ps->scratch);
    return st;
}

/* One element of a lazy array at ps->pos, parsed into a document of its own, handed to fn
 * and freed. */
static tps_status each_lazy_item(parser *ps, size_t i, tps_json_each_fn fn, void *ctx)
{
    tps_json *item;
    if (!(ps->doc = doc_new(ARENA_FIRST_BLOCK * 4))) return fail_oom(ps);
    tps_status st = parse_value(ps, 2, &item); /* inside the root object and the array */
    if (st == TPS_OK) st = fn(ctx, i, item);
    tps_json_doc_free(ps->doc);
    ps->doc = NULL;
    return st;
}

tps_status tps_json_each(const char *text, size_t len, const char *what, const tps_json *arr, tps_json_each_fn fn,
                         void *ctx, tps_error *err)
{
    tps_status st = TPS_OK;
    if (!arr->u.array.lazy) {
        for (size_t i = 0; i < arr->u.array.n && st == TPS_OK; i++) st = fn(ctx, i, arr->u.array.items[i]);
        return st;
    }
    /* The array's own bytes only: an element that is not JSON cannot run on past it. */
    parser ps = {.in = (const unsigned char *)text, .len = arr->u.array.end <= len ? arr->u.array.end : len,
                 .pos = arr->offset + 1, .what = what, .err = err};
    ps.scratch = (tps_buf)TPS_BUF_INIT;
    size_t i = 0;
    skip_ws(&ps);
    if (ps.pos < ps.len && ps.in[ps.pos] == ']') goto end;
    for (;; i++) {
        if (i >= arr->u.array.n) { /* the scan counted fewer: bytes it read otherwise than JSON does */
            st = fail_expected(&ps, "the end of the array");
            goto cleanup;
        }
        TPS_CHECK(each_lazy_item(&ps, i, fn, ctx));
        skip_ws(&ps);
        if (ps.pos < ps.len && ps.in[ps.pos] == ']') {
            i++;
            break;
        }
        if (ps.pos >= ps.len || ps.in[ps.pos] != ',') {
            st = fail_expected(&ps, "',' or ']' in an array");
            goto cleanup;
        }
        ps.pos++;
        skip_ws(&ps);
        if (ps.pos < ps.len && ps.in[ps.pos] == ']') {
            st = fail_at(&ps, ps.pos, "trailing comma before ']'");
            goto cleanup;
        }
    }
end:
    if (i != arr->u.array.n || ps.pos + 1 != ps.len)
        st = fail_at(&ps, ps.pos, "the array's elements are not what its scan found");
cleanup:
    free(ps.stack);
    tps_buf_release(&ps.scratch);
    return st;
}

const tps_json *tps_json_get(const tps_json *obj, const char *key)
{
    if (!obj || obj->type != TPS_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->u.object.n; i++) {
        const tps_json *k = obj->u.object.keys[i];
        if (k->u.string.len == n && memcmp(k->u.string.s, key, n) == 0) return obj->u.object.values[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Emitter */

void tps_json_escape(tps_buf *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    tps_buf_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        tps_buf_append(out, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            e[1] = 'u';
            e[2] = '0';
            e[3] = '0';
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            elen = 6;
        }
        tps_buf_append(out, e, elen);
    }
    tps_buf_append(out, s + run, n - run);
    tps_buf_putc(out, '"');
}

void tps_jw_init(tps_jw *w, tps_buf *out, bool pretty)
{
    memset(w, 0, sizeof *w);
    w->out = out;
    w->pretty = pretty;
}

static void newline_indent(tps_jw *w, int depth)
{
    tps_buf_putc(w->out, '\n');
    for (int i = 0; i < depth; i++) tps_buf_append(w->out, "  ", 2);
}

/* Separator and indentation before a value or a key at the current depth. */
static void before_item(tps_jw *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth == 0) return;
    if (w->need_comma[w->depth]) tps_buf_putc(w->out, ',');
    if (w->pretty) newline_indent(w, w->depth);
    w->need_comma[w->depth] = true;
}

static void open_container(tps_jw *w, char c)
{
    before_item(w);
    if (w->depth >= TPS_JSON_MAX_DEPTH) {
        w->out->oom = true; /* a writer bug; makes the whole text unusable rather than wrong */
        return;
    }
    tps_buf_putc(w->out, c);
    w->depth++;
    w->need_comma[w->depth] = false;
}

static void close_container(tps_jw *w, char c)
{
    if (w->depth <= 0) {
        w->out->oom = true;
        return;
    }
    bool had_items = w->need_comma[w->depth];
    w->depth--;
    if (w->pretty && had_items) newline_indent(w, w->depth);
    tps_buf_putc(w->out, c);
}

void tps_jw_object_begin(tps_jw *w) { open_container(w, '{'); }
void tps_jw_object_end(tps_jw *w) { close_container(w, '}'); }
void tps_jw_array_begin(tps_jw *w) { open_container(w, '['); }
void tps_jw_array_end(tps_jw *w) { close_container(w, ']'); }

static void key_n(tps_jw *w, const char *key, size_t n)
{
    before_item(w);
    tps_json_escape(w->out, key, n);
    tps_buf_append(w->out, ": ", w->pretty ? 2 : 1);
    w->after_key = true;
}

void tps_jw_key(tps_jw *w, const char *key) { key_n(w, key, strlen(key)); }

void tps_jw_string_n(tps_jw *w, const char *s, size_t n)
{
    before_item(w);
    tps_json_escape(w->out, s, n);
}

void tps_jw_string(tps_jw *w, const char *s) { tps_jw_string_n(w, s, strlen(s)); }

void tps_jw_u64(tps_jw *w, uint64_t v)
{
    before_item(w);
    tps_buf_printf(w->out, "%" PRIu64, v);
}

void tps_jw_u64_array(tps_jw *w, const uint64_t *v, size_t n)
{
    tps_jw_array_begin(w);
    for (size_t i = 0; i < n; i++) tps_jw_u64(w, v[i]);
    tps_jw_array_end(w);
}

void tps_jw_i64(tps_jw *w, int64_t v)
{
    before_item(w);
    tps_buf_printf(w->out, "%" PRId64, v);
}

void tps_jw_double(tps_jw *w, double v)
{
    before_item(w);
    if (!isfinite(v)) {
        tps_buf_append(w->out, "null", 4);
        return;
    }
    /* The fewest significant digits that read back to the same bits; 17 always do. */
    char text[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, v);
        double back = strtod(text, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) break;
    }
    /* "%g" writes 100 as "1e+02" at one digit; below 1e17 write the same digits without an
     * exponent, padded with zeros, as JavaScript and Python do.  The value is unchanged. */
    const char *e = strchr(text, 'e');
    int exp10 = e ? atoi(e + 1) : -1;
    if (exp10 >= 0 && exp10 < 17) {
        char plain[40];
        size_t n = 0;
        for (const char *c = text; c < e; c++)
            if (*c != '.') plain[n++] = *c;
        size_t ndigits = n - (text[0] == '-');
        for (; ndigits < (size_t)exp10 + 1; ndigits++) plain[n++] = '0';
        plain[n] = '\0';
        memcpy(text, plain, n + 1);
    }
    tps_buf_puts(w->out, text);
}

void tps_jw_bool(tps_jw *w, bool v)
{
    before_item(w);
    tps_buf_puts(w->out, v ? "true" : "false");
}

void tps_jw_null(tps_jw *w)
{
    before_item(w);
    tps_buf_append(w->out, "null", 4);
}

void tps_jw_value(tps_jw *w, const tps_json *v)
{
    switch (v->type) {
    case TPS_JSON_NULL: tps_jw_null(w); break;
    case TPS_JSON_BOOL: tps_jw_bool(w, v->u.boolean); break;
    case TPS_JSON_NUMBER:
        before_item(w);
        tps_buf_append(w->out, v->u.number.text, v->u.number.len);
        break;
    case TPS_JSON_STRING: tps_jw_string_n(w, v->u.string.s, v->u.string.len); break;
    case TPS_JSON_ARRAY:
        tps_jw_array_begin(w);
        for (size_t i = 0; i < v->u.array.n; i++) tps_jw_value(w, v->u.array.items[i]);
        tps_jw_array_end(w);
        break;
    case TPS_JSON_OBJECT:
        tps_jw_object_begin(w);
        for (size_t i = 0; i < v->u.object.n; i++) {
            key_n(w, v->u.object.keys[i]->u.string.s, v->u.object.keys[i]->u.string.len);
            tps_jw_value(w, v->u.object.values[i]);
        }
        tps_jw_object_end(w);
        break;
    }
}
