/* JSON: a strict parser for untrusted headers and manifests, and an emitter.
 *
 * Parser rules (RFC 8259, held strictly because the input is hostile):
 *   - exactly one value, JSON whitespace (space, tab, LF, CR) allowed around it, nothing else;
 *   - input must be valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF);
 *   - string escapes decoded; \u surrogate pairs must pair up; control characters refused;
 *   - duplicate keys in any object are an error (safetensors TOB-SFTN-7);
 *   - nesting depth at most TPS_JSON_MAX_DEPTH;
 *   - numbers follow the JSON grammar; each keeps its text, and is_u64 says whether it is a
 *     plain non-negative integer (no sign, fraction or exponent) that fits in 64 bits.
 * Errors are TPS_EINVALID with the byte offset and what was expected, prefixed by the
 * caller's `what` (e.g. the file name).
 *
 * The parsed tree lives in one arena owned by the tps_json_doc. */
#ifndef TPS_JSON_H
#define TPS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "status.h"

#define TPS_JSON_MAX_DEPTH 64

typedef enum tps_json_type {
    TPS_JSON_NULL,
    TPS_JSON_BOOL,
    TPS_JSON_NUMBER,
    TPS_JSON_STRING,
    TPS_JSON_ARRAY,
    TPS_JSON_OBJECT
} tps_json_type;

typedef struct tps_json tps_json;

struct tps_json {
    tps_json_type type;
    size_t offset; /* byte offset of the value's first character in the input */
    union {
        bool boolean;
        struct {
            const char *text; /* not NUL-terminated; len bytes */
            size_t len;
            bool is_u64;
            uint64_t u64;
            double f64;
        } number;
        struct {
            const char *s; /* decoded UTF-8, NUL-terminated; may contain \0 (check len) */
            size_t len;
        } string;
        struct {
            tps_json **items; /* NULL in a lazy array (tps_json_parse_lazy) */
            size_t n;
            bool lazy;
            size_t end; /* lazy: the byte after its ']' */
        } array;
        struct {
            tps_json **keys; /* each of type TPS_JSON_STRING, in document order */
            tps_json **values;
            size_t n;
        } object;
    } u;
};

typedef struct tps_json_doc tps_json_doc;

tps_status tps_json_parse(const char *text, size_t len, const char *what, tps_json_doc **out, tps_error *err);

/* tps_json_parse, except that the array which is the root object's member lazy_key (when the
 * root is an object with that member and it is an array) is only scanned for its extent and
 * element count, not built: its node has lazy set, items NULL and n its element count, and
 * tps_json_each parses its elements one at a time.  For a manifest's tensor list, whose
 * parse tree would be several times the size of what the caller keeps of it.  Errors inside
 * the lazy array are found when tps_json_each parses it; the text must outlive that. */
tps_status tps_json_parse_lazy(const char *text, size_t len, const char *what, const char *lazy_key, tps_json_doc **out,
                               tps_error *err);

/* tps_json_parse for a document whose root object has many members, each read once and not
 * needed after (a safetensors header: one member a tensor).  Each member value of the root
 * object is parsed into a document of its own, handed to fn(ctx, key, value) and freed; the
 * tree keeps the keys (duplicates are refused as ever) and, in place of each value, a null
 * node at its offset, unless keep(ctx, key) (may be NULL) says to keep that value in the tree,
 * where fn gets it too.  fn is called in document order as values are parsed, so it sees
 * members before a syntax error further on: a caller that refuses a member should remember
 * its first refusal and report it only when the parse succeeds, as a whole parse followed by
 * a walk of the tree would. */
typedef void (*tps_json_member_fn)(void *ctx, const tps_json *key, const tps_json *value);
typedef bool (*tps_json_keep_fn)(void *ctx, const tps_json *key);
tps_status tps_json_parse_members(const char *text, size_t len, const char *what, tps_json_keep_fn keep,
                                  tps_json_member_fn fn, void *ctx, tps_json_doc **out, tps_error *err);

/* Calls fn(ctx, i, item) on each element of array arr in order, stopping at the first status
 * that is not TPS_OK.  A lazy array's elements are parsed from text (the input of
 * tps_json_parse_lazy, len bytes) one at a time, each with the same strict rules and byte
 * offsets as a whole parse, and freed when fn returns: memory is one element's tree. */
typedef tps_status (*tps_json_each_fn)(void *ctx, size_t i, const tps_json *item);
tps_status tps_json_each(const char *text, size_t len, const char *what, const tps_json *arr, tps_json_each_fn fn,
                         void *ctx, tps_error *err);
const tps_json *tps_json_root(const tps_json_doc *doc);
void tps_json_doc_free(tps_json_doc *doc);

/* Member of an object by key (exact bytes, key without embedded NUL); NULL if absent or obj
 * is not an object. */
const tps_json *tps_json_get(const tps_json *obj, const char *key);

/* The emitter writes into a tps_buf.  Commas and colons are placed automatically; pretty
 * output indents by two spaces.  Strings are escaped per RFC 8259 (", \, control
 * characters as \uXXXX or the short forms); bytes >= 0x80 are passed through, so the
 * caller must give valid UTF-8.  Non-finite doubles are written as null. */
typedef struct tps_jw {
    tps_buf *out;
    bool pretty;
    int depth;
    bool need_comma[TPS_JSON_MAX_DEPTH + 1];
    bool after_key;
} tps_jw;

void tps_jw_init(tps_jw *w, tps_buf *out, bool pretty);
void tps_jw_object_begin(tps_jw *w);
void tps_jw_object_end(tps_jw *w);
void tps_jw_array_begin(tps_jw *w);
void tps_jw_array_end(tps_jw *w);
void tps_jw_key(tps_jw *w, const char *key);
void tps_jw_string(tps_jw *w, const char *s);
void tps_jw_string_n(tps_jw *w, const char *s, size_t n);
void tps_jw_u64(tps_jw *w, uint64_t v);
void tps_jw_i64(tps_jw *w, int64_t v);
void tps_jw_double(tps_jw *w, double v); /* shortest text that reads back to the same double */
void tps_jw_bool(tps_jw *w, bool v);
void tps_jw_null(tps_jw *w);
void tps_jw_u64_array(tps_jw *w, const uint64_t *v, size_t n); /* [v0, v1, ...] */
/* A parsed value, re-emitted: numbers keep their text, so nothing is rounded on the way. */
void tps_jw_value(tps_jw *w, const tps_json *v);

/* Escape s (n bytes) as a JSON string literal, quotes included, appended to out. */
void tps_json_escape(tps_buf *out, const char *s, size_t n);

#endif
