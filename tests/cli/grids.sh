#!/bin/sh
# vLLM TP x PP grids (split/reshard --target vllm --pp P / --pp-layers): vLLM's file pattern
# model-pp-{p}-tp-{r}-part-{k}.safetensors, each stage's files holding its own layers (the
# embedding on the first, the final norm and lm_head on the last); check, verify and merge on
# them; reshard between grids; the refusals and their exit codes; check and the manifest
# reader catching a tensor in the wrong stage's file, a stage without files, a stage edited in
# the manifest.  (The real vLLM loading these sets: tests/interop/vllm/real/vllm_real_grids.py.)
. "$TPS_TOP/tests/cli/lib.sh"
M="$FIX/models"
PY=/usr/bin/python3

# stage_keys DIR FILE: the tensor names in DIR/FILE, one line.
stage_keys() {
    $PY -c "import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n)); h.pop('__metadata__',None); print(' '.join(sorted(h)))" "$1/$2"
}

src="$M/tiny-llama"
check "split --tp 2 --pp 2 --target vllm" "$TPSHARD" split "$src" --tp 2 --pp 2 --target vllm -o g22 -q
names=$(cd g22 && ls *.safetensors | tr '\n' ' ')
if [ "$names" = "model-pp-0-tp-0-part-0.safetensors model-pp-0-tp-1-part-0.safetensors model-pp-1-tp-0-part-0.safetensors model-pp-1-tp-1-part-0.safetensors " ]; then
    ok "grid files named as vLLM's PP_AND_TP_PATTERN"
else
    notok "grid files named as vLLM's PP_AND_TP_PATTERN"; echo "#   $names"
fi
k0=$(stage_keys g22 model-pp-0-tp-1-part-0.safetensors) k1=$(stage_keys g22 model-pp-1-tp-1-part-0.safetensors)
case "$k0|$k1" in
*model.layers.1.*\|*) notok "stage 0 holds only layer 0 and the embedding"; echo "#   $k0" ;;
model.embed_tokens.weight\ model.layers.0.*\|lm_head.weight\ model.layers.1.*model.norm.weight)
    case "$k1" in *model.layers.0.*|*embed*) notok "stage 1 holds layer 1, norm and lm_head only"; echo "#   $k1" ;;
    *) ok "stage 0: embedding and layer 0; stage 1: layer 1, norm, lm_head (each with its attention scales)" ;; esac ;;
*) notok "stage contents"; echo "#   $k0"; echo "#   $k1" ;;
esac
$PY -c "import json,sys; m=json.load(open('g22/tpshard.json')); assert m['pp']==2 and m['pp_layers']==[1,1]; assert {f['pp_rank'] for f in m['files']}=={0,1}; assert all('pp_stage' in t for t in m['tensors'])" &&
    ok "the manifest records the grid (pp, pp_layers, each file's pp_rank, each tensor's pp_stage)" ||
    notok "the manifest records the grid"
check "check passes on the grid" "$TPSHARD" check g22 -q
check "verify --layer all on the grid (each stage's layers)" "$TPSHARD" verify g22 --source "$src" --layer all -q
check "verify --whole-model on the grid" "$TPSHARD" verify g22 --source "$src" --whole-model -q
check "merge the grid" "$TPSHARD" merge g22 -o g22.safetensors -q
check "merge of tp 2 x pp 2 is bit-exact" same_tensors g22.safetensors "$src/model.safetensors"

# reshard between grids: tp 2 x pp 2 -> tp 4 -> tp 2 x pp 2 and back, every hop checked
check "reshard tp 2 x pp 2 -> tp 4 (--pp 1)" "$TPSHARD" reshard g22 --tp 4 --pp 1 -o t4 -q
[ -f t4/model-rank-3-part-0.safetensors ] && ! ls t4 | grep -q model-pp- && ok "--pp 1: a TP-only set" || notok "--pp 1: a TP-only set"
check "check the tp 4 set" "$TPSHARD" check t4 -q
check "merge tp 4" "$TPSHARD" merge t4 -o t4.safetensors -q
check "merge of the tp 4 set is bit-exact" same_tensors t4.safetensors "$src/model.safetensors"
check "reshard tp 4 -> tp 2 x pp 2" "$TPSHARD" reshard t4 --tp 2 --pp 2 -o back -q
check "the round trip gives the split's files byte for byte" diff -r g22 back
check "reshard tp 2 x pp 2 -> tp 2 keeps the grid" "$TPSHARD" reshard g22 --tp 2 -o same -q
check "... byte for byte" diff -r g22 same
check "reshard tp 2 x pp 2 -> tp 1 x pp 2" "$TPSHARD" reshard g22 --tp 1 -o g12 -q
check "check tp 1 x pp 2" "$TPSHARD" check g12 -q
check "reshard tp 2 x pp 2 -> tp 2 (--pp 1)" "$TPSHARD" reshard g22 --tp 2 --pp 1 -o t2 -q
check "split --tp 2" "$TPSHARD" split "$src" --tp 2 --target vllm -o t2b -q
# the same tensors and bytes (the grid's stage order may stay: vLLM reads by name)
for r in 0 1; do
    check "... rank $r's tensors and bytes" same_tensors t2/model-rank-$r-part-0.safetensors t2b/model-rank-$r-part-0.safetensors
