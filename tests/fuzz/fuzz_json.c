/* The strict JSON parser (lib/base/json.h), then a walk over every node and a round trip of
 * every string through the escaper, so a tree with a bad pointer or length is touched. */
#include "fuzz.h"

#include "lib/base/json.h"

static size_t walk(const tps_json *v, tps_buf *b)
{
    size_t n = 1;
    switch (v->type) {
    case TPS_JSON_STRING:
        tps_json_escape(b, v->u.string.s, v->u.string.len);
        break;
    case TPS_JSON_NUMBER:
        tps_buf_append(b, v->u.number.text, v->u.number.len);
        break;
    case TPS_JSON_ARRAY:
        for (size_t i = 0; i < v->u.array.n; i++) n += walk(v->u.array.items[i], b);
        break;
    case TPS_JSON_OBJECT:
        for (size_t i = 0; i < v->u.object.n; i++) {
            n += walk(v->u.object.keys[i], b);
            n += walk(v->u.object.values[i], b);
        }
        break;
    default:
        break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tps_json_doc *doc = NULL;
    tps_error err;
    tps_error_clear(&err);
    if (tps_json_parse((const char *)data, size, "fuzz", &doc, &err) == TPS_OK) {
        tps_buf b = TPS_BUF_INIT;
        walk(tps_json_root(doc), &b);
        tps_json_get(tps_json_root(doc), "__metadata__");
        tps_buf_release(&b);
    }
    tps_json_doc_free(doc);
    return 0;
}
