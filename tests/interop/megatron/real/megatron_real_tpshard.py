"""Real Megatron-Core (megatron-core 0.16.1, build/venv-megatron) loads what tpshard writes
for Megatron-LM (issue #18) and computes the same model.

Every checkpoint tpshard writes here is read the way Megatron reads it (torch.load with
weights_only=True and Megatron's safe_globals registered), loaded with
load_state_dict(strict=True) into the real GPTModel of each rank (local layer spec, built from
the file's args, tp and pp from the rank directories), and run through the pipeline stages
with the vocab-parallel logits gathered.  The logits must equal those of the source within
1e-4 (float32):

  * reshard of Megatron checkpoints written by megatron_fixture.py (GQA Llama-style, 8 heads,
    2 query groups): TP2 -> TP1, TP2 -> TP4 and TP2 -> TP8 (more ranks than query groups:
    each rank a plain row chunk of a group's block), TP2/PP2 -> TP4/PP1, tied embeddings
    TP1 -> TP2/PP2 (the last stage's output_layer copy) and back TP2/PP2 -> TP1; every
    output rank file has exactly the keys and shapes of the real GPTModel's rank (a tied
    one-stage model keeps output_layer._extra_state without output_layer.weight);
  * reshard of real Megatron's own checkpoint (GPTModel ranks at TP2 saved per the spec):
    TP2 -> TP4/PP2, whose files must also have exactly the real key set of each rank;
  * split --target megatron of a random transformers Llama (untied TP2/PP2, tied TP4):
    real Megatron's logits equal transformers', and every rank file has exactly the keys and
    shapes of real GPTModel.state_dict_for_save_checkpoint() (_extra_state included);
  * merge --target hf of a Megatron checkpoint: transformers' logits of the merged model
    equal real Megatron's of the checkpoint.

A step whose tpshard part has not landed yet (its command's --help does not name --pp,
--target megatron or --target) is skipped, saying so; once the part is there its failure is
a failure.
"""
import json
import os
import sys
import tempfile

import torch

import megatron_real as mr
from tap import TPSHARD, report, status, tpshard

TOKENS = [3, 17, 99, 42, 0, 64, 5, 77, 31]


def cli_has(cmd, word):
    """Whether `tpshard CMD --help -v` names word: the #18 parts land one by one."""
    r = tpshard(cmd, "--help", "-v")
    return word in (r.stdout + r.stderr)


# (the command, a word its help must name, what the step needs)
RESHARD = ("reshard", "--pp", "reshard reading and writing Megatron checkpoints (--pp)")
SPLIT = ("split", "megatron", "split --target megatron")
MERGE = ("merge", "--target", "merge --target hf")


def have(feature):
    return cli_has(feature[0], feature[1])


def skip(what, feature):
    print("skip - megatron real tpshard: %s: tpshard has no %s yet (its issue #18 part is not "
          "merged)" % (what, feature[2]))


def run_ok(what, *args):
    r = tpshard(*args)
    return report(r.returncode == 0, "megatron real tpshard: %s: tpshard %s exits 0"
                  % (what, " ".join(str(a) for a in args[:1])),
                  "exit %d\n%s" % (r.returncode, (r.stderr or r.stdout)[-3000:]))


def keys_equal_real(ckpt, what):
    """Every rank file's keys and shapes equal real GPTModel's for the file's args."""
    states = mr.load_state(ckpt)
    _, tp, pp = mr.checkpoint_grid(ckpt)
    real = mr.state_dict_keys(states[(0, 0)]["args"], tp, pp)
    bad = []
    for rank, keys in sorted(real.items()):
        got = [(k, None if v is None else tuple(v.shape)) for k, v in states[rank]["model"].items()]
        if sorted(got, key=str) != sorted(keys, key=str):
            bad.append("rank %s: real has, file lacks %s; file has, real lacks %s" % (
                rank, sorted(set(keys) - set(got), key=str)[:6],
                sorted(set(got) - set(keys), key=str)[:6]))
    return report(not bad, "megatron real tpshard: %s: each rank file has exactly the real "
                  "GPTModel key set and shapes (_extra_state included)" % what, "\n".join(bad))


# The reshard cases' model: 8 heads in 2 query groups, so tp 8 is above the groups.
WIDE = dict(hidden_size=64, ffn_hidden_size=128, num_attention_heads=8)


