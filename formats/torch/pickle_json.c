#include "pickle_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/json.h"

#define MAX_VISITS (1u << 22)

typedef struct enc {
    tps_buf *out;
    const char *what;
    tps_error *err;
    size_t visits_left;
} enc;

static tps_status value(enc *e, const tps_pv *v, int depth);

static void put_double(tps_buf *out, double d)
{
    if (!isfinite(d)) {
        tps_buf_printf(out, "{\"$float\": \"%s\"}", isnan(d) ? "nan" : d > 0 ? "inf" : "-inf");
        return;
    }
    char text[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, d);
        if (strtod(text, NULL) == d) break;
    }
    tps_buf_puts(out, text);
    /* an int-looking text would read back as an int, which args keeps apart from a float */
    if (!strpbrk(text, ".eE")) tps_buf_puts(out, ".0");
}

static tps_status items(enc *e, tps_pv *const *v, size_t n, int depth)
{
    tps_buf_putc(e->out, '[');
    for (size_t i = 0; i < n; i++) {
        if (i) tps_buf_puts(e->out, ", ");
        tps_status st = value(e, v[i], depth + 1);
        if (st) return st;
    }
    tps_buf_putc(e->out, ']');
    return TPS_OK;
}

static tps_status pairs(enc *e, const tps_pv *d, int depth)
{
    tps_buf_putc(e->out, '[');
    for (size_t i = 0; i < d->u.dict.n; i++) {
        if (i) tps_buf_puts(e->out, ", ");
        tps_buf_putc(e->out, '[');
        tps_status st = value(e, d->u.dict.keys[i], depth + 2);
        tps_buf_puts(e->out, ", ");
        if (!st) st = value(e, d->u.dict.vals[i], depth + 2);
        if (st) return st;
        tps_buf_putc(e->out, ']');
    }
    tps_buf_putc(e->out, ']');
    return TPS_OK;
}

/* A JSON object needs distinct str keys (a pickle may repeat one; pickle.c keeps both), none
 * taken for an encoding tag; a larger dict, where the pairwise check would cost too much, is
 * written as pairs. */
static bool plain_keys(const tps_pv *d)
{
    if (d->u.dict.n > 4096) return false;
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const tps_pv *k = d->u.dict.keys[i];
        if (k->kind != TPS_PV_STR || k->u.str.s[0] == '$') return false;
        for (size_t j = 0; j < i; j++)
            if (d->u.dict.keys[j]->u.str.len == k->u.str.len && memcmp(d->u.dict.keys[j]->u.str.s, k->u.str.s, k->u.str.len) == 0)
                return false;
    }
    return true;
}

static tps_status dict(enc *e, const tps_pv *d, int depth)
{
    if (d->u.dict.ordered || !plain_keys(d)) {
        tps_buf_puts(e->out, d->u.dict.ordered ? "{\"$odict\": " : "{\"$dict\": ");
        tps_status st = pairs(e, d, depth + 1);
        tps_buf_putc(e->out, '}');
        return st;
    }
    tps_buf_putc(e->out, '{');
    for (size_t i = 0; i < d->u.dict.n; i++) {
        if (i) tps_buf_puts(e->out, ", ");
        tps_json_escape(e->out, d->u.dict.keys[i]->u.str.s, d->u.dict.keys[i]->u.str.len);
        tps_buf_puts(e->out, ": ");
        tps_status st = value(e, d->u.dict.vals[i], depth + 1);
        if (st) return st;
    }
    tps_buf_putc(e->out, '}');
    return TPS_OK;
}

