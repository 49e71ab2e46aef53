/* The restricted unpickler on hand-assembled pickles (opcode bytes per the pickle protocol,
 * as pickletools documents them) and on a data.pkl that torch 1.13 wrote. */
#include <stdlib.h>
#include <string.h>

#include "formats/torch/pickle.h"
#include "formats/zip.h"
#include "tps_test.h"

static tps_status load(const char *bytes, size_t n, tps_pickle **pk, const tps_pv **root, tps_error *err)
{
    tps_error_clear(err);
    return tps_pickle_load((const unsigned char *)bytes, n, "test.pkl", pk, root, err);
}

#define LOAD(lit, pk, root, err) load(lit, sizeof lit - 1, pk, root, err)

static const tps_pv *dict_get(const tps_pv *d, const char *key)
{
    for (size_t i = 0; d && d->kind == TPS_PV_DICT && i < d->u.dict.n; i++)
        if (d->u.dict.keys[i]->kind == TPS_PV_STR && strcmp(d->u.dict.keys[i]->u.str.s, key) == 0) return d->u.dict.vals[i];
    return NULL;
}

TEST(values_ints_floats_memo)
{
    /* {'a': (1, 300, -2, 2**31, -1 (LONG1 ff), 1.5), 'b': [True, None], 'c': memo copy of 'a'} */
    static const char p[] = "\x80\x02}q\x00(X\x01\x00\x00\x00" "a(K\x01M\x2c\x01J\xfe\xff\xff\xff\x8a\x05\x00\x00\x00\x80\x00"
                            "\x8a\x01\xffG\x3f\xf8\x00\x00\x00\x00\x00\x00tq\x01X\x01\x00\x00\x00" "b]q\x02(\x88Ne"
                            "X\x01\x00\x00\x00" "ch\x01u.";
    tps_pickle *pk = NULL;
    const tps_pv *root = NULL;
    tps_error err;
    CHECK_EQ_U64(LOAD(p, &pk, &root, &err), TPS_OK);
    if (!root) {
        printf("#   %s\n", err.msg);
        return;
    }
    CHECK_EQ_U64(root->kind, TPS_PV_DICT);
    const tps_pv *a = dict_get(root, "a"), *b = dict_get(root, "b"), *c = dict_get(root, "c");
    CHECK(a && a->kind == TPS_PV_TUPLE && a->u.seq.n == 6);
    if (a && a->u.seq.n == 6) {
        CHECK_EQ_U64(a->u.seq.items[0]->u.i, 1);
        CHECK_EQ_U64(a->u.seq.items[1]->u.i, 300);
        CHECK(a->u.seq.items[2]->u.i == -2);
        CHECK(a->u.seq.items[3]->u.i == 2147483648ll);
        CHECK(a->u.seq.items[4]->u.i == -1);
        CHECK(a->u.seq.items[5]->kind == TPS_PV_FLOAT && a->u.seq.items[5]->u.f == 1.5);
    }
    CHECK(b && b->kind == TPS_PV_LIST && b->u.seq.n == 2 && b->u.seq.items[0]->u.b && b->u.seq.items[1]->kind == TPS_PV_NONE);
    CHECK(c == a); /* BINGET returns the memoized object itself */
    tps_pickle_free(pk);
}

static void expect_refused(const char *bytes, size_t n, const char *fragment)
{
    tps_pickle *pk = NULL;
    const tps_pv *root = NULL;
    tps_error err;
    CHECK_EQ_U64(load(bytes, n, &pk, &root, &err), TPS_EINVALID);
    CHECK(pk == NULL && root == NULL);
    CHECK_CONTAINS(err.msg, fragment);
    CHECK_CONTAINS(err.msg, "test.pkl");
    tps_pickle_free(pk);
}

#define REFUSED(lit, frag) expect_refused(lit, sizeof lit - 1, frag)