def reshard_cases(mf, tmp):
    what = "reshard of fixture checkpoints"
    if not have(RESHARD):
        skip(what, RESHARD)
        return
    args = mr.fixture_llama_args(mf, **WIDE)
    full = mr.scaled_full(mf, args, 7, 0.15)
    src2 = os.path.join(tmp, "fx-tp2")
    mf.write_checkpoint(src2, full, args, 2, 1)
    ref = mr.load_and_forward(src2, TOKENS)
    for tp, pp in [(1, 1), (4, 1), (8, 1)]:
        out = os.path.join(tmp, "fx-tp2-to-tp%d" % tp)
        if run_ok("reshard tp2 -> tp%d" % tp, "reshard", src2, "--tp", tp, "-o", out):
            keys_equal_real(out, "reshard tp2 -> tp%d" % tp)
            mr.close(mr.load_and_forward(out, TOKENS), ref,
                  "megatron real tpshard: reshard tp2 -> tp%d%s loads strict into real "
                  "GPTModel and equals the source" % (tp, " (tp > query groups)" if tp > 2 else ""))
    src22 = os.path.join(tmp, "fx-tp2-pp2")
    mf.write_checkpoint(src22, full, args, 2, 2)
    out = os.path.join(tmp, "fx-tp2pp2-to-tp4pp1")
    if run_ok("reshard tp2/pp2 -> tp4/pp1", "reshard", src22, "--tp", 4, "--pp", 1, "-o", out):
        keys_equal_real(out, "reshard tp2/pp2 -> tp4/pp1")
        mr.close(mr.load_and_forward(out, TOKENS), ref,
              "megatron real tpshard: reshard tp2/pp2 -> tp4/pp1 equals the source")
    targs = mr.fixture_llama_args(mf, untie_embeddings_and_output_weights=False, **WIDE)
    tfull = mr.scaled_full(mf, targs, 8, 0.15)
    tsrc = os.path.join(tmp, "fx-tied-tp1")
    mf.write_checkpoint(tsrc, tfull, targs, 1, 1)
    out = os.path.join(tmp, "fx-tied-to-tp2pp2")
    tref = mr.load_and_forward(tsrc, TOKENS)
    if run_ok("reshard tied tp1 -> tp2/pp2", "reshard", tsrc, "--tp", 2, "--pp", 2, "-o", out):
        keys_equal_real(out, "reshard tied tp1 -> tp2/pp2")
        mr.close(mr.load_and_forward(out, TOKENS), tref,
              "megatron real tpshard: reshard tied tp1 -> tp2/pp2 (output_layer copy on the "
              "last stage) equals the source")
    # back to one stage: the copy goes, its _extra_state stays (real Megatron's tied pp1 model
    # has output_layer._extra_state without output_layer.weight)
    tsrc22 = os.path.join(tmp, "fx-tied-tp2pp2")
    mf.write_checkpoint(tsrc22, tfull, targs, 2, 2)
    out = os.path.join(tmp, "fx-tied-tp2pp2-to-tp1")
    if run_ok("reshard tied tp2/pp2 -> tp1", "reshard", tsrc22, "--tp", 1, "--pp", 1, "-o", out):
        keys_equal_real(out, "reshard tied tp2/pp2 -> tp1/pp1")
        mr.close(mr.load_and_forward(out, TOKENS), tref,
              "megatron real tpshard: reshard tied tp2/pp2 -> tp1/pp1 equals the source")


def real_source_case(tmp):
    what = "reshard of real Megatron's checkpoint"
    if not have(RESHARD):
        skip(what, RESHARD)
        return
    args = mr.llama_args(100, 64, 4, 8, 2, 128, max_pos=64, make_vocab_size_divisible_by=4)
    args.init_method_std = 0.2  # O(1) logits
    src = os.path.join(tmp, "real-tp2")
    mr.save_checkpoint(args, 2, 1, src)
    ref = mr.load_and_forward(src, TOKENS)
    out = os.path.join(tmp, "real-tp2-to-tp4pp2")
    if run_ok("reshard real tp2 -> tp4/pp2", "reshard", src, "--tp", 4, "--pp", 2, "-o", out):
        keys_equal_real(out, "reshard of real Megatron's tp2 -> tp4/pp2")
        mr.close(mr.load_and_forward(out, TOKENS), ref,
              "megatron real tpshard: real Megatron's own tp2 checkpoint resharded to tp4/pp2 "
              "equals the source")


def split_cases(tmp):
    if not have(SPLIT):
        skip("split --target megatron, merge --target hf", SPLIT)
        return
    merge = have(MERGE)
    if not merge:
        skip("merge --target hf", MERGE)
    for name, tie, tp, pp in [("untied", False, 2, 2), ("tied", True, 4, 1)]:
        hf = mr.random_llama(os.path.join(tmp, "hf-" + name), vocab=100, hidden=64, layers=4,
                             heads=8, kv_heads=2, inter=128, tie=tie, seed=3)
        want = mr.hf_logits(hf, TOKENS)
        ck = os.path.join(tmp, "split-%s-tp%d-pp%d" % (name, tp, pp))
        if not run_ok("split %s --target megatron --tp %d --pp %d" % (name, tp, pp), "split", hf,
                      "--target", "megatron", "--tp", tp, "--pp", pp, "-o", ck):
            continue
        keys_equal_real(ck, "split %s --target megatron tp%d pp%d" % (name, tp, pp))
        mr.close(mr.load_and_forward(ck, TOKENS), want,
              "megatron real tpshard: split --target megatron (%s, tp%d pp%d) of a HF Llama: "
              "real Megatron's logits equal transformers'" % (name, tp, pp))
        back = os.path.join(tmp, "merged-" + name)
        if merge and run_ok("merge --target hf", "merge", ck, "--target", "hf", "-o", back + "/"):
            with open(os.path.join(back, "config.json")) as f:
                json.load(f)
            mr.close(mr.hf_logits(back, TOKENS), mr.load_and_forward(ck, TOKENS),
                  "megatron real tpshard: merge --target hf (%s): transformers' logits of the "
                  "merged model equal real Megatron's of the checkpoint" % name)


def main():
    if not os.access(TPSHARD, os.X_OK):
        print("not ok - tpshard binary missing at " + TPSHARD)
        return 1
    if not have(RESHARD) and not have(SPLIT):  # say so without importing Megatron
        skip("reshard, split --target megatron",
             ("", "", "Megatron reshard (--pp) nor split --target megatron"))
        return status()
    import megatron_fixture as mf
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="mgreal-tpshard") as tmp:
        reshard_cases(mf, tmp)
        real_source_case(tmp)
        split_cases(tmp)
    return status()


if __name__ == "__main__":
    # line by line: a library that forks would otherwise flush a second copy of the buffer
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
