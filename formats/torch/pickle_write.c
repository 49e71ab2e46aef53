#include "pickle_write.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Opcodes (CPython Lib/pickle.py). */
#define OP_MARK '('
#define OP_STOP '.'
#define OP_BINFLOAT 'G'
#define OP_BININT 'J'
#define OP_BININT1 'K'
#define OP_BININT2 'M'
#define OP_NONE 'N'
#define OP_BINPERSID 'Q'
#define OP_REDUCE 'R'
#define OP_BINUNICODE 'X'
#define OP_APPEND 'a'
#define OP_BUILD 'b'
#define OP_GLOBAL 'c'
#define OP_APPENDS 'e'
#define OP_BINGET 'h'
#define OP_LONG_BINGET 'j'
#define OP_BINPUT 'q'
#define OP_LONG_BINPUT 'r'
#define OP_SETITEM 's'
#define OP_TUPLE 't'
#define OP_SETITEMS 'u'
#define OP_EMPTY_DICT '}'
#define OP_EMPTY_LIST ']'
#define OP_EMPTY_TUPLE ')'
#define OP_PROTO 0x80
#define OP_NEWOBJ 0x81
#define OP_TUPLE1 0x85
#define OP_TUPLE2 0x86
#define OP_TUPLE3 0x87
#define OP_NEWTRUE 0x88
#define OP_NEWFALSE 0x89
#define OP_LONG1 0x8a

/* Python's Pickler._BATCHSIZE: items per APPENDS/SETITEMS. */
#define BATCH 1000

/* torch's weights_only defaults that a value outside a tensor can use
 * (pytorch/pytorch:torch/_weights_only_unpickler.py, _get_allowed_globals), plus what
 * Megatron-Core registers (NVIDIA/Megatron-LM:megatron/core/safe_globals.py).  Both
 * spellings where Python's module moved (numpy 2, Python 3.13's pathlib, protocol 2's
 * __builtin__). */
static const char *const allowed_globals[] = {
    "argparse.Namespace",
    "types.SimpleNamespace",
    "pathlib.PosixPath",
    "pathlib._local.PosixPath",
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.dtypes.UInt32DType",
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphModule",
    "megatron.core.transformer.enums.CudaGraphScope",
    "megatron.core.transformer.enums.InferenceCudaGraphScope",
    "megatron.core.enums.ModelType",
    "megatron.core.optimizer.OptimizerConfig",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
    "megatron.core.rerun_state_machine.RerunDiagnostic",
    "megatron.core.rerun_state_machine.RerunMode",
    "megatron.core.rerun_state_machine.RerunState",
    "_io.BytesIO",
    "io.BytesIO",
    "signal.Signals",
    "torch._C.Generator",
    "collections.OrderedDict",
    "collections.Counter",
    "torch.Size",
    "torch.device",
    "_codecs.encode",
    "__builtin__.set",
    "__builtin__.bytearray",
    "__builtin__.complex",
    "builtins.set",
    "builtins.bytearray",
    "builtins.complex",
};

bool tps_pickle_write_allowed(const char *dotted)
{
    for (size_t i = 0; i < sizeof allowed_globals / sizeof allowed_globals[0]; i++)
        if (strcmp(allowed_globals[i], dotted) == 0) return true;
    return false;
}

/* The memo: strings and globals already written, by value, to the index Python's pickler
 * gave them (open addressing; keys are a kind byte followed by the bytes). */
typedef struct memo_slot {
    char *key;
    size_t len;
    uint32_t idx;
} memo_slot;