static tps_status value(enc *e, const tps_pv *v, int depth)
{
    if (depth >= TPS_JSON_MAX_DEPTH)
        return tps_fail(e->err, TPS_EINVALID, "%s: values nested more than %d deep (or a cycle) at pickle offset %zu", e->what,
                        TPS_JSON_MAX_DEPTH, v->offset);
    if (e->visits_left-- == 0)
        return tps_fail(e->err, TPS_EINVALID, "%s: the pickle refers to its shared values too many times (pickle offset %zu)",
                        e->what, v->offset);
    tps_status st = TPS_OK;
    switch (v->kind) {
    case TPS_PV_NONE: tps_buf_puts(e->out, "null"); break;
    case TPS_PV_BOOL: tps_buf_puts(e->out, v->u.b ? "true" : "false"); break;
    case TPS_PV_INT: tps_buf_printf(e->out, "%lld", (long long)v->u.i); break;
    case TPS_PV_FLOAT: put_double(e->out, v->u.f); break;
    case TPS_PV_STR: tps_json_escape(e->out, v->u.str.s, v->u.str.len); break;
    case TPS_PV_LIST: st = items(e, v->u.seq.items, v->u.seq.n, depth); break;
    case TPS_PV_TUPLE:
    case TPS_PV_SET:
        tps_buf_puts(e->out, v->kind == TPS_PV_TUPLE ? "{\"$tuple\": " : "{\"$set\": ");
        st = items(e, v->u.seq.items, v->u.seq.n, depth + 1);
        tps_buf_putc(e->out, '}');
        break;
    case TPS_PV_DICT: st = dict(e, v, depth); break;
    case TPS_PV_BYTES:
        tps_buf_puts(e->out, "{\"$bytes\": \"");
        for (size_t i = 0; i < v->u.str.len; i++) tps_buf_printf(e->out, "%02x", (unsigned char)v->u.str.s[i]);
        tps_buf_puts(e->out, "\"}");
        break;
    case TPS_PV_GLOBAL:
        if (v->u.global.kind == TPS_PG_DTYPE) tps_buf_printf(e->out, "{\"$dtype\": \"%s\"}", v->u.global.dt->name);
        else {
            tps_buf_puts(e->out, "{\"$global\": ");
            tps_json_escape(e->out, v->u.global.name, strlen(v->u.global.name));
            tps_buf_putc(e->out, '}');
        }
        break;
    case TPS_PV_OBJECT:
        tps_buf_puts(e->out, v->u.obj.newobj ? "{\"$newobj\": [" : "{\"$reduce\": [");
        tps_json_escape(e->out, v->u.obj.cls->u.global.name, strlen(v->u.obj.cls->u.global.name));
        tps_buf_puts(e->out, ", ");
        st = items(e, v->u.obj.args->u.seq.items, v->u.obj.args->u.seq.n, depth + 2);
        if (!st && (v->u.obj.newobj || v->u.obj.state)) {
            tps_buf_puts(e->out, ", ");
            if (v->u.obj.state) st = value(e, v->u.obj.state, depth + 2);
            else tps_buf_puts(e->out, "null");
        }
        tps_buf_puts(e->out, "]}");
        break;
    case TPS_PV_TENSOR:
        tps_buf_printf(e->out, "{\"$tensor\": {\"dtype\": \"%s\", \"shape\": [", v->u.tensor.dt->name);
        for (int i = 0; i < v->u.tensor.ndim; i++)
            tps_buf_printf(e->out, "%s%llu", i ? ", " : "", (unsigned long long)v->u.tensor.size[i]);
        tps_buf_puts(e->out, "]}}");
        break;
    case TPS_PV_STORAGE:
        tps_buf_printf(e->out, "{\"$storage\": {\"dtype\": \"%s\", \"numel\": %llu}}",
                       v->u.storage.dt ? v->u.storage.dt->name : "bytes", (unsigned long long)v->u.storage.numel);
        break;
    }
    return st;
}

tps_status tps_pickle_json(const tps_pv *v, tps_buf *out, const char *what, tps_error *err)
{
    enc e = {.out = out, .what = what, .err = err, .visits_left = MAX_VISITS};
    tps_status st = value(&e, v, 0);
    if (!st && out->oom) st = tps_fail_oom(err, "writing a pickled value as JSON");
    return st;
}

tps_status tps_pickle_json_str(const tps_pv *v, const char *what, char **out, tps_error *err)
{
    tps_buf b = TPS_BUF_INIT;
    *out = NULL;
    tps_status st = tps_pickle_json(v, &b, what, err);
    if (!st && !tps_buf_cstr(&b)) st = tps_fail_oom(err, "writing a pickled value as JSON");
    if (st) {
        tps_buf_release(&b);
        return st;
    }
    *out = b.data ? b.data : strdup("");
    if (!*out) return tps_fail_oom(err, "writing a pickled value as JSON");
    return TPS_OK;
}

const tps_pv *tps_pv_get(const tps_pv *v, const char *key)
{
    if (v && v->kind == TPS_PV_OBJECT) v = v->u.obj.state;
    if (!v || v->kind != TPS_PV_DICT) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < v->u.dict.n; i++) {
        const tps_pv *k = v->u.dict.keys[i];
        if (k->kind == TPS_PV_STR && k->u.str.len == n && memcmp(k->u.str.s, key, n) == 0) return v->u.dict.vals[i];
    }
    return NULL;
}