TEST(hostile_globals_refused_by_name)
{
    REFUSED("\x80\x02\x63os\nsystem\n(X\x02\x00\x00\x00idtR.", "refused GLOBAL os.system");
    REFUSED("\x80\x02\x63" "builtins\neval\n.", "refused GLOBAL builtins.eval");
    REFUSED("\x80\x02\x63__builtin__\ngetattr\n.", "refused GLOBAL __builtin__.getattr");
    REFUSED("\x80\x02\x63torch\nload\n.", "refused GLOBAL torch.load");
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_qtensor\n.", "refused GLOBAL torch._utils._rebuild_qtensor");
    REFUSED("\x80\x02\x63torch\nTensor\n.", "refused GLOBAL torch.Tensor");
    REFUSED("\x80\x02\x63sys\nmodules\n.", "refused GLOBAL sys.modules");
    REFUSED("\x80\x02\x63os\n\x01x\n.", "not printable ASCII");
}

TEST(opcodes_outside_the_subset_refused)
{
    REFUSED("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00.", "malformed stack"); /* FRAME is read, then nothing */
    REFUSED("\x80\x02\x93.", "stack underflow");
    REFUSED("\x80\x04\x8c\x02os\x8c\x06system\x93.", "refused GLOBAL os.system");
    REFUSED("\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94(X\x02\x00\x00\x00idtR.", "refused GLOBAL os.system");
    REFUSED("\x80\x04K\x01\x8c\x01x\x93.", "STACK_GLOBAL of something other than two short printable ASCII strings");
    REFUSED("\x80\x02\x63" "builtins\neval\n)\x81.", "refused GLOBAL builtins.eval");
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n)\x81.", "NEWOBJ of something that is not an allowed class");
    REFUSED("\x80\x02K\x01)\x81.", "NEWOBJ of something that is not an allowed class");
    REFUSED("\x80\x02\x63" "argparse\nNamespace\n)}\x92}.", "malformed stack"); /* NEWOBJ_EX with empty kwargs is fine */
    REFUSED("\x80\x02\x63" "argparse\nNamespace\n)}K\x01K\x01s\x92.", "NEWOBJ_EX with keyword arguments");
    REFUSED("\x80\x02\x63" "argparse\nNamespace\n)\x81}b}b.", "BUILD twice on one object");
    REFUSED("\x80\x02\x63_codecs\nencode\nX\x02\x00\x00\x00\xc4\x80X\x06\x00\x00\x00latin1\x86R.", "outside latin-1");
    REFUSED("\x80\x02\x63_codecs\nencode\nX\x01\x00\x00\x00" "aX\x05\x00\x00\x00utf-8\x86R.", "(str, 'latin1')");
    REFUSED("\x80\x02]K\x01\x90.", "no MARK");
    REFUSED("\x80\x02](K\x01\x90.", "ADDITEMS to something that is not a set");
    REFUSED("\x80\x02\x32.", "stack underflow"); /* DUP */
    REFUSED("\x80\x02\x31.", "no MARK");          /* POP_MARK */
    REFUSED("\x80\x02(ios\nsystem\n.", "0x69 (INST)");
    REFUSED("\x80\x02I1\n.", "0x49 (INT)");
    REFUSED("\x80\x02p0\n.", "0x70 (PUT)");
    REFUSED("\x80\x02P1\n.", "0x50 (PERSID)");
    REFUSED("\x80\x02\x8e\x00\x00\x00\x00\x00\x00\x00\x00.", "0x8e (BINBYTES8)");
    REFUSED("\x80\x02\xfe.", "0xfe (unknown)");
    REFUSED("\x80\x01}.", "unsupported pickle protocol");
}

