#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/base/checked.h"

#define DCP_MEM_FORMAT "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING"
#define DCP_WRITE_ITEM_TYPE "torch.distributed.checkpoint.planner.WriteItemType"

static const tps_torch_dtype torch_dtypes[] = {
    {"float64", "DoubleStorage", TPS_DT_F64, 8, 8},
    {"float32", "FloatStorage", TPS_DT_F32, 4, 4},
    {"float16", "HalfStorage", TPS_DT_F16, 2, 2},
    {"bfloat16", "BFloat16Storage", TPS_DT_BF16, 2, 2},
    {"int64", "LongStorage", TPS_DT_I64, 8, 8},
    {"int32", "IntStorage", TPS_DT_I32, 4, 4},
    {"int16", "ShortStorage", TPS_DT_I16, 2, 2},
    {"int8", "CharStorage", TPS_DT_I8, 1, 1},
    {"uint8", "ByteStorage", TPS_DT_U8, 1, 1},
    {"bool", "BoolStorage", TPS_DT_BOOL, 1, 1},
    {"complex64", "ComplexFloatStorage", TPS_DT_C64, 8, 4},
    {"complex128", "ComplexDoubleStorage", -1, 16, 8},
    {"complex32", NULL, -1, 4, 2},
    {"qint8", "QInt8Storage", -1, 1, 1},
    {"quint8", "QUInt8Storage", -1, 1, 1},
    {"qint32", "QInt32Storage", -1, 4, 4},
    {"quint4x2", "QUInt4x2Storage", -1, 1, 1},
    {"quint2x4", "QUInt2x4Storage", -1, 1, 1},
    {"float8_e4m3fn", NULL, TPS_DT_F8_E4M3, 1, 1},
    {"float8_e5m2", NULL, TPS_DT_F8_E5M2, 1, 1},
    {"float8_e4m3fnuz", NULL, TPS_DT_F8_E4M3FNUZ, 1, 1},
    {"float8_e5m2fnuz", NULL, TPS_DT_F8_E5M2FNUZ, 1, 1},
    {"float8_e8m0fnu", NULL, TPS_DT_F8_E8M0, 1, 1},
    {"float4_e2m1fn_x2", NULL, -1, 1, 1},
    {"uint16", NULL, TPS_DT_U16, 2, 2},
    {"uint32", NULL, TPS_DT_U32, 4, 4},
    {"uint64", NULL, TPS_DT_U64, 8, 8},
};

const tps_torch_dtype *tps_torch_dtype_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (strcmp(torch_dtypes[i].name, name) == 0) return &torch_dtypes[i];
    return NULL;
}

static const tps_torch_dtype *dtype_by_storage(const char *storage)
{
    for (size_t i = 0; i < sizeof torch_dtypes / sizeof torch_dtypes[0]; i++)
        if (torch_dtypes[i].storage && strcmp(torch_dtypes[i].storage, storage) == 0) return &torch_dtypes[i];
    return NULL;
}

struct tps_pickle {
    tps_pv **nodes; /* every node, for freeing */
    size_t nnodes, nodes_cap;
};

typedef struct vm {
    const unsigned char *p;
    size_t len, pos, op_ofs;
    const char *what;
    tps_error *err;
    tps_pickle *pk;
    tps_pv **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    tps_pv **memo;
    size_t memo_cap, memo_puts;
    bool too_many; /* the object cap, not memory, stopped an allocation */
} vm;

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*arr, c * elem);
    if (!q) return false;
    *arr = q;
    *cap = c;
    return true;
}

static tps_status bad(vm *m, const char *fmt, const char *detail)
{
    return tps_fail(m->err, TPS_EINVALID, "%s: %s (pickle offset %zu)", m->what, detail ? detail : fmt, m->op_ofs);
}

static tps_status oom(vm *m)
{
    if (m->too_many)
        return tps_fail(m->err, TPS_EINVALID, "%s: more than %u objects (pickle offset %zu); not a plausible state dict", m->what,
                        TPS_PICKLE_MAX_OBJECTS, m->op_ofs);
    return tps_fail_oom(m->err, "reading a pickle");
}

static tps_pv *node(vm *m, tps_pv_kind kind)
{
    if (m->pk->nnodes >= TPS_PICKLE_MAX_OBJECTS) {
        m->too_many = true;
        return NULL;
    }
    if (!grow((void **)&m->pk->nodes, &m->pk->nodes_cap, m->pk->nnodes + 1, sizeof *m->pk->nodes)) return NULL;
    tps_pv *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->kind = kind;
    v->offset = m->op_ofs;
    m->pk->nodes[m->pk->nnodes++] = v;
    return v;
}

static tps_status push(vm *m, tps_pv *v)
{
    if (!v) return oom(m);
    if (!grow((void **)&m->stack, &m->stack_cap, m->sp + 1, sizeof *m->stack)) return oom(m);
    m->stack[m->sp++] = v;
    return TPS_OK;
}

static tps_status pop(vm *m, tps_pv **out)
{
    size_t floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp <= floor) return bad(m, NULL, "stack underflow (malformed pickle)");
    *out = m->stack[--m->sp];
    return TPS_OK;
}