done

# parts: each stage's parts count from 0; check reads them
check "split --tp 2 --pp 2 --max-shard-size 60KB" "$TPSHARD" split "$src" --tp 2 --pp 2 --target vllm --max-shard-size 60KB -o parts -q
[ -f parts/model-pp-1-tp-1-part-1.safetensors ] && [ -f parts/model-pp-0-tp-0-part-1.safetensors ] &&
    ok "parts count from 0 in each stage" || notok "parts count from 0 in each stage"
check "check the grid in parts" "$TPSHARD" check parts -q

# a mixture of experts: vLLM 0.32's MoE models hold embedding, norm and lm_head on every stage
# (tests/interop/vllm/real/vllm_real_grids.py saw its loader refuse a set without them): refused, named
expect_exit 3 "vLLM's MoE models (mixtral.py, qwen2_moe.py, qwen3_moe.py) hold the embedding" \
    "mixtral --pp 2: exit 3, naming why" "$TPSHARD" split "$M/tiny-mixtral" --tp 2 --pp 2 --target vllm -o mx
[ ! -e mx ] && ok "... nothing written" || notok "... nothing written"
# DeepSeek-V2/V3 (and GLM-4.5): vLLM's deepseek_v2.py and glm4_moe.py keep the embedding on
# the first stage and the norm and lm_head on the last, as llama.py does: written, MoE layers
# and all (the MTP layer skipped as at --pp 1); vllm_real_grids.py runs it on the real vLLM
ds="$M/tiny-deepseek-v3"
check "deepseek-v3 --tp 2 --pp 2 --target vllm" "$TPSHARD" split "$ds" --tp 2 --pp 2 --target vllm -o dsg -q
k0=$(stage_keys dsg model-pp-0-tp-0-part-0.safetensors) k1=$(stage_keys dsg model-pp-1-tp-0-part-0.safetensors)
case "$k0|$k1" in
model.embed_tokens.weight\ model.layers.0.*\|lm_head.weight\ model.layers.1.*model.norm.weight)
    case "$k0|$k1" in
    *model.layers.1.*\|* | *\|*model.layers.0.*) notok "deepseek-v3: each layer on its own stage"; echo "#   $k0"; echo "#   $k1" ;;
    *\|*routed_experts*) ok "deepseek-v3 stages: embedding and layer 0 (dense), then layer 1 (MoE), norm, lm_head" ;;
    *) notok "deepseek-v3 stage 1 holds the MoE layer's experts"; echo "#   $k1" ;; esac ;;
*) notok "deepseek-v3 stage contents"; echo "#   $k0"; echo "#   $k1" ;;
esac
check "check the deepseek-v3 grid" "$TPSHARD" check dsg -q
check "verify --layer all on the deepseek-v3 grid (MLA, experts)" "$TPSHARD" verify dsg --source "$ds" --layer all -q
check "verify --whole-model on the deepseek-v3 grid" "$TPSHARD" verify dsg --source "$ds" --whole-model -q
check "merge the deepseek-v3 grid" "$TPSHARD" merge dsg -o dsg.safetensors -q
check "merge of the deepseek-v3 grid is bit-exact" same_tensors dsg.safetensors "$ds/model.safetensors"
check "reshard deepseek-v3 tp 2 x pp 2 -> tp 4" "$TPSHARD" reshard dsg --tp 4 --pp 1 -o dst4 -q
check "reshard it back to tp 2 x pp 2" "$TPSHARD" reshard dst4 --tp 2 --pp 2 -o dsback -q
check "... the split's files byte for byte" diff -r dsg dsback
check "deepseek-v3 with its MTP layer --pp 2 (the MTP layer skipped)" \
    "$TPSHARD" split "$M/tiny-deepseek-v3-mtp" --tp 1 --pp 2 --target vllm -o dsmtp -q
case "$(stage_keys dsmtp model-pp-1-tp-0-part-0.safetensors)" in
*model.layers.2.*) notok "the MTP layer is in no stage" ;;
*) ok "the MTP layer is in no stage" ;;
esac
expect_exit 3 "preset:phi3 is not a family whose vLLM pipeline stages tpshard writes yet" \
    "--pp on a family not read against vLLM's pipeline (phi3): exit 3" \
    "$TPSHARD" split "$M/tiny-phi3" --tp 1 --pp 2 --target vllm -o ph