TEST(structure_errors_refused)
{
    REFUSED("\x80\x02}", "ends without STOP");
    REFUSED("\x80\x02}}.", "malformed stack");
    REFUSED("\x80\x02}.junk", "bytes after the pickle's STOP");
    REFUSED("\x80\x02s.", "stack underflow");
    REFUSED("\x80\x02((K\x01K\x02u.", "stack underflow"); /* SETITEMS may not take its dict from below a MARK */
    REFUSED("\x80\x02t.", "no MARK");
    REFUSED("\x80\x02h\x00.", "memo lookup of an index never stored");
    REFUSED("\x80\x02}q\x01.", "memo index out of sequence");
    REFUSED("\x80\x02}r\xff\xff\xff\xff.", "memo index out of sequence");
    REFUSED("\x80\x02X\xff\xff\xff\x7f" "ab.", "truncated inside an opcode argument");
    REFUSED("\x80\x02X\x02\x00\x00\x00\xc0\x80.", "not valid UTF-8");
    REFUSED("\x80\x02]K\x01K\x02s.", "SETITEM on something that is not a dict");
    REFUSED("\x80\x02}K\x01" "a.", "APPEND to something that is not a list");
    REFUSED("\x80\x02]}b.", "BUILD on something other than a dict");
    REFUSED("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", "wider than 64 bits");
    REFUSED("\x80\x02K\x01)R.", "REDUCE of something that is not an allowed callable");
    REFUSED("\x80\x02\x63" "collections\nOrderedDict\nK\x01\x85R.", "OrderedDict called with arguments");
    REFUSED("\x80\x02\x63torch\nFloatStorage\n)R.", "REDUCE calls a storage type");
    REFUSED("\x80\x02(X\x03\x00\x00\x00" "abcK\x01tQ.", "persistent id is not a ('storage', ...) tuple");
    REFUSED("\x80\x02(X\x07\x00\x00\x00storage\x63torch\nFloatStorage\nX\x02\x00\x00\x00-1X\x03\x00\x00\x00" "cpuK\x01tQ.",
            "storage key is not a decimal number");
}

/* A 5-tuple pid ('storage', FloatStorage, '0', 'cpu', 12) and a _rebuild_tensor_v2 call. */
#define PID "(X\x07\x00\x00\x00storage\x63torch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x0ctQ"
#define HOOKS "\x63" "collections\nOrderedDict\n)R"

TEST(rebuild_tensor_v2_and_parameter)
{
    static const char p[] = "\x80\x02}(X\x01\x00\x00\x00t\x63torch._utils\n_rebuild_tensor_v2\n(" PID
                            "K\x02K\x04K\x03\x86K\x01K\x04\x86\x89" HOOKS "tR"
                            "X\x01\x00\x00\x00p\x63torch._utils\n_rebuild_parameter\n(\x63torch._utils\n_rebuild_tensor\n(" PID
                            "K\x00K\x0c\x85K\x01\x85tR\x88" HOOKS "tRu.";
    tps_pickle *pk = NULL;
    const tps_pv *root = NULL;
    tps_error err;
    CHECK_EQ_U64(LOAD(p, &pk, &root, &err), TPS_OK);
    if (!root) {
        printf("#   %s\n", err.msg);
        return;
    }
    const tps_pv *t = dict_get(root, "t"), *par = dict_get(root, "p");
    CHECK(t && t->kind == TPS_PV_TENSOR);
    if (t && t->kind == TPS_PV_TENSOR) {
        CHECK_EQ_U64(t->u.tensor.offset, 2);
        CHECK_EQ_U64(t->u.tensor.ndim, 2);
        CHECK_EQ_U64(t->u.tensor.size[0], 4);
        CHECK_EQ_U64(t->u.tensor.size[1], 3);
        CHECK_EQ_U64(t->u.tensor.stride[0], 1);
        CHECK_EQ_U64(t->u.tensor.stride[1], 4);
        CHECK_STR(t->u.tensor.dt->name, "float32");
        CHECK_STR(t->u.tensor.storage->u.storage.key, "0");
        CHECK_EQ_U64(t->u.tensor.storage->u.storage.numel, 12);
    }
    CHECK(par && par->kind == TPS_PV_TENSOR && par->u.tensor.ndim == 1 && par->u.tensor.size[0] == 12);
    tps_pickle_free(pk);
}