typedef struct pw {
    tps_buf *out;
    uint32_t next; /* the next memo index */
    memo_slot *slots;
    size_t cap, used;
    const char *what;
    tps_error *err;
    bool oom;
    const char *const *also; /* NULL-terminated globals allowed besides the list, or NULL */
} pw;

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static memo_slot *memo_find(pw *w, const char *key, size_t len)
{
    if (!w->cap) return NULL;
    for (size_t i = hash_bytes(key, len) & (w->cap - 1);; i = (i + 1) & (w->cap - 1)) {
        memo_slot *s = &w->slots[i];
        if (!s->key) return NULL;
        if (s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

static void memo_add(pw *w, const char *key, size_t len, uint32_t idx)
{
    if ((w->used + 1) * 2 > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        memo_slot *ns = calloc(nc, sizeof *ns);
        if (!ns) {
            w->oom = true;
            return;
        }
        for (size_t i = 0; i < w->cap; i++) {
            if (!w->slots[i].key) continue;
            size_t j = hash_bytes(w->slots[i].key, w->slots[i].len) & (nc - 1);
            while (ns[j].key) j = (j + 1) & (nc - 1);
            ns[j] = w->slots[i];
        }
        free(w->slots);
        w->slots = ns;
        w->cap = nc;
    }
    char *k = malloc(len ? len : 1);
    if (!k) {
        w->oom = true;
        return;
    }
    memcpy(k, key, len);
    size_t j = hash_bytes(key, len) & (w->cap - 1);
    while (w->slots[j].key) j = (j + 1) & (w->cap - 1);
    w->slots[j] = (memo_slot){k, len, idx};
    w->used++;
}

static void pw_free(pw *w)
{
    for (size_t i = 0; i < w->cap; i++) free(w->slots[i].key);
    free(w->slots);
}

static void op(pw *w, unsigned c) { tps_buf_putc(w->out, (char)c); }

static void le32(pw *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    tps_buf_append(w->out, b, 4);
}

/* Python memoizes each object once it is written: BINPUT with the next index. */
static uint32_t put(pw *w)
{
    uint32_t idx = w->next++;
    if (idx < 256) {
        op(w, OP_BINPUT);
        op(w, idx);
    } else {
        op(w, OP_LONG_BINPUT);
        le32(w, idx);
    }
    return idx;
}

static void get(pw *w, uint32_t idx)
{
    if (idx < 256) {
        op(w, OP_BINGET);
        op(w, idx);
    } else {
        op(w, OP_LONG_BINGET);
        le32(w, idx);
    }
}

/* A memoizable string or global: its key in the memo is kind + bytes. */
static bool memo_reuse(pw *w, char kind, const char *s, size_t n, char **key, size_t *klen)
{
    *key = malloc(n + 1);
    if (!*key) {
        w->oom = true;
        return true;
    }
    (*key)[0] = kind;
    memcpy(*key + 1, s, n);
    *klen = n + 1;
    memo_slot *m = memo_find(w, *key, *klen);
    if (!m) return false;
    get(w, m->idx);
    free(*key);
    *key = NULL;
    return true;
}

static void str(pw *w, const char *s, size_t n)
{
    char *key;
    size_t klen;
    if (memo_reuse(w, 's', s, n, &key, &klen)) return;
    op(w, OP_BINUNICODE);
    le32(w, (uint32_t)n);
    tps_buf_append(w->out, s, n);
    memo_add(w, key, klen, put(w));
    free(key);
}

static void cstr(pw *w, const char *s) { str(w, s, strlen(s)); }

/* GLOBAL "module\nname\n" for a dotted name split at its last dot. */
static void global(pw *w, const char *dotted)
{
    char *key;
    size_t klen;
    if (memo_reuse(w, 'g', dotted, strlen(dotted), &key, &klen)) return;
    const char *dot = strrchr(dotted, '.');
    op(w, OP_GLOBAL);
    tps_buf_append(w->out, dotted, (size_t)(dot - dotted));
    op(w, '\n');
    tps_buf_puts(w->out, dot + 1);
    op(w, '\n');
    memo_add(w, key, klen, put(w));
    free(key);
}

/* LONG1 with the shortest two's-complement little-endian bytes (pickle.encode_long) of the
 * number whose magnitude is mag[0, n) (little-endian) and sign neg. */
static tps_status long1(pw *w, const unsigned char *mag, size_t n, bool neg, size_t ofs)
{
    while (n > 0 && mag[n - 1] == 0) n--;
    size_t bits = 0;
    if (n) {
        unsigned top = mag[n - 1];
        bits = (n - 1) * 8;
        while (top) {
            bits++;
            top >>= 1;
        }
    }
    size_t nb = (bits >> 3) + 1;
    if (nb > 256)
        return tps_fail(w->err, TPS_EINVALID, "%s: an integer of %zu bits at JSON offset %zu needs LONG4, which torch's weights_only loader refuses",
                        w->what, bits, ofs);
    unsigned char b[257];
    for (size_t i = 0; i < nb; i++) b[i] = i < n ? mag[i] : 0;
    if (neg) {
        unsigned carry = 1;
        for (size_t i = 0; i < nb; i++) {
            unsigned v = (unsigned)(unsigned char)~b[i] + carry;
            b[i] = (unsigned char)v;
            carry = v >> 8;
        }
        if (nb > 1 && b[nb - 1] == 0xff && (b[nb - 2] & 0x80)) nb--;
    }
    op(w, OP_LONG1);
    op(w, (unsigned)nb);
    tps_buf_append(w->out, b, nb);
    return TPS_OK;
}

static void int64(pw *w, int64_t v)
{
    if (v >= 0 && v <= 0xff) {
        op(w, OP_BININT1);
        op(w, (unsigned)v);
    } else if (v >= 0 && v <= 0xffff) {
        op(w, OP_BININT2);
        op(w, (unsigned)(v & 0xff));
        op(w, (unsigned)(v >> 8));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op(w, OP_BININT);
        le32(w, (uint32_t)(int32_t)v);
    } else {
        uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        unsigned char mag[8];
        for (int i = 0; i < 8; i++) mag[i] = (unsigned char)(m >> (8 * i));
        long1(w, mag, 8, v < 0, 0);
    }
}

/* An integer written in decimal (a JSON number without fraction or exponent, or "$int"). */
static tps_status integer(pw *w, const char *s, size_t n, size_t ofs)
{
    bool neg = n > 0 && s[0] == '-';
    size_t i = neg ? 1 : 0;
    if (i >= n)
        return tps_fail(w->err, TPS_EINVALID, "%s: '%.*s' at JSON offset %zu is not an integer", w->what, (int)n, s, ofs);
    unsigned char mag[300] = {0};
    size_t mlen = 1;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return tps_fail(w->err, TPS_EINVALID, "%s: '%.*s' at JSON offset %zu is not an integer", w->what, (int)n, s, ofs);
        unsigned carry = (unsigned)(s[i] - '0');
        for (size_t k = 0; k < mlen; k++) {
            unsigned v = mag[k] * 10u + carry;
            mag[k] = (unsigned char)v;
            carry = v >> 8;
        }
        if (carry) {
            if (mlen == sizeof mag)
                return tps_fail(w->err, TPS_EINVALID, "%s: the integer at JSON offset %zu needs LONG4, which torch's weights_only loader refuses",
                                w->what, ofs);
            mag[mlen++] = (unsigned char)carry;
        }
    }
    /* Within int64: BININT forms for small values, as Python picks them. */
    bool small = mlen <= 8;
    uint64_t m = 0;
    for (size_t k = 0; k < mlen && k < 8; k++) m |= (uint64_t)mag[k] << (8 * k);
    if (small && (neg ? m <= (uint64_t)1 << 63 : m <= (uint64_t)INT64_MAX)) {
        int64(w, neg ? (int64_t)(0 - m) : (int64_t)m);
        return TPS_OK;
    }
    return long1(w, mag, mlen, neg, ofs);
}

static void binfloat(pw *w, double d)
{
    uint64_t bits;
    memcpy(&bits, &d, 8);
    op(w, OP_BINFLOAT);
    for (int i = 7; i >= 0; i--) op(w, (unsigned)(bits >> (8 * i)) & 0xff);
}

static void binfloat_bits(pw *w, uint64_t bits)
{
    double d;
    memcpy(&d, &bits, 8);
    binfloat(w, d);
}

static tps_status value(pw *w, const tps_json *v);

static tps_status refuse(pw *w, const tps_json *v, const char *why)
{
    return tps_fail(w->err, TPS_EINVALID, "%s: %s (JSON offset %zu)", w->what, why, v->offset);
}

/* How CPython's C pickler (_pickle.c) batches the items of a container: at most 1000 per
 * MARK .. APPENDS/SETITEMS.  An exact list or dict of one item takes APPEND/SETITEM; longer
 * ones take MARK .. APPENDS/SETITEMS for every batch, even a last batch of one (and an exact
 * dict whose size is a multiple of 1000 ends with an empty batch: batch_dict_exact loops
 * while the last batch was full).  Items from an iterator (an OrderedDict's reduce) go as
 * batch_dict does: a last batch of one item is a SETITEM. */
typedef enum batch_kind { LIST_EXACT, DICT_EXACT, DICT_ITER } batch_kind;

static tps_status batched(pw *w, size_t n, batch_kind kind, tps_status (*item)(pw *, const void *, size_t), const void *ctx)
{
    bool dict = kind != LIST_EXACT;
    tps_status st;
    if (n == 0) return TPS_OK;
    if (n == 1 || kind == DICT_ITER) {
        for (size_t start = 0; start < n; start += BATCH) {
            size_t m = n - start < BATCH ? n - start : BATCH;
            if (m > 1) op(w, OP_MARK);
            for (size_t i = start; i < start + m; i++)
                if ((st = item(w, ctx, i))) return st;
            op(w, m > 1 ? (dict ? OP_SETITEMS : OP_APPENDS) : (dict ? OP_SETITEM : OP_APPEND));
        }
        return TPS_OK;
    }
    size_t start = 0, m;
    do {
        m = n - start < BATCH ? n - start : BATCH;
        op(w, OP_MARK);
        for (size_t i = start; i < start + m; i++)
            if ((st = item(w, ctx, i))) return st;
        op(w, dict ? OP_SETITEMS : OP_APPENDS);
        start += m;
    } while (kind == DICT_EXACT ? m == BATCH : start < n);
    return TPS_OK;
}

static tps_status list_item(pw *w, const void *ctx, size_t i) { return value(w, ((const tps_json *)ctx)->u.array.items[i]); }

static tps_status list(pw *w, const tps_json *a)
{
    op(w, OP_EMPTY_LIST);
    put(w);
    return batched(w, a->u.array.n, LIST_EXACT, list_item, a);
}

static tps_status object_item(pw *w, const void *ctx, size_t i)
{
    const tps_json *o = ctx;
    str(w, o->u.object.keys[i]->u.string.s, o->u.object.keys[i]->u.string.len);
    return value(w, o->u.object.values[i]);
}

static const char *special_name(const tps_json *v)
{
    if (v->type != TPS_JSON_OBJECT || v->u.object.n != 1) return NULL;
    const tps_json *k = v->u.object.keys[0];
    return k->u.string.len > 0 && k->u.string.s[0] == '$' ? k->u.string.s : NULL;
}

static tps_status check_key(pw *w, const tps_json *k)
{
    const char *sp = special_name(k);
    if (k->type == TPS_JSON_ARRAY || (k->type == TPS_JSON_OBJECT && !sp) ||
        (sp && (strcmp(sp, "$dict") == 0 || strcmp(sp, "$odict") == 0 || strcmp(sp, "$set") == 0)))
        return refuse(w, k, "a dict key is a list, dict or set, which Python cannot hash");
    return TPS_OK;
}

/* [[k, v], ...] */
static tps_status pair_item(pw *w, const void *ctx, size_t i)
{
    const tps_json *p = ((const tps_json *)ctx)->u.array.items[i];
    tps_status st = check_key(w, p->u.array.items[0]);
    if (!st) st = value(w, p->u.array.items[0]);
    if (!st) st = value(w, p->u.array.items[1]);
    return st;
}

static tps_status pairs(pw *w, const tps_json *a, const char *form, batch_kind kind)
{
    if (a->type != TPS_JSON_ARRAY) return tps_fail(w->err, TPS_EINVALID, "%s: %s takes an array of [key, value] pairs (JSON offset %zu)", w->what, form, a->offset);
    for (size_t i = 0; i < a->u.array.n; i++) {
        const tps_json *p = a->u.array.items[i];
        if (p->type != TPS_JSON_ARRAY || p->u.array.n != 2)
            return tps_fail(w->err, TPS_EINVALID, "%s: %s item at JSON offset %zu is not a [key, value] pair", w->what, form, p->offset);
    }
    return batched(w, a->u.array.n, kind, pair_item, a);
}

/* A tuple of the JSON array's items: EMPTY_TUPLE, TUPLE1-3 or MARK .. TUPLE, then memoized
 * (Python never memoizes the empty tuple). */
static tps_status tuple(pw *w, const tps_json *a)
{
    size_t n = a->u.array.n;
    if (n == 0) {
        op(w, OP_EMPTY_TUPLE);
        return TPS_OK;
    }
    if (n > 3) op(w, OP_MARK);
    for (size_t i = 0; i < n; i++) {
        tps_status st = value(w, a->u.array.items[i]);
        if (st) return st;
    }
    op(w, n == 1 ? OP_TUPLE1 : n == 2 ? OP_TUPLE2 : n == 3 ? OP_TUPLE3 : OP_TUPLE);
    put(w);
    return TPS_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* bytes, as protocol 2 writes them: _codecs.encode(the bytes as a latin-1 str, 'latin1'). */
static tps_status bytes(pw *w, const tps_json *h)
{
    if (h->type != TPS_JSON_STRING || h->u.string.len % 2) return refuse(w, h, "$bytes takes a string of hex digit pairs");
    tps_buf u = TPS_BUF_INIT;
    for (size_t i = 0; i < h->u.string.len; i += 2) {
        int a = hexval(h->u.string.s[i]), b = hexval(h->u.string.s[i + 1]);
        if (a < 0 || b < 0) {
            tps_buf_release(&u);
            return refuse(w, h, "$bytes takes a string of hex digit pairs");
        }
        unsigned c = (unsigned)(a << 4 | b);
        if (c < 0x80) tps_buf_putc(&u, (char)c);
        else {
            tps_buf_putc(&u, (char)(0xc0 | c >> 6));
            tps_buf_putc(&u, (char)(0x80 | (c & 0x3f)));
        }
    }
    if (u.oom) w->oom = true;
    global(w, "_codecs.encode");
    str(w, u.data ? u.data : "", u.len);
    cstr(w, "latin1");
    op(w, OP_TUPLE2);
    put(w);
    op(w, OP_REDUCE);
    put(w);
    tps_buf_release(&u);
    return TPS_OK;
}

static tps_status allowed(pw *w, const tps_json *name, const char *form)
{
    if (name->type != TPS_JSON_STRING || !strchr(name->u.string.s, '.') || strlen(name->u.string.s) != name->u.string.len)
        return tps_fail(w->err, TPS_EINVALID, "%s: %s needs a \"module.name\" string (JSON offset %zu)", w->what, form, name->offset);
    bool also = false;
    for (const char *const *a = w->also; a && *a && !also; a++) also = strcmp(*a, name->u.string.s) == 0;
    if (!also && !tps_pickle_write_allowed(name->u.string.s))
        return tps_fail(w->err, TPS_EINVALID,
                        "%s: global %s (JSON offset %zu) is not one torch's weights_only loader or Megatron's safe_globals allow; refused",
                        w->what, name->u.string.s, name->offset);
    return TPS_OK;
}

static tps_status special(pw *w, const tps_json *v, const char *name)
{
    const tps_json *a = v->u.object.values[0];
    tps_status st;
    if (strcmp(name, "$int") == 0) {
        if (a->type != TPS_JSON_STRING) return refuse(w, a, "$int takes a decimal string");
        return integer(w, a->u.string.s, a->u.string.len, a->offset);
    }
    if (strcmp(name, "$float") == 0) {
        if (a->type == TPS_JSON_STRING && strcmp(a->u.string.s, "inf") == 0) binfloat_bits(w, 0x7ff0000000000000ull);
        else if (a->type == TPS_JSON_STRING && strcmp(a->u.string.s, "-inf") == 0) binfloat_bits(w, 0xfff0000000000000ull);
        else if (a->type == TPS_JSON_STRING && strcmp(a->u.string.s, "nan") == 0) binfloat_bits(w, 0x7ff8000000000000ull);
        else return refuse(w, a, "$float takes \"inf\", \"-inf\" or \"nan\"");
        return TPS_OK;
    }
    if (strcmp(name, "$tuple") == 0) {
        if (a->type != TPS_JSON_ARRAY) return refuse(w, a, "$tuple takes an array");
        return tuple(w, a);
    }
    if (strcmp(name, "$dict") == 0) {
        op(w, OP_EMPTY_DICT);
        put(w);
        return pairs(w, a, "$dict", DICT_EXACT);
    }
    if (strcmp(name, "$odict") == 0) {
        global(w, "collections.OrderedDict");
        op(w, OP_EMPTY_TUPLE);
        op(w, OP_REDUCE);
        put(w);
        return pairs(w, a, "$odict", DICT_ITER);
    }
    if (strcmp(name, "$bytes") == 0) return bytes(w, a);
    if (strcmp(name, "$set") == 0) {
        if (a->type != TPS_JSON_ARRAY) return refuse(w, a, "$set takes an array");
        for (size_t i = 0; i < a->u.array.n; i++)
            if ((st = check_key(w, a->u.array.items[i]))) return st;
        global(w, "__builtin__.set");
        if ((st = list(w, a))) return st;
        op(w, OP_TUPLE1);
        put(w);
        op(w, OP_REDUCE);
        put(w);
        return TPS_OK;
    }
    if (strcmp(name, "$dtype") == 0) {
        if (a->type != TPS_JSON_STRING || !tps_torch_dtype_by_name(a->u.string.s)) return refuse(w, a, "$dtype names no torch dtype");
        char g[64];
        snprintf(g, sizeof g, "torch.%s", a->u.string.s);
        global(w, g);
        return TPS_OK;
    }
    if (strcmp(name, "$global") == 0) {
        if ((st = allowed(w, a, "$global"))) return st;
        global(w, a->u.string.s);
        return TPS_OK;
    }
    if (strcmp(name, "$reduce") == 0 || strcmp(name, "$newobj") == 0) {
        bool newobj = name[1] == 'n';
        size_t want = newobj ? 3 : 2;
        if (a->type != TPS_JSON_ARRAY || a->u.array.n != want || a->u.array.items[1]->type != TPS_JSON_ARRAY)
            return refuse(w, a, newobj ? "$newobj takes [\"module.name\", [args...], state or null]" : "$reduce takes [\"module.name\", [args...]]");
        if ((st = allowed(w, a->u.array.items[0], name))) return st;
        global(w, a->u.array.items[0]->u.string.s);
        if ((st = tuple(w, a->u.array.items[1]))) return st;
        op(w, newobj ? OP_NEWOBJ : OP_REDUCE);
        put(w);
        if (newobj && a->u.array.items[2]->type != TPS_JSON_NULL) {
            if ((st = value(w, a->u.array.items[2]))) return st;
            op(w, OP_BUILD);
        }
        return TPS_OK;
    }
    if (strcmp(name, "$tensor") == 0) return refuse(w, v, "a tensor outside the state dict cannot be written");
    return tps_fail(w->err, TPS_EINVALID, "%s: unknown form %s (JSON offset %zu); a dict key starting with '$' is written through $dict",
                    w->what, name, v->offset);
}

static tps_status value(pw *w, const tps_json *v)
{
    switch (v->type) {
    case TPS_JSON_NULL: op(w, OP_NONE); return TPS_OK;
    case TPS_JSON_BOOL: op(w, v->u.boolean ? OP_NEWTRUE : OP_NEWFALSE); return TPS_OK;
    case TPS_JSON_NUMBER:
        if (memchr(v->u.number.text, '.', v->u.number.len) || memchr(v->u.number.text, 'e', v->u.number.len) ||
            memchr(v->u.number.text, 'E', v->u.number.len)) {
            binfloat(w, v->u.number.f64);
            return TPS_OK;
        }
        return integer(w, v->u.number.text, v->u.number.len, v->offset);
    case TPS_JSON_STRING: str(w, v->u.string.s, v->u.string.len); return TPS_OK;
    case TPS_JSON_ARRAY: return list(w, v);
    case TPS_JSON_OBJECT: {
        const char *sp = special_name(v);
        if (sp) return special(w, v, sp);
        for (size_t i = 0; i < v->u.object.n; i++) {
            const tps_json *k = v->u.object.keys[i];
            if (k->u.string.len > 0 && k->u.string.s[0] == '$')
                return tps_fail(w->err, TPS_EINVALID, "%s: key \"%s\" at JSON offset %zu starts with '$' in an object of %zu keys; such keys are written through $dict",
                                w->what, k->u.string.s, k->offset, v->u.object.n);
        }
        op(w, OP_EMPTY_DICT);
        put(w);
        return batched(w, v->u.object.n, DICT_EXACT, object_item, v);
    }
    }
    return refuse(w, v, "unknown JSON value");
}

static tps_status finish(pw *w, tps_status st)
{
    if (st == TPS_OK && (w->oom || w->out->oom)) st = tps_fail_oom(w->err, "writing a pickle");
    pw_free(w);
    return st;
}

tps_status tps_pickle_write_json(const tps_json *v, const char *what, tps_buf *out, tps_error *err)
{
    return tps_pickle_write_json_also(v, NULL, what, out, err);
}

tps_status tps_pickle_write_json_also(const tps_json *v, const char *const *also, const char *what, tps_buf *out,
                                      tps_error *err)
{
    pw w = {.out = out, .what = what, .err = err, .also = also};
    op(&w, OP_PROTO);
    op(&w, 2);
    tps_status st = value(&w, v);
    if (!st) op(&w, OP_STOP);
    return finish(&w, st);
}

static void u64(pw *w, uint64_t v)
{
    if (v <= INT64_MAX) int64(w, (int64_t)v);
    else {
        unsigned char mag[8];
        for (int i = 0; i < 8; i++) mag[i] = (unsigned char)(v >> (8 * i));
        long1(w, mag, 8, false, 0);
    }
}

static void u64_tuple(pw *w, const uint64_t *v, int n)
{
    if (n == 0) {
        op(w, OP_EMPTY_TUPLE);
        return;
    }
    if (n > 3) op(w, OP_MARK);
    for (int i = 0; i < n; i++) u64(w, v[i]);
    op(w, n == 1 ? OP_TUPLE1 : n == 2 ? OP_TUPLE2 : n == 3 ? OP_TUPLE3 : OP_TUPLE);
    put(w);
}

/* torch._utils._rebuild_tensor_v2/_v3 as torch.save writes a contiguous tensor. */
static tps_status tensor(pw *w, const tps_pickle_entry *e)
{
    const tps_torch_dtype *dt = e->dt;
    bool v3 = dt->storage == NULL;
    uint64_t numel = 1, stride[TPS_MAX_DIMS];
    for (int d = e->ndim; d-- > 0;) {
        stride[d] = numel;
        /* torch's contiguous strides treat a zero-length dimension as 1 */
        uint64_t f = e->shape[d] ? e->shape[d] : 1;
        if (numel > UINT64_MAX / f) return tps_fail(w->err, TPS_EINVALID, "%s: tensor '%s': element count overflows", w->what, e->key);
        numel *= f;
    }
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] == 0) numel = 0;
    global(w, v3 ? "torch._utils._rebuild_tensor_v3" : "torch._utils._rebuild_tensor_v2");
    op(w, OP_MARK);
    op(w, OP_MARK);
    cstr(w, "storage");
    char g[64];
    snprintf(g, sizeof g, "torch.%s", v3 ? "storage.UntypedStorage" : dt->storage);
    global(w, g);
    cstr(w, e->storage);
    cstr(w, "cpu");
    /* an UntypedStorage counts bytes */
    if (v3 && numel > UINT64_MAX / dt->esize) return tps_fail(w->err, TPS_EINVALID, "%s: tensor '%s': byte count overflows", w->what, e->key);
    u64(w, v3 ? numel * dt->esize : numel);
    op(w, OP_TUPLE);
    put(w);
    op(w, OP_BINPERSID);
    int64(w, 0);
    u64_tuple(w, e->shape, e->ndim);
    u64_tuple(w, stride, e->ndim);
    op(w, OP_NEWFALSE);
    global(w, "collections.OrderedDict");
    op(w, OP_EMPTY_TUPLE);
    op(w, OP_REDUCE);
    put(w);
    if (v3) {
        snprintf(g, sizeof g, "torch.%s", dt->name);
        global(w, g);
    }
    op(w, OP_TUPLE);
    put(w);
    op(w, OP_REDUCE);
    put(w);
    return TPS_OK;
}

static tps_status entry_item(pw *w, const void *ctx, size_t i)
{
    const tps_pickle_entry *e = (const tps_pickle_entry *)ctx + i;
    cstr(w, e->key);
    if (!e->dt) {
        op(w, OP_NONE);
        return TPS_OK;
    }
    return tensor(w, e);
}

typedef struct top_ctx {
    const tps_json *top;
    const char *model_key;
    const tps_pickle_entry *e;
    size_t n;
} top_ctx;

static tps_status top_item(pw *w, const void *ctx, size_t i)
{
    const top_ctx *c = ctx;
    size_t ntop = c->top ? c->top->u.object.n : 0;
    if (i < ntop) return object_item(w, c->top, i);
    cstr(w, c->model_key);
    global(w, "collections.OrderedDict");
    op(w, OP_EMPTY_TUPLE);
    op(w, OP_REDUCE);
    put(w);
    return batched(w, c->n, DICT_ITER, entry_item, c->e);
}

tps_status tps_pickle_write_checkpoint(const tps_json *top, const char *model_key, const tps_pickle_entry *e, size_t n,
                                       const char *what, tps_buf *out, tps_error *err)
{
    pw w = {.out = out, .what = what, .err = err};
    if (top && top->type != TPS_JSON_OBJECT) return tps_fail(err, TPS_EINVALID, "%s: the top-level entries must be a JSON object", what);
    if (top && special_name(top))
        return tps_fail(err, TPS_EINVALID, "%s: the top-level entries must be a plain JSON object, not a %s form", what, special_name(top));
    for (size_t i = 0; top && i < top->u.object.n; i++) {
        const char *k = top->u.object.keys[i]->u.string.s;
        if (strcmp(k, model_key) == 0)
            return tps_fail(err, TPS_EINVALID, "%s: the top-level entries already have the key '%s' that holds the tensors", what, model_key);
        if (k[0] == '$') return tps_fail(err, TPS_EINVALID, "%s: top-level key \"%s\" starts with '$'", what, k);
    }
    top_ctx c = {top, model_key, e, n};
    op(&w, OP_PROTO);
    op(&w, 2);
    op(&w, OP_EMPTY_DICT);
    put(&w);
    tps_status st = batched(&w, (top ? top->u.object.n : 0) + 1, DICT_EXACT, top_item, &c);
    if (!st) op(&w, OP_STOP);
    return finish(&w, st);
}

tps_status tps_pickle_write_tensor(const tps_pickle_entry *e, const char *what, tps_buf *out, tps_error *err)
{
    pw w = {.out = out, .what = what, .err = err};
    op(&w, OP_PROTO);
    op(&w, 2);
    tps_status st = tensor(&w, e);
    if (!st) op(&w, OP_STOP);
    return finish(&w, st);
}
