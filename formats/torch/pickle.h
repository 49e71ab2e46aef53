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
 * Accepted opcodes: the weights_only set (PROTO, STOP, MARK, GLOBAL, BINPUT, LONG_BINPUT,
 * BINGET, LONG_BINGET, TUPLE, TUPLE1-3, EMPTY_TUPLE, EMPTY_LIST, EMPTY_DICT, EMPTY_SET,
 * BINUNICODE (UTF-8 checked), SHORT_BINSTRING, BININT, BININT1, BININT2, LONG1 (up to 8
 * bytes), BINFLOAT, NONE, NEWTRUE, NEWFALSE, REDUCE, NEWOBJ, BINPERSID, SETITEM, SETITEMS,
 * APPEND, APPENDS, BUILD) plus, because a Megatron checkpoint may have been written with
 * another protocol (the interop spec C.3), SHORT_BINUNICODE, BINUNICODE8, SHORT_BINBYTES,
 * BINBYTES, ADDITEMS, FROZENSET, FRAME, MEMOIZE, STACK_GLOBAL, NEWOBJ_EX (empty kwargs),
 * DUP, POP, POP_MARK.  Any other opcode is refused with its byte value and name.
 *
 * Accepted GLOBALs (GLOBAL or STACK_GLOBAL; anything else, and any module sys/os/posix/nt,
 * refused by name and byte offset):
 *   collections.OrderedDict                      -> an empty dict when called with ()
 *   torch._utils._rebuild_tensor(_v2, _v3)       -> a tensor node
 *   torch._utils._rebuild_parameter              -> its tensor argument
 *   torch.<X>Storage, torch.storage.UntypedStorage (only as a persistent-id type)
 *   torch.<dtype> (str(dtype) names): _rebuild_tensor_v3's dtype, or a value (args.params_dtype)
 *   _codecs.encode, builtins.bytes               -> bytes; builtins.set/frozenset -> a set
 *   the classes torch's weights_only defaults and Megatron's safe_globals.py allow
 *   (argparse.Namespace, types.SimpleNamespace, pathlib.PosixPath, numpy's _reconstruct/
 *   ndarray/dtype/UInt32DType, Megatron's enums and OptimizerConfig, io/_io.BytesIO,
 *   signal.Signals, torch._C.Generator, torch.Size, torch.device, builtins.bytearray/complex)
 *   and torch.distributed.checkpoint's metadata dataclasses (formats/dcp/dcp.h lists them), and
 *   the save-plan classes Megatron-Core's torch_dist keeps in it (planner.SavePlan,
 *   WriteItem, WriteItemType, TensorWriteData)
 *   builtins.getattr                             -> an opaque object, only when called as
 *      getattr(torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING, str) or
 *      getattr(torch.distributed.checkpoint.planner.WriteItemType, str) (enum members)
 *                                                -> an opaque TPS_PV_OBJECT recording the
 *      call's arguments and BUILD state; nothing is constructed.
 * REDUCE only on these callables; SETITEM(S) only on dicts; APPEND(S) only on lists;
 * ADDITEMS only on sets; BUILD on a dict (the OrderedDict _metadata state, dropped) or once
 * on an opaque object.  BINPERSID takes ('storage', storage type, key, location, numel); a
 * 6-tuple is the legacy format.
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

#include "../../lib/base/index.h"

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
    TPS_PV_TENSOR,
    TPS_PV_BYTES,  /* u.str (may hold NULs): SHORT_BINBYTES/BINBYTES, _codecs.encode(s, "latin1") */
    TPS_PV_SET,    /* u.seq: EMPTY_SET/ADDITEMS, FROZENSET, builtins.set([...]) */
    TPS_PV_OBJECT  /* an allowed class called (REDUCE) or instantiated (NEWOBJ): u.obj */
} tps_pv_kind;

typedef enum tps_pg_kind {
    TPS_PG_ORDEREDDICT,
    TPS_PG_REBUILD_TENSOR,
    TPS_PG_REBUILD_V2,
    TPS_PG_REBUILD_V3,
    TPS_PG_REBUILD_PARAM,
    TPS_PG_STORAGE_TYPE, /* dt is the storage's dtype; NULL for UntypedStorage (bytes) */
    TPS_PG_DTYPE,
    TPS_PG_OPAQUE,        /* an allowed class (argparse.Namespace, an enum, ...): kept as a value */
    TPS_PG_CODECS_ENCODE, /* _codecs.encode(str, "latin1"): protocol 2's bytes */
    TPS_PG_BYTES,         /* builtins.bytes(): protocol 2's b"" */
    TPS_PG_SET,           /* builtins.set / frozenset */
    TPS_PG_GETATTR        /* builtins.getattr: only REDUCEd as getattr(DCP's _MEM_FORMAT_ENCODING, str) */
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
            char *s; /* NUL-terminated, valid UTF-8; may hold NULs (a latin-1 str of bytes): use len */
            size_t len;
        } str;
        struct {
            tps_pv **items;
            size_t n, cap;
        } seq; /* TUPLE, LIST */
        struct {
            tps_pv **keys, **vals;
            size_t n, cap;
            bool ordered; /* made by collections.OrderedDict() */
        } dict;
        struct {
            tps_pg_kind kind;
            const tps_torch_dtype *dt;
            char *name; /* "module.name" as the pickle spells it */
        } global;
        struct {
            const tps_pv *cls; /* the TPS_PV_GLOBAL (kind TPS_PG_OPAQUE) */
            const tps_pv *args; /* a tuple */
            const tps_pv *state; /* BUILD's argument, or NULL */
            bool newobj; /* NEWOBJ (cls.__new__(cls, *args)) rather than REDUCE (cls(*args)) */
        } obj;
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