TEST(rebuild_tensor_v3_dtype_rules)
{
    /* UntypedStorage + explicit dtype: the torch 2.x form for float8. */
    static const char ok[] = "\x80\x02}X\x01\x00\x00\x00" "f\x63torch._utils\n_rebuild_tensor_v3\n("
                             "(X\x07\x00\x00\x00storage\x63torch.storage\nUntypedStorage\nX\x01\x00\x00\x00" "7X\x03\x00\x00\x00" "cpuK\x04tQ"
                             "K\x00K\x04\x85K\x01\x85\x89" HOOKS "\x63torch\nfloat8_e4m3fn\ntRs.";
    tps_pickle *pk = NULL;
    const tps_pv *root = NULL;
    tps_error err;
    CHECK_EQ_U64(LOAD(ok, &pk, &root, &err), TPS_OK);
    const tps_pv *f = root ? dict_get(root, "f") : NULL;
    CHECK(f && f->kind == TPS_PV_TENSOR && f->u.tensor.dt->dtype == TPS_DT_F8_E4M3 && f->u.tensor.storage->u.storage.dt == NULL);
    tps_pickle_free(pk);
    /* v3 whose dtype contradicts its typed storage. */
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v3\n(" PID "K\x00K\x01\x85K\x01\x85\x89" HOOKS "\x63torch\nint32\ntR.",
            "differs from its typed storage");
    /* v2 with a non-empty metadata dict (conj/neg bits). */
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n(" PID "K\x00K\x01\x85K\x01\x85\x89" HOOKS "}K\x01K\x01stR.",
            "conjugate/negative bit");
    /* size and stride of different lengths; negative sizes. */
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n(" PID "K\x00K\x01K\x01\x86K\x01\x85\x89" HOOKS "tR.",
            "different lengths");
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n(" PID "K\x00J\xff\xff\xff\xff\x85K\x01\x85\x89" HOOKS "tR.",
            "size is not a tuple of non-negative ints");
    REFUSED("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n(" PID "K\x00K\x01\x85K\x01\x85tR.", "wrong number of arguments");
}

/* data.pkl of a real torch 1.13 save: shared storage, offsets and strides as torch defines
 * them for base[2:8].view(2,3), base[:12].view(3,4).t() and base.view(4,6)[:, 1:4]. */
TEST(real_torch_pickle_views)
{
    char path[1024];
    const char *top = getenv("TPS_TOP");
    snprintf(path, sizeof path, "%s/testdata/torch/views.bin", top && *top ? top : ".");
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    int fd = fileno(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    tps_error err;
    tps_error_clear(&err);
    tps_zip *z = NULL;
    CHECK_EQ_U64(tps_zip_open(fd, path, (uint64_t)size, 0, &z, &err), TPS_OK);
    const tps_zip_entry *e = z ? tps_zip_find(z, "views/data.pkl") : NULL;
    CHECK(e != NULL);
    char *pkl = NULL;
    size_t len = 0;
    if (e) CHECK_EQ_U64(tps_zip_read_all(z, e, 1 << 20, &pkl, &len, &err), TPS_OK);
    tps_pickle *pk = NULL;
    const tps_pv *root = NULL;
    if (pkl) CHECK_EQ_U64(tps_pickle_load((unsigned char *)pkl, len, "views.pkl", &pk, &root, &err), TPS_OK);
    if (root) {
        const tps_pv *base = dict_get(root, "base"), *a = dict_get(root, "view_a"), *b = dict_get(root, "view_b"),
                     *c = dict_get(root, "cols"), *s = dict_get(root, "scalar");
        CHECK(base && a && b && c && s);
        if (base && a && b && c && s) {
            CHECK_STR(a->u.tensor.storage->u.storage.key, base->u.tensor.storage->u.storage.key);
            CHECK_STR(b->u.tensor.storage->u.storage.key, base->u.tensor.storage->u.storage.key);
            CHECK_EQ_U64(base->u.tensor.storage->u.storage.numel, 24);
            CHECK_EQ_U64(a->u.tensor.offset, 2);
            CHECK_EQ_U64(a->u.tensor.stride[0], 3);
            CHECK_EQ_U64(b->u.tensor.offset, 0);
            CHECK_EQ_U64(b->u.tensor.size[0], 4);
            CHECK_EQ_U64(b->u.tensor.stride[0], 1);
            CHECK_EQ_U64(b->u.tensor.stride[1], 4);
            CHECK_EQ_U64(c->u.tensor.offset, 1);
            CHECK_EQ_U64(c->u.tensor.stride[0], 6);
            CHECK_EQ_U64(s->u.tensor.ndim, 0);
            CHECK_EQ_U64(s->u.tensor.offset, 5);
        }
    }
    tps_pickle_free(pk);
    free(pkl);
    tps_zip_free(z);
    fclose(f);
}

int main(void)
{
    RUN(values_ints_floats_memo);
    RUN(hostile_globals_refused_by_name);
    RUN(opcodes_outside_the_subset_refused);
    RUN(structure_errors_refused);
    RUN(rebuild_tensor_v2_and_parameter);
    RUN(rebuild_tensor_v3_dtype_rules);
    RUN(real_torch_pickle_views);
    return tps_test_done();
}