# refusals
expect_exit 2 "a pipeline of 1 to 2 stages" "--pp above the layers: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp 3 --target vllm -o r1
expect_exit 2 "adds up to 3 layers, the model has 2" "--pp-layers not adding up: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp-layers 1,2 --target vllm -o r2
expect_exit 2 "positive layer counts" "--pp-layers with a 0: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp 2 --pp-layers 0,2 --target vllm -o r2
expect_exit 2 "go with --target megatron or vllm" "--pp without --target: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp 2 -o r3
expect_exit 2 "go with --target megatron or vllm" "--pp --target sglang: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp 2 --target sglang -o r3
expect_exit 2 "not for tpshard's own sets" "reshard --pp to tpshard's names: exit 2" \
    "$TPSHARD" reshard g22 --tp 2 --pp 2 --target tpshard -o r3
expect_exit 2 "lacks {pp}" "a name template without {pp}: exit 2" \
    "$TPSHARD" split "$src" --tp 2 --pp 2 --target vllm --name-template 'r{rank}-{part}.safetensors' -o r4
expect_exit 3 "is tied to 'lm_head.weight'" "tied embeddings under --pp: exit 3, named" \
    "$TPSHARD" split "$M/tiny-qwen2" --tp 2 --pp 2 --target vllm -o r5
[ ! -e r1 ] && [ ! -e r2 ] && [ ! -e r3 ] && [ ! -e r4 ] && [ ! -e r5 ] && ok "the refusals write nothing" ||
    notok "the refusals write nothing"

# A tensor moved into the other stage's file, the manifest's file sizes and CRCs made to match:
# every byte check passes, the stage check must not.
cp -r g22 moved
$PY - moved <<'PY'
import json, struct, sys, zlib, os
d = sys.argv[1]
def read(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
        meta = h.pop("__metadata__", None)
        return meta, {k: (v["dtype"], v["shape"], (f.seek(base + v["data_offsets"][0]), f.read(v["data_offsets"][1] - v["data_offsets"][0]))[1]) for k, v in h.items()}
def write(p, meta, t):
    h, off, data = ({"__metadata__": meta} if meta else {}), 0, b""
    for k in sorted(t):
        dt, sh, b = t[k]; h[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}; off += len(b); data += b
    hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
a, b = d + "/model-pp-0-tp-0-part-0.safetensors", d + "/model-pp-1-tp-0-part-0.safetensors"
ma, ta = read(a); mb, tb = read(b)
tb["model.norm.weight"] = None
ta["model.norm.weight"] = read(b)[1]["model.norm.weight"]; del tb["model.norm.weight"]
write(a, ma, ta); write(b, mb, tb)
m = json.load(open(d + "/tpshard.json"))
for f in m["files"]:
    raw = open(d + "/" + f["name"], "rb").read()
    f["bytes"], f["crc32"] = len(raw), "%08x" % (zlib.crc32(raw) & 0xffffffff)
json.dump(m, open(d + "/tpshard.json", "w"), indent=2)
PY
expect_exit 1 "holds 'model.norm.weight' of pipeline stage 1, but the file is stage 0's" \
    "check: a tensor in the wrong stage's file, every checksum made to match: exit 1, named" "$TPSHARD" check moved

cp -r g22 nostage
rm nostage/model-pp-1-tp-1-part-0.safetensors
expect_exit 1 "model-pp-1-tp-1-part-0.safetensors" "check: a stage's file missing: exit 1, named" "$TPSHARD" check nostage

cp -r g22 edited
$PY -c "import json; p='edited/tpshard.json'; m=json.load(open(p)); [t.update(pp_stage=0) for t in m['tensors'] if t['name']=='model.norm.weight']; json.dump(m, open(p,'w'), indent=2)"
# check reports an unreadable manifest as a finding (exit 1); the other verbs refuse it (exit 3)
expect_exit 1 "is on stage 0 but pp_layers put it on stage 1" "check: a manifest whose stage disagrees with pp_layers: exit 1" \
    "$TPSHARD" check edited
expect_exit 3 "is on stage 0 but pp_layers put it on stage 1" "merge: a manifest whose stage disagrees with pp_layers: exit 3" \
    "$TPSHARD" merge edited -o edited.safetensors

cp -r g22 dropped
$PY -c "import json; p='dropped/tpshard.json'; m=json.load(open(p)); m['files']=[f for f in m['files'] if not (f['rank']==1 and f['pp_rank']==1)]; json.dump(m, open(p,'w'), indent=2)"
expect_exit 1 "rank 1 has no file for stage 1" "check: a manifest without a stage's files for a rank: exit 1" \
    "$TPSHARD" check dropped
expect_exit 3 "rank 1 has no file for stage 1" "reshard: a manifest without a stage's files for a rank: exit 3" \
    "$TPSHARD" reshard dropped --tp 1 -o dropped-1

"$TPSHARD" inspect g22 >"$T/.out" 2>&1
grep -q "pipeline: 2 stages of 1,1 layers (tp 2 x pp 2)" "$T/.out" && grep -q "model-pp-1-tp-1-part-0.safetensors .* stage 1" "$T/.out" &&
    ok "inspect shows the grid and each file's stage" || { notok "inspect shows the grid and each file's stage"; sed 's/^/#   /' "$T/.out" | head -8; }
