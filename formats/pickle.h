/* A restricted unpickler for torch.save's data.pkl: a stack machine that builds a value
 * tree and executes, imports and calls nothing.
 *
 * Byte layout (as torch.save writes it; CPython's pickletools documents each opcode): a
 * Python pickle, protocol 2 — a stream of one-byte opcodes, each followed by its fixed or
 * length-prefixed argument, ending with STOP ('.').  A torch state dict looks like
 *   PROTO 2, GLOBAL "collections\nOrderedDict\n", EMPTY_TUPLE, REDUCE, MARK,
 *     BINUNICODE key, GLOBAL "torch._utils\n_rebuild_tensor_v2\n",
 *       MARK (MARK "storage" GLOBAL "torch\nFloatStorage\n" "0" "cpu" numel TUPLE BINPERSID)
 *       offset (size..) (stride..) NEWFALSE (OrderedDict() ) TUPLE REDUCE
 *     ... SETITEMS, [EMPTY_DICT .. BUILD], STOP
 *
 * Accepted opcodes (the weights_only set of §2.7, less NEWOBJ/EMPTY_SET, which a state dict
 * never needs): PROTO, STOP, MARK, GLOBAL, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET, TUPLE,
 * TUPLE1-3, EMPTY_TUPLE, EMPTY_LIST, EMPTY_DICT, BINUNICODE (UTF-8 checked), SHORT_BINSTRING,
 * BININT, BININT1, BININT2, LONG1 (up to 8 bytes), BINFLOAT, NONE, NEWTRUE, NEWFALSE,
 * REDUCE, BINPERSID, SETITEM, SETITEMS, APPEND, APPENDS, BUILD.  Any other opcode is refused
 * with its byte value and name.
 *
 * Accepted GLOBALs (anything else, and any module sys/os/posix/nt, refused by name):
 *   collections.OrderedDict                      -> an empty dict when called with ()
 *   torch._utils._rebuild_tensor(_v2, _v3)       -> a tensor node
 *   torch._utils._rebuild_parameter              -> its tensor argument
 *   torch.<X>Storage, torch.storage.UntypedStorage (only as a persistent-id type)
 *   torch.<dtype> (str(dtype) names; only as _rebuild_tensor_v3's dtype argument)
 * REDUCE only on these callables; SETITEM(S) only on dicts; APPEND(S) only on lists; BUILD
 * only on a dict (the OrderedDict _metadata state, which is dropped).  BINPERSID takes
 * ('storage', storage type, key, location, numel); a 6-tuple is the legacy format.
 * Memory is bounded: at most TPS_PICKLE_MAX_OBJECTS values (about 64 bytes each; a state
 * dict needs about 20 per tensor, so this allows some 400,000 tensors); the stack and mark
 * stack hold at most that many; memo indices must be assigned in order as Python's pickler
 * does (an index at most the number of memo stores so far), so the memo is never larger
 * than the number of BINPUT opcodes. */
#ifndef TPS_PICKLE_H
#define TPS_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/index.h"

/* A torch dtype and its storage class. */
typedef struct tps_torch_dtype {
    const char *name;    /* str(dtype) without "torch.": "bfloat16" */
    const char *storage; /* legacy typed storage class ("BFloat16Storage"), NULL for new dtypes */
    int dtype;           /* tps_dtype, or -1 when safetensors has no equivalent */
    unsigned esize;      /* bytes per element */
    unsigned swap;       /* byte-swap unit for big-endian archives (component size) */
} tps_torch_dtype;

typedef enum tps_pv_kind {
    TPS_PV_NONE,
    TPS_PV_BOOL,
    TPS_PV_INT,
    TPS_PV_FLOAT,
    TPS_PV_STR,
    TPS_PV_TUPLE,
    TPS_PV_LIST,
    TPS_PV_DICT,
    TPS_PV_GLOBAL,
    TPS_PV_STORAGE,
    TPS_PV_TENSOR
} tps_pv_kind;

typedef enum tps_pg_kind {
    TPS_PG_ORDEREDDICT,
    TPS_PG_REBUILD_TENSOR,
    TPS_PG_REBUILD_V2,
    TPS_PG_REBUILD_V3,
    TPS_PG_REBUILD_PARAM,
    TPS_PG_STORAGE_TYPE, /* dt is the storage's dtype; NULL for UntypedStorage (bytes) */
    TPS_PG_DTYPE
} tps_pg_kind;

typedef struct tps_pv tps_pv;
struct tps_pv {
    tps_pv_kind kind;
    size_t offset; /* pickle byte offset of the opcode that made it */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            char *s; /* NUL-terminated, valid UTF-8 without NUL */
            size_t len;
        } str;
        struct {
            tps_pv **items;
            size_t n, cap;
        } seq; /* TUPLE, LIST */
        struct {
            tps_pv **keys, **vals;
            size_t n, cap;
        } dict;
        struct {
            tps_pg_kind kind;
            const tps_torch_dtype *dt;
        } global;
        struct {
            const tps_torch_dtype *dt; /* NULL: UntypedStorage, numel counts bytes */
            char *key;                 /* the record is data/<key> */
            uint64_t numel;
        } storage;
        struct {
            const tps_pv *storage;     /* a TPS_PV_STORAGE */
            const tps_torch_dtype *dt; /* the tensor's dtype */
            uint64_t offset;           /* storage offset, in elements of dt */
            int ndim;
            uint64_t *size;   /* ndim entries (heap, owned by the pickle) */
            uint64_t *stride; /* ndim entries, in elements */
        } tensor;
    } u;
};

#define TPS_PICKLE_MAX_OBJECTS (8u << 20)

typedef struct tps_pickle tps_pickle;

/* Runs the pickle in data (len bytes); what names it in messages ("m.bin: archive/data.pkl").
 * *root is owned by *out.  Refusals are TPS_EINVALID naming the opcode or GLOBAL and the
 * byte offset. */
tps_status tps_pickle_load(const unsigned char *data, size_t len, const char *what, tps_pickle **out,
                           const tps_pv **root, tps_error *err);
void tps_pickle_free(tps_pickle *p);

/* Values the pickle created (a bound for walks over its possibly shared containers). */
size_t tps_pickle_count(const tps_pickle *p);

/* The dtype whose str() is "torch.<name>"; NULL if unknown. */
const tps_torch_dtype *tps_torch_dtype_by_name(const char *name);

#endif