static tps_status take(vm *m, size_t n, const unsigned char **out)
{
    if (m->len - m->pos < n) return bad(m, NULL, "pickle truncated inside an opcode argument");
    *out = m->p + m->pos;
    m->pos += n;
    return TPS_OK;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= k) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

static tps_status push_str(vm *m, const unsigned char *s, size_t n)
{
    /* NUL is a valid character (protocol 2 pickles bytes as a latin-1 str); a tensor name with
     * one is refused where the index adds it. */
    if (!valid_utf8(s, n)) return bad(m, NULL, "string is not valid UTF-8");
    tps_pv *v = node(m, TPS_PV_STR);
    if (!v || !(v->u.str.s = malloc(n + 1))) return oom(m);
    memcpy(v->u.str.s, s, n);
    v->u.str.s[n] = '\0';
    v->u.str.len = n;
    return push(m, v);
}

static tps_status push_bytes(vm *m, const unsigned char *s, size_t n)
{
    tps_pv *v = node(m, TPS_PV_BYTES);
    if (!v || !(v->u.str.s = malloc(n + 1))) return oom(m);
    memcpy(v->u.str.s, s, n);
    v->u.str.s[n] = '\0';
    v->u.str.len = n;
    return push(m, v);
}

static uint32_t le32(const unsigned char *a)
{
    return (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24;
}

static tps_status push_int(vm *m, int64_t i)
{
    tps_pv *v = node(m, TPS_PV_INT);
    if (v) v->u.i = i;
    return push(m, v);
}

static tps_status seq_add(vm *m, tps_pv *seq, tps_pv *item)
{
    if (!grow((void **)&seq->u.seq.items, &seq->u.seq.cap, seq->u.seq.n + 1, sizeof *seq->u.seq.items)) return oom(m);
    seq->u.seq.items[seq->u.seq.n++] = item;
    return TPS_OK;
}

static tps_status dict_set(vm *m, tps_pv *d, tps_pv *k, tps_pv *v)
{
    /* Repeated keys are kept (Python would replace): the index refuses the duplicate tensor
     * name, which is an error rather than a silently different checkpoint, and insertion
     * stays O(1) on hostile pickles with millions of keys. */
    size_t cap = d->u.dict.cap;
    if (!grow((void **)&d->u.dict.keys, &cap, d->u.dict.n + 1, sizeof *d->u.dict.keys)) return oom(m);
    if (!grow((void **)&d->u.dict.vals, &d->u.dict.cap, d->u.dict.n + 1, sizeof *d->u.dict.vals)) return oom(m);
    d->u.dict.keys[d->u.dict.n] = k;
    d->u.dict.vals[d->u.dict.n++] = v;
    return TPS_OK;
}

/* Pops everything above the last mark into a new tuple (or list). */
static tps_status pop_mark(vm *m, tps_pv_kind kind, tps_pv **out)
{
    if (!m->nmarks) return bad(m, NULL, "no MARK on the stack");
    size_t base = m->marks[--m->nmarks];
    tps_pv *t = node(m, kind);
    if (!t) return oom(m);
    for (size_t i = base; i < m->sp; i++) {
        tps_status st = seq_add(m, t, m->stack[i]);
        if (st) return st;
    }
    m->sp = base;
    *out = t;
    return TPS_OK;
}

/* The classes kept as opaque values: torch's weights_only defaults that a state dict may
 * hold as plain values, and Megatron-Core's safe_globals.py (the interop spec B.2b). */
static const char *const opaque_globals[] = {
    "argparse.Namespace", "types.SimpleNamespace", "pathlib.PosixPath", "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype", "numpy.dtypes.UInt32DType",
    "megatron.core.enums.ModelType", "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphModule", "megatron.core.transformer.enums.CudaGraphScope",
    "megatron.core.transformer.enums.InferenceCudaGraphScope", "megatron.core.optimizer.OptimizerConfig",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig", "megatron.core.rerun_state_machine.RerunDiagnostic",
    "megatron.core.rerun_state_machine.RerunMode", "megatron.core.rerun_state_machine.RerunState", "io.BytesIO",
    "_io.BytesIO", "signal.Signals", "torch._C.Generator", "torch.Size", "torch.device", "builtins.bytearray",
    "__builtin__.bytearray", "builtins.complex", "__builtin__.complex",
    /* torch.distributed.checkpoint's .metadata (torch 2.x): its dataclasses, and what
     * TensorProperties' state names its layout with (_get_layout("torch.strided")); its memory
     * format is getattr(_MEM_FORMAT_ENCODING, "TORCH_CONTIGUOUS_FORMAT"), TPS_PG_GETATTR. */
    "torch.distributed.checkpoint.metadata.Metadata", "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata.BytesStorageMetadata", "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed.checkpoint.metadata.ChunkStorageMetadata", "torch.distributed.checkpoint.metadata.MetadataIndex",
    "torch.distributed.checkpoint.metadata.StorageMeta", "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.serialization._get_layout",
    /* Megatron-Core's torch_dist (dist_checkpointing/strategies/torch.py) keeps every rank's
     * save plan in the Metadata (all_local_plans, reused to skip planning on the next save):
     * SavePlan(items=[WriteItem(index, type=WriteItemType(n), tensor_data=TensorWriteData)]). */
    "torch.distributed.checkpoint.planner.SavePlan", "torch.distributed.checkpoint.planner.WriteItem",
    "torch.distributed.checkpoint.planner.WriteItemType", "torch.distributed.checkpoint.planner.TensorWriteData",
};

static bool is_builtin(const char *mod) { return strcmp(mod, "builtins") == 0 || strcmp(mod, "__builtin__") == 0; }

/* Makes the GLOBAL node of mod.name, or refuses a name outside the allow-list. */
static tps_status resolve_global(vm *m, const char *mod, const char *name)
{
    tps_pv *g = node(m, TPS_PV_GLOBAL);
    if (!g) return oom(m);
    size_t ml = strlen(mod), nl = strlen(name);
    if (!(g->u.global.name = malloc(ml + nl + 2))) return oom(m);
    memcpy(g->u.global.name, mod, ml);
    g->u.global.name[ml] = '.';
    memcpy(g->u.global.name + ml + 1, name, nl + 1);
    const tps_torch_dtype *dt = NULL;
    bool opaque = false;
    for (size_t i = 0; i < sizeof opaque_globals / sizeof opaque_globals[0] && !opaque; i++)
        opaque = strcmp(opaque_globals[i], g->u.global.name) == 0;
    if (opaque) g->u.global.kind = TPS_PG_OPAQUE;
    else if (strcmp(mod, "collections") == 0 && strcmp(name, "OrderedDict") == 0) g->u.global.kind = TPS_PG_ORDEREDDICT;
    else if (strcmp(mod, "torch._utils") == 0 && strcmp(name, "_rebuild_tensor") == 0) g->u.global.kind = TPS_PG_REBUILD_TENSOR;
    else if (strcmp(mod, "torch._utils") == 0 && strcmp(name, "_rebuild_tensor_v2") == 0) g->u.global.kind = TPS_PG_REBUILD_V2;
    else if (strcmp(mod, "torch._utils") == 0 && strcmp(name, "_rebuild_tensor_v3") == 0) g->u.global.kind = TPS_PG_REBUILD_V3;
    else if (strcmp(mod, "torch._utils") == 0 && strcmp(name, "_rebuild_parameter") == 0) g->u.global.kind = TPS_PG_REBUILD_PARAM;
    else if (strcmp(mod, "torch.storage") == 0 && strcmp(name, "UntypedStorage") == 0) g->u.global.kind = TPS_PG_STORAGE_TYPE;
    else if (strcmp(mod, "_codecs") == 0 && strcmp(name, "encode") == 0) g->u.global.kind = TPS_PG_CODECS_ENCODE;
    else if (is_builtin(mod) && strcmp(name, "bytes") == 0) g->u.global.kind = TPS_PG_BYTES;
    else if (is_builtin(mod) && (strcmp(name, "set") == 0 || strcmp(name, "frozenset") == 0)) g->u.global.kind = TPS_PG_SET;
    /* Python 3's spelling only: DCP's .metadata is protocol 4 (a protocol-2 __builtin__.getattr
     * is no torch file's). */
    else if (strcmp(mod, "builtins") == 0 && strcmp(name, "getattr") == 0) g->u.global.kind = TPS_PG_GETATTR;
    else if (strcmp(mod, "torch") == 0 && (dt = dtype_by_storage(name)) != NULL) {
        g->u.global.kind = TPS_PG_STORAGE_TYPE;
        g->u.global.dt = dt;
    } else if (strcmp(mod, "torch") == 0 && (dt = tps_torch_dtype_by_name(name)) != NULL) {
        g->u.global.kind = TPS_PG_DTYPE;
        g->u.global.dt = dt;
    } else {
        return tps_fail(m->err, TPS_EINVALID,
                        "%s: refused GLOBAL %s.%s (pickle offset %zu): only torch tensor-rebuilding names and the plain "
                        "classes of torch's weights_only and Megatron's safe_globals are allowed; nothing from a checkpoint "
                        "is imported or executed",
                        m->what, mod, name, m->op_ofs);
    }
    return push(m, g);
}

static bool global_part_ok(const char *s, size_t n, size_t cap)
{
    if (n == 0 || n + 1 >= cap) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) return false;
    return true;
}

