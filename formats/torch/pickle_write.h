/* A protocol-2 pickle writer for torch.save checkpoints (Megatron-LM's model_optim_rng.pt):
 * the JSON encoding of pickled values (the reader's, the contract of issue 18: "$tuple",
 * "$dict", "$odict", "$bytes", "$set", "$int", "$float", "$dtype", "$global", "$reduce",
 * "$newobj"; "$tensor" is refused) turned back into pickle opcodes, and the state dict of
 * a torch.save archive.
 *
 * The bytes are those CPython's pickle.dumps(value, protocol=2) (the C pickler, _pickle.c,
 * which torch.save uses) writes for the same value, using only opcodes torch's weights_only
 * unpickler accepts (pytorch/pytorch:torch/_weights_only_unpickler.py): PROTO 2, BINUNICODE
 * (never SHORT_BINUNICODE), BININT1/BININT2/BININT, LONG1, BINFLOAT, NONE, NEWTRUE/NEWFALSE,
 * EMPTY_TUPLE/TUPLE1-3/MARK..TUPLE, EMPTY_LIST + APPEND/APPENDS, EMPTY_DICT +
 * SETITEM/SETITEMS (batched as the C pickler batches), GLOBAL, REDUCE, NEWOBJ, BUILD,
 * BINPERSID, BINPUT/LONG_BINPUT after every object Python memoizes (strings, non-empty
 * tuples, lists, dicts, globals, reduced objects), BINGET/LONG_BINGET where Python would
 * find the object in its memo: a global named twice, and a string equal to one already
 * written (Python's memo goes by identity; equal strings are one object where the pickled
 * program interned them, and reading back cannot tell the difference).  Protocol-2 forms:
 * bytes as _codecs.encode(latin-1 str, 'latin1') (empty bytes too, where Python calls
 * __builtin__.bytes(), a global weights_only lacks); a set as __builtin__.set(list); an
 * enum as GLOBAL Class + (value,) + REDUCE (Megatron's form; never getattr); a Namespace as
 * GLOBAL + () + NEWOBJ + state dict + BUILD.
 *
 * Globals ("$global", "$reduce", "$newobj") must be on the allow-list: torch's weights_only
 * defaults plus what NVIDIA/Megatron-LM:megatron/core/safe_globals.py registers.  Anything
 * else is refused by name and JSON byte offset, TPS_EINVALID.  So are integers needing more
 * than 255 bytes (LONG4), "$tensor" values, keys starting with "$" outside "$dict", and
 * unhashable dict keys (lists, dicts, sets). */
#ifndef TPS_PICKLE_WRITE_H
#define TPS_PICKLE_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/base/buf.h"
#include "../../lib/base/json.h"
#include "pickle.h"

/* One entry of the state dict: a tensor on its own storage, or None (dt NULL). */
typedef struct tps_pickle_entry {
    const char *key;
    const tps_torch_dtype *dt; /* NULL: the value is None (an _extra_state entry) */
    int ndim;
    const uint64_t *shape;
    const char *storage; /* the storage key: the bytes are the record data/<storage> */
} tps_pickle_entry;

/* PROTO 2, the value v encodes, STOP, appended to out.  what names v in messages. */
tps_status tps_pickle_write_json(const tps_json *v, const char *what, tps_buf *out, tps_error *err);

/* The same, also allowing the globals of also (NULL-terminated): a pickle that is not loaded
 * by weights_only (a DCP .metadata, formats/dcp/dcp_write.h) names classes outside the list. */
tps_status tps_pickle_write_json_also(const tps_json *v, const char *const *also, const char *what, tps_buf *out,
                                      tps_error *err);

/* A torch.save data.pkl of one tensor alone (e's key names it in messages): what
 * torch.save(tensor) writes, as a DCP chunk holds it. */
tps_status tps_pickle_write_tensor(const tps_pickle_entry *e, const char *what, tps_buf *out, tps_error *err);

/* A torch.save data.pkl: a dict of top's entries in order (top a JSON object, or NULL),
 * then model_key -> collections.OrderedDict of the entries in order.  A tensor is
 * torch._utils._rebuild_tensor_v2(storage, 0, size, contiguous stride, False,
 * OrderedDict()) on the legacy typed storage of its dtype (BINPERSID ('storage',
 * torch.<X>Storage, key, 'cpu', numel)), or _rebuild_tensor_v3 with the dtype as last
 * argument on a torch.storage.UntypedStorage (numel counting bytes) for dtypes without
 * one (float8, uint16/32/64). */
tps_status tps_pickle_write_checkpoint(const tps_json *top, const char *model_key, const tps_pickle_entry *e, size_t n,
                                       const char *what, tps_buf *out, tps_error *err);

/* Whether "module.name" may be named by a GLOBAL of a written pickle. */
bool tps_pickle_write_allowed(const char *dotted);

#endif
