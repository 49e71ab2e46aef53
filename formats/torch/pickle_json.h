/* A pickled value tree (pickle.h) as JSON, in the encoding of the Megatron contract (issue
 * 18), which the torch writer reads back:
 *   None/bool/int/str          -> null/true|false/number/string
 *   float                      -> a number that always has '.' or an exponent (3.0, not 3),
 *                                 the shortest text that reads back to the same double;
 *                                 non-finite {"$float": "inf" | "-inf" | "nan"}
 *   list -> [...]; tuple -> {"$tuple": [...]}; set/frozenset -> {"$set": [...]}
 *   dict with str keys none starting with '$' -> {...}; other dicts {"$dict": [[k, v], ...]};
 *   OrderedDict -> {"$odict": [[k, v], ...]}; bytes -> {"$bytes": "hex"}
 *   torch dtype -> {"$dtype": "bfloat16"}; any other bare GLOBAL -> {"$global": "mod.name"}
 *   an allowed class called (REDUCE) -> {"$reduce": ["mod.name", [args...]]}, with a third
 *     element, the BUILD state, when the pickle has one (numpy arrays and dtypes);
 *   NEWOBJ -> {"$newobj": ["mod.name", [args...], state-or-null]} (a Namespace's state is
 *     its field dict, a JSON object)
 *   tensor -> {"$tensor": {"dtype": "float32", "shape": [...]}} (informational);
 *   bare storage -> {"$storage": {"dtype": "float32" | "bytes", "numel": n}}.
 * Shared containers are written out each time they are referenced; a visit budget and a
 * depth limit (TPS_JSON_MAX_DEPTH, what tps_json_parse reads back) bound the output. */
#ifndef TPS_PICKLE_JSON_H
#define TPS_PICKLE_JSON_H

#include "../../lib/base/buf.h"
#include "pickle.h"

/* Appends v's JSON to out; what names the value in messages.  TPS_EINVALID when v nests
 * deeper than the JSON reader takes or refers to its shared values too many times. */
tps_status tps_pickle_json(const tps_pv *v, tps_buf *out, const char *what, tps_error *err);

/* The same into a new NUL-terminated string (*out, malloc'd). */
tps_status tps_pickle_json_str(const tps_pv *v, const char *what, char **out, tps_error *err);

/* The value of key (a str key) in a dict, or in an opaque object's dict state (a Namespace's
 * fields); NULL when absent. */
const tps_pv *tps_pv_get(const tps_pv *v, const char *key);

#endif