static tps_status op_global(vm *m)
{
    char mod[128], name[128];
    char *parts[2] = {mod, name};
    for (int k = 0; k < 2; k++) {
        size_t i = 0;
        for (;;) {
            if (m->pos >= m->len) return bad(m, NULL, "GLOBAL name runs past the end of the pickle");
            char c = (char)m->p[m->pos++];
            if (c == '\n') break;
            if (i + 1 >= sizeof mod || (unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
                return bad(m, NULL, "GLOBAL name too long or not printable ASCII");
            parts[k][i++] = c;
        }
        parts[k][i] = '\0';
    }
    return resolve_global(m, mod, name);
}

/* STACK_GLOBAL (protocol 4): module and name are the two strings on top of the stack. */
static tps_status op_stack_global(vm *m)
{
    tps_pv *mv = NULL, *nv = NULL;
    tps_status st = pop(m, &nv);
    if (!st) st = pop(m, &mv);
    if (st) return st;
    char mod[128], name[128];
    if (mv->kind != TPS_PV_STR || nv->kind != TPS_PV_STR || !global_part_ok(mv->u.str.s, mv->u.str.len, sizeof mod) ||
        !global_part_ok(nv->u.str.s, nv->u.str.len, sizeof name))
        return bad(m, NULL, "STACK_GLOBAL of something other than two short printable ASCII strings");
    memcpy(mod, mv->u.str.s, mv->u.str.len + 1);
    memcpy(name, nv->u.str.s, nv->u.str.len + 1);
    return resolve_global(m, mod, name);
}

static bool as_u64(const tps_pv *v, uint64_t *out)
{
    if (v->kind != TPS_PV_INT || v->u.i < 0) return false;
    *out = (uint64_t)v->u.i;
    return true;
}

static tps_status int_tuple(vm *m, const tps_pv *t, const char *what, int *n, uint64_t *vals)
{
    char msg[96];
    snprintf(msg, sizeof msg, "tensor %s is not a tuple of non-negative ints (at most %d)", what, TPS_MAX_DIMS);
    if (t->kind != TPS_PV_TUPLE || t->u.seq.n > TPS_MAX_DIMS) return bad(m, NULL, msg);
    for (size_t i = 0; i < t->u.seq.n; i++)
        if (!as_u64(t->u.seq.items[i], &vals[i])) return bad(m, NULL, msg);
    *n = (int)t->u.seq.n;
    return TPS_OK;
}

static tps_status rebuild_tensor(vm *m, tps_pg_kind kind, const tps_pv *args, tps_pv **out)
{
    size_t n = args->u.seq.n;
    tps_pv *const *a = args->u.seq.items;
    bool ok = (kind == TPS_PG_REBUILD_TENSOR && n == 4) || (kind == TPS_PG_REBUILD_V2 && (n == 6 || n == 7)) ||
              (kind == TPS_PG_REBUILD_V3 && (n == 7 || n == 8));
    if (!ok) return bad(m, NULL, "tensor rebuild call with the wrong number of arguments");
    if (a[0]->kind != TPS_PV_STORAGE) return bad(m, NULL, "tensor rebuild call whose first argument is not a storage");
    tps_pv *t = node(m, TPS_PV_TENSOR);
    if (!t || !(t->u.tensor.size = calloc(2 * TPS_MAX_DIMS, sizeof *t->u.tensor.size))) return oom(m);
    t->u.tensor.stride = t->u.tensor.size + TPS_MAX_DIMS;
    t->u.tensor.storage = a[0];
    if (!as_u64(a[1], &t->u.tensor.offset)) return bad(m, NULL, "tensor storage offset is not a non-negative int");
    int nd_size, nd_stride;
    tps_status st = int_tuple(m, a[2], "size", &nd_size, t->u.tensor.size);
    if (!st) st = int_tuple(m, a[3], "stride", &nd_stride, t->u.tensor.stride);
    if (st) return st;
    if (nd_size != nd_stride) return bad(m, NULL, "tensor size and stride have different lengths");
    t->u.tensor.ndim = nd_size;
    t->u.tensor.dt = a[0]->u.storage.dt;
    if (kind != TPS_PG_REBUILD_TENSOR) {
        if (a[4]->kind != TPS_PV_BOOL) return bad(m, NULL, "tensor requires_grad is not a bool");
        if (a[5]->kind != TPS_PV_DICT) return bad(m, NULL, "tensor backward_hooks is not a dict");
    }
    if (kind == TPS_PG_REBUILD_V3) {
        if (a[6]->kind != TPS_PV_GLOBAL || a[6]->u.global.kind != TPS_PG_DTYPE)
            return bad(m, NULL, "_rebuild_tensor_v3 dtype argument is not a torch dtype");
        const tps_torch_dtype *sdt = a[0]->u.storage.dt;
        if (sdt && sdt != a[6]->u.global.dt)
            return bad(m, NULL, "_rebuild_tensor_v3 dtype differs from its typed storage's dtype");
        t->u.tensor.dt = a[6]->u.global.dt;
    }
    if (!t->u.tensor.dt) return bad(m, NULL, "tensor on an untyped storage without a dtype");
    size_t meta = kind == TPS_PG_REBUILD_V2 ? 6 : 7;
    if (kind != TPS_PG_REBUILD_TENSOR && n > meta) {
        const tps_pv *md = a[meta];
        if (!(md->kind == TPS_PV_NONE || (md->kind == TPS_PV_DICT && md->u.dict.n == 0)))
            return bad(m, NULL, "tensor with conjugate/negative bit metadata is not supported");
    }
    *out = t;
    return TPS_OK;
}

/* _codecs.encode(s, "latin1"): protocol 2's way of pickling bytes; each code point of s is
 * one byte. */
static tps_status codecs_encode(vm *m, const tps_pv *args, tps_pv **out)
{
    if (args->u.seq.n != 2 || args->u.seq.items[0]->kind != TPS_PV_STR || args->u.seq.items[1]->kind != TPS_PV_STR ||
        (strcmp(args->u.seq.items[1]->u.str.s, "latin1") != 0 && strcmp(args->u.seq.items[1]->u.str.s, "latin-1") != 0))
        return bad(m, NULL, "_codecs.encode called with something other than (str, 'latin1')");
    const unsigned char *s = (const unsigned char *)args->u.seq.items[0]->u.str.s;
    size_t n = args->u.seq.items[0]->u.str.len, k = 0;
    tps_pv *b = node(m, TPS_PV_BYTES);
    if (!b || !(b->u.str.s = malloc(n + 1))) return oom(m);
    for (size_t i = 0; i < n; k++) { /* valid UTF-8 (checked when pushed) */
        unsigned c = s[i];
        if (c < 0x80) {
            b->u.str.s[k] = (char)c;
            i++;
        } else if ((c & 0xE0) == 0xC0 && ((c & 0x1F) << 6 | (s[i + 1] & 0x3F)) < 0x100) {
            b->u.str.s[k] = (char)((c & 0x1F) << 6 | (s[i + 1] & 0x3F));
            i += 2;
        } else {
            return bad(m, NULL, "_codecs.encode of a character outside latin-1");
        }
    }
    b->u.str.s[k] = '\0';
    b->u.str.len = k;
    *out = b;
    return TPS_OK;
}

static tps_status op_reduce(vm *m)
{
    tps_pv *args = NULL, *fn = NULL, *res = NULL;
    tps_status st = pop(m, &args);
    if (!st) st = pop(m, &fn);
    if (st) return st;
    if (fn->kind != TPS_PV_GLOBAL) return bad(m, NULL, "REDUCE of something that is not an allowed callable");
    if (args->kind != TPS_PV_TUPLE) return bad(m, NULL, "REDUCE arguments are not a tuple");
    switch (fn->u.global.kind) {
    case TPS_PG_ORDEREDDICT:
        if (args->u.seq.n != 0) return bad(m, NULL, "OrderedDict called with arguments");
        res = node(m, TPS_PV_DICT);
        break;
    case TPS_PG_REBUILD_TENSOR:
    case TPS_PG_REBUILD_V2:
    case TPS_PG_REBUILD_V3:
        st = rebuild_tensor(m, fn->u.global.kind, args, &res);
        if (st) return st;
        break;
    case TPS_PG_REBUILD_PARAM:
        if (args->u.seq.n != 3 || args->u.seq.items[0]->kind != TPS_PV_TENSOR)
            return bad(m, NULL, "_rebuild_parameter expects (tensor, requires_grad, hooks)");
        res = args->u.seq.items[0];
        break;
    case TPS_PG_STORAGE_TYPE:
    case TPS_PG_DTYPE:
        return bad(m, NULL, "REDUCE calls a storage type or dtype, which a state dict never does");
    case TPS_PG_OPAQUE:
        if (!(res = node(m, TPS_PV_OBJECT))) return oom(m);
        res->u.obj.cls = fn;
        res->u.obj.args = args;
        break;
    case TPS_PG_CODECS_ENCODE:
        st = codecs_encode(m, args, &res);
        if (st) return st;
        break;
    case TPS_PG_BYTES:
        if (args->u.seq.n != 0) return bad(m, NULL, "builtins.bytes called with arguments (only bytes() is protocol 2's b'')");
        if (!(res = node(m, TPS_PV_BYTES)) || !(res->u.str.s = calloc(1, 1))) return oom(m);
        break;
    case TPS_PG_GETATTR:
        /* Only the lookups of an enum member by name that DCP's .metadata makes (protocol 4
         * pickles an enum member as getattr(cls, name)): anything else could name a function
         * (getattr(os, "system")), so it is refused as the GLOBAL itself would be. */
        if (args->u.seq.n != 2 || args->u.seq.items[0]->kind != TPS_PV_GLOBAL ||
            (strcmp(args->u.seq.items[0]->u.global.name, DCP_MEM_FORMAT) != 0 &&
             strcmp(args->u.seq.items[0]->u.global.name, DCP_WRITE_ITEM_TYPE) != 0) ||
            args->u.seq.items[1]->kind != TPS_PV_STR)
            return tps_fail(m->err, TPS_EINVALID,
                            "%s: refused GLOBAL %s (pickle offset %zu): only getattr(" DCP_MEM_FORMAT " or " DCP_WRITE_ITEM_TYPE
                            ", name) is allowed",
                            m->what, fn->u.global.name, m->op_ofs);
        if (!(res = node(m, TPS_PV_OBJECT))) return oom(m);
        res->u.obj.cls = fn;
        res->u.obj.args = args;
        break;
    case TPS_PG_SET:
        if (args->u.seq.n > 1 || (args->u.seq.n == 1 && args->u.seq.items[0]->kind != TPS_PV_LIST))
            return bad(m, NULL, "set/frozenset called with something other than one list");
        if (!(res = node(m, TPS_PV_SET))) return oom(m);
        for (size_t i = 0; args->u.seq.n && i < args->u.seq.items[0]->u.seq.n; i++)
            TPS_CHECK(seq_add(m, res, args->u.seq.items[0]->u.seq.items[i]));
        break;
    }
    if (fn->u.global.kind == TPS_PG_ORDEREDDICT && res) res->u.dict.ordered = true;
    return push(m, res);
cleanup:
    return st;
}

/* NEWOBJ / NEWOBJ_EX: cls.__new__(cls, *args), kept as an opaque object of an allowed class
 * (an OrderedDict made this way is an empty dict). */
static tps_status op_newobj(vm *m, bool ex)
{
    tps_pv *kw = NULL, *args = NULL, *cls = NULL, *res = NULL;
    tps_status st = TPS_OK;
    if (ex) {
        TPS_CHECK(pop(m, &kw));
        if (kw->kind != TPS_PV_DICT || kw->u.dict.n) return bad(m, NULL, "NEWOBJ_EX with keyword arguments");
    }
    TPS_CHECK(pop(m, &args));
    TPS_CHECK(pop(m, &cls));
    if (args->kind != TPS_PV_TUPLE) return bad(m, NULL, "NEWOBJ arguments are not a tuple");
    if (cls->kind != TPS_PV_GLOBAL) return bad(m, NULL, "NEWOBJ of something that is not an allowed class");
    if (cls->u.global.kind == TPS_PG_ORDEREDDICT && args->u.seq.n == 0) {
        if (!(res = node(m, TPS_PV_DICT))) return oom(m);
        res->u.dict.ordered = true;
        return push(m, res);
    }
    if (cls->u.global.kind != TPS_PG_OPAQUE) return bad(m, NULL, "NEWOBJ of something that is not an allowed class");
    if (!(res = node(m, TPS_PV_OBJECT))) return oom(m);
    res->u.obj.cls = cls;
    res->u.obj.args = args;
    res->u.obj.newobj = true;
    return push(m, res);
cleanup:
    return st;
}

static tps_status op_persid(vm *m)
{
    tps_pv *pid = NULL;
    tps_status st = pop(m, &pid);
    if (st) return st;
    if (pid->kind != TPS_PV_TUPLE || pid->u.seq.n < 1 || pid->u.seq.items[0]->kind != TPS_PV_STR ||
        strcmp(pid->u.seq.items[0]->u.str.s, "storage") != 0)
        return bad(m, NULL, "persistent id is not a ('storage', ...) tuple");
    if (pid->u.seq.n == 6)
        return bad(m, NULL, "6-tuple storage persistent id: legacy (pre-1.6) torch.save format inside a zip archive");
    tps_pv *const *a = pid->u.seq.items;
    if (pid->u.seq.n != 5 || a[1]->kind != TPS_PV_GLOBAL || a[1]->u.global.kind != TPS_PG_STORAGE_TYPE ||
        a[3]->kind != TPS_PV_STR)
        return bad(m, NULL, "storage persistent id is not ('storage', storage type, key, location, numel)");
    tps_pv *s = node(m, TPS_PV_STORAGE);
    if (!s) return oom(m);
    char key[32];
    if (a[2]->kind == TPS_PV_INT && a[2]->u.i >= 0) {
        snprintf(key, sizeof key, "%lld", (long long)a[2]->u.i);
    } else if (a[2]->kind == TPS_PV_STR && a[2]->u.str.len > 0 && a[2]->u.str.len < sizeof key &&
               strspn(a[2]->u.str.s, "0123456789") == a[2]->u.str.len) {
        memcpy(key, a[2]->u.str.s, a[2]->u.str.len + 1);
    } else {
        return bad(m, NULL, "storage key is not a decimal number");
    }
    if (!(s->u.storage.key = strdup(key))) return oom(m);
    s->u.storage.dt = a[1]->u.global.dt;
    if (!as_u64(a[4], &s->u.storage.numel)) return bad(m, NULL, "storage numel is not a non-negative int");
    return push(m, s);
}

static const char *opcode_name(unsigned char op)
{
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 0x95: return "FRAME";
    case 0x94: return "MEMOIZE";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'P': return "PERSID";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x82: case 0x83: case 0x84: return "EXT";
    case 0x8b: return "LONG4";
    case 'T': return "BINSTRING";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    case 'l': return "LIST";
    case 'd': return "DICT";
    default: return "unknown";
    }
}

static tps_status memo_put(vm *m, uint64_t idx)
{
    if (!m->sp) return bad(m, NULL, "memo store with an empty stack");
    if (idx > m->memo_puts) return bad(m, NULL, "memo index out of sequence (Python assigns them in order)");
    if (!grow((void **)&m->memo, &m->memo_cap, (size_t)idx + 1, sizeof *m->memo)) return oom(m);
    if (idx == m->memo_puts) m->memo_puts++;
    m->memo[idx] = m->stack[m->sp - 1];
    return TPS_OK;
}

static tps_status memo_get(vm *m, uint64_t idx)
{
    if (idx >= m->memo_puts) return bad(m, NULL, "memo lookup of an index never stored");
    return push(m, m->memo[idx]);
}

static tps_status step(vm *m, bool *stop)
{
    const unsigned char *a = NULL;
    tps_pv *x = NULL, *y = NULL, *z = NULL;
    tps_status st = TPS_OK;
    m->op_ofs = m->pos;
    unsigned char op = m->p[m->pos++];
    switch (op) {
    case 0x80: /* PROTO */
        TPS_CHECK(take(m, 1, &a));
        if (a[0] < 2 || a[0] > 5) return bad(m, NULL, "unsupported pickle protocol");
        break;
    case '.': /* STOP */
        *stop = true;
        break;
    case '(': /* MARK */
        if (!grow((void **)&m->marks, &m->marks_cap, m->nmarks + 1, sizeof *m->marks)) return oom(m);
        m->marks[m->nmarks++] = m->sp;
        break;
    case 'c': return op_global(m);
    case 'q': TPS_CHECK(take(m, 1, &a)); return memo_put(m, a[0]);
    case 'r': TPS_CHECK(take(m, 4, &a)); return memo_put(m, (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24);
    case 'h': TPS_CHECK(take(m, 1, &a)); return memo_get(m, a[0]);
    case 'j': TPS_CHECK(take(m, 4, &a)); return memo_get(m, (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24);
    case 't': TPS_CHECK(pop_mark(m, TPS_PV_TUPLE, &x)); return push(m, x);
    case ')': return push(m, node(m, TPS_PV_TUPLE));
    case ']': return push(m, node(m, TPS_PV_LIST));
    case '}': return push(m, node(m, TPS_PV_DICT));
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
        size_t n = (size_t)(op - 0x84);
        tps_pv *items[3];
        for (size_t i = n; i-- > 0;) TPS_CHECK(pop(m, &items[i]));
        if (!(x = node(m, TPS_PV_TUPLE))) return oom(m);
        for (size_t i = 0; i < n; i++) TPS_CHECK(seq_add(m, x, items[i]));
        return push(m, x);
    }
    case 'X': { /* BINUNICODE */
        TPS_CHECK(take(m, 4, &a));
        uint32_t n = (uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24;
        TPS_CHECK(take(m, n, &a));
        return push_str(m, a, n);
    }
    case 'U': /* SHORT_BINSTRING, decoded as UTF-8 as torch.load does */
        TPS_CHECK(take(m, 1, &a));
        {
            size_t n = a[0];
            TPS_CHECK(take(m, n, &a));
            return push_str(m, a, n);
        }
    case 'K': TPS_CHECK(take(m, 1, &a)); return push_int(m, a[0]);
    case 'M': TPS_CHECK(take(m, 2, &a)); return push_int(m, a[0] | a[1] << 8);
    case 'J':
        TPS_CHECK(take(m, 4, &a));
        return push_int(m, (int32_t)((uint32_t)a[0] | (uint32_t)a[1] << 8 | (uint32_t)a[2] << 16 | (uint32_t)a[3] << 24));
    case 0x8a: { /* LONG1: n-byte two's complement little-endian */
        TPS_CHECK(take(m, 1, &a));
        size_t n = a[0];
        if (n > 8) return bad(m, NULL, "LONG1 integer wider than 64 bits");
        TPS_CHECK(take(m, n, &a));
        uint64_t u = 0;
        for (size_t i = 0; i < n; i++) u |= (uint64_t)a[i] << (8 * i);
        if (n > 0 && n < 8 && (a[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n);
        return push_int(m, (int64_t)u);
    }
    case 'G': { /* BINFLOAT: big-endian double */
        TPS_CHECK(take(m, 8, &a));
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = u << 8 | a[i];
        if (!(x = node(m, TPS_PV_FLOAT))) return oom(m);
        memcpy(&x->u.f, &u, sizeof u);
        return push(m, x);
    }
    case 'N': return push(m, node(m, TPS_PV_NONE));
    case 0x88: case 0x89:
        if (!(x = node(m, TPS_PV_BOOL))) return oom(m);
        x->u.b = op == 0x88;
        return push(m, x);
    case 'R': return op_reduce(m);
    case 'Q': return op_persid(m);
    case 's': /* SETITEM */
        TPS_CHECK(pop(m, &z));
        TPS_CHECK(pop(m, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind != TPS_PV_DICT) return bad(m, NULL, "SETITEM on something that is not a dict");
        TPS_CHECK(dict_set(m, x, y, z));
        return push(m, x);
    case 'u': /* SETITEMS */
        TPS_CHECK(pop_mark(m, TPS_PV_TUPLE, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind != TPS_PV_DICT) return bad(m, NULL, "SETITEMS on something that is not a dict");
        if (y->u.seq.n % 2) return bad(m, NULL, "SETITEMS with an odd number of items");
        for (size_t i = 0; i < y->u.seq.n; i += 2) TPS_CHECK(dict_set(m, x, y->u.seq.items[i], y->u.seq.items[i + 1]));
        return push(m, x);
    case 'a': /* APPEND */
        TPS_CHECK(pop(m, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind != TPS_PV_LIST) return bad(m, NULL, "APPEND to something that is not a list");
        TPS_CHECK(seq_add(m, x, y));
        return push(m, x);
    case 'e': /* APPENDS */
        TPS_CHECK(pop_mark(m, TPS_PV_TUPLE, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind != TPS_PV_LIST) return bad(m, NULL, "APPENDS to something that is not a list");
        for (size_t i = 0; i < y->u.seq.n; i++) TPS_CHECK(seq_add(m, x, y->u.seq.items[i]));
        return push(m, x);
    case 'b': /* BUILD: an OrderedDict's __dict__ (its _metadata, dropped), or an opaque object's state */
        TPS_CHECK(pop(m, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind == TPS_PV_OBJECT) {
            if (x->u.obj.state) return bad(m, NULL, "BUILD twice on one object");
            x->u.obj.state = y;
            return push(m, x);
        }
        if (x->kind != TPS_PV_DICT || (y->kind != TPS_PV_DICT && y->kind != TPS_PV_NONE))
            return bad(m, NULL, "BUILD on something other than a dict or an allowed object");
        return push(m, x);
    case 0x93: return op_stack_global(m);
    case 0x81: return op_newobj(m, false);
    case 0x92: return op_newobj(m, true);
    case 0x95: /* FRAME: a length hint only */
        TPS_CHECK(take(m, 8, &a));
        break;
    case 0x94: return memo_put(m, m->memo_puts); /* MEMOIZE */
    case 0x8c: /* SHORT_BINUNICODE */
        TPS_CHECK(take(m, 1, &a));
        {
            size_t n = a[0];
            TPS_CHECK(take(m, n, &a));
            return push_str(m, a, n);
        }
    case 0x8d: { /* BINUNICODE8 */
        TPS_CHECK(take(m, 8, &a));
        uint64_t n = le32(a) | (uint64_t)le32(a + 4) << 32;
        if (n > m->len - m->pos) return bad(m, NULL, "pickle truncated inside an opcode argument");
        TPS_CHECK(take(m, (size_t)n, &a));
        return push_str(m, a, (size_t)n);
    }
    case 'C': /* SHORT_BINBYTES */
        TPS_CHECK(take(m, 1, &a));
        {
            size_t n = a[0];
            TPS_CHECK(take(m, n, &a));
            return push_bytes(m, a, n);
        }
    case 'B': { /* BINBYTES */
        TPS_CHECK(take(m, 4, &a));
        uint32_t n = le32(a);
        TPS_CHECK(take(m, n, &a));
        return push_bytes(m, a, n);
    }
    case 0x8f: return push(m, node(m, TPS_PV_SET)); /* EMPTY_SET */
    case 0x90: /* ADDITEMS */
        TPS_CHECK(pop_mark(m, TPS_PV_TUPLE, &y));
        TPS_CHECK(pop(m, &x));
        if (x->kind != TPS_PV_SET) return bad(m, NULL, "ADDITEMS to something that is not a set");
        for (size_t i = 0; i < y->u.seq.n; i++) TPS_CHECK(seq_add(m, x, y->u.seq.items[i]));
        return push(m, x);
    case 0x91: /* FROZENSET */
        TPS_CHECK(pop_mark(m, TPS_PV_SET, &x));
        return push(m, x);
    case '2': /* DUP */
        if (!m->sp || (m->nmarks && m->sp <= m->marks[m->nmarks - 1])) return bad(m, NULL, "stack underflow (malformed pickle)");
        return push(m, m->stack[m->sp - 1]);
    case '0': /* POP: a value, or the topmost MARK when nothing is above it */
        if (m->nmarks && m->sp == m->marks[m->nmarks - 1]) {
            m->nmarks--;
            break;
        }
        TPS_CHECK(pop(m, &x));
        break;
    case '1': /* POP_MARK */
        if (!m->nmarks) return bad(m, NULL, "no MARK on the stack");
        m->sp = m->marks[--m->nmarks];
        break;
    default: {
        char msg[96];
        snprintf(msg, sizeof msg, "refused pickle opcode 0x%02x (%s): not in the weights-only subset", op, opcode_name(op));
        return bad(m, NULL, msg);
    }
    }
cleanup:
    return st;
}

tps_status tps_pickle_load(const unsigned char *data, size_t len, const char *what, tps_pickle **out, const tps_pv **root,
                           tps_error *err)
{
    *out = NULL;
    *root = NULL;
    tps_pickle *pk = calloc(1, sizeof *pk);
    if (!pk) return tps_fail_oom(err, "reading a pickle");
    vm m = {.p = data, .len = len, .what = what, .err = err, .pk = pk};
    tps_status st = TPS_OK;
    bool stop = false;
    while (!stop) {
        if (m.pos >= m.len) {
            m.op_ofs = m.pos;
            st = bad(&m, NULL, "pickle ends without STOP");
            goto cleanup;
        }
        TPS_CHECK(step(&m, &stop));
    }
    if (m.sp != 1 || m.nmarks) {
        st = bad(&m, NULL, "pickle stops with a malformed stack");
        goto cleanup;
    }
    if (m.pos != m.len) {
        st = bad(&m, NULL, "bytes after the pickle's STOP");
        goto cleanup;
    }
    *root = m.stack[0];
    *out = pk;
    pk = NULL;
cleanup:
    free(m.stack);
    free(m.marks);
    free(m.memo);
    tps_pickle_free(pk);
    return st;
}

size_t tps_pickle_count(const tps_pickle *p) { return p->nnodes; }

void tps_pickle_free(tps_pickle *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->nnodes; i++) {
        tps_pv *v = p->nodes[i];
        if (v->kind == TPS_PV_STR || v->kind == TPS_PV_BYTES) free(v->u.str.s);
        else if (v->kind == TPS_PV_SET) free(v->u.seq.items);
        else if (v->kind == TPS_PV_GLOBAL) free(v->u.global.name);
        else if (v->kind == TPS_PV_TUPLE || v->kind == TPS_PV_LIST) free(v->u.seq.items);
        else if (v->kind == TPS_PV_DICT) {
            free(v->u.dict.keys);
            free(v->u.dict.vals);
        } else if (v->kind == TPS_PV_STORAGE) free(v->u.storage.key);
        else if (v->kind == TPS_PV_TENSOR) free(v->u.tensor.size);
        free(v);
    }
    free(p->nodes);
    free(p);
}
