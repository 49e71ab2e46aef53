"""Real Megatron-Core (megatron-core 0.16.1, build/venv-megatron) against the test tier's own
Megatron writer/reader (megatron_fixture.py), before tpshard comes in: the two truths the
Megatron tests rest on must agree with the real library.

  * keys: for GQA Llama-style models (RMSNorm, SwiGLU, RoPE; tied and untied; tp 1, 2, 4 with
    4 > query groups, pp 1 and 2) and a GPT-2-style one (LayerNorm, biases, GeLU, learned
    positions, MHA), every rank file megatron_fixture.py writes has exactly the keys and
    shapes of the real GPTModel.state_dict_for_save_checkpoint() of that rank (the local
    layer spec, _extra_state entries included, the tied last stage's output_layer copy);
  * load and forward: those files load with torch.load(weights_only=True, Megatron's
    safe_globals) and load_state_dict(strict=True) into the real model of each rank, and the
    real TP x PP forward gives the logits of the tp 1 / pp 1 checkpoint of the same full
    tensors (max abs diff <= 1e-4, float32);
  * Hugging Face: a random transformers Llama converted by the fixture's
    hf_llama_to_megatron_full (Megatron's loader_llama_mistral rules) and written at TP2/PP2
    gives transformers' logits through real Megatron;
  * real Megatron's own state dicts (GPTModel ranks at TP2/PP2, saved as save_checkpoint lays
    them out), read back by the fixture's reader and rewritten at tp 1, give the same logits;
  * the test can fail: fc1 cut as a plain row chunk instead of [gate_r; up_r], and a TP2
    checkpoint with its two rank directories swapped, load strict but change the logits.
"""
import os
import shutil
import sys
import tempfile


import megatron_real as mr
from tap import report, status

TOKENS = [3, 17, 99, 42, 0, 64, 5, 77]


def fixture():
    import megatron_fixture as mf
    return mf


def gpt2(mf):
    return mf.megatron_args(num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                            num_query_groups=4, group_query_attention=False, kv_channels=8,
                            vocab_size=100, make_vocab_size_divisible_by=4,
                            normalization="LayerNorm", add_bias_linear=True, swiglu=False,
                            position_embedding_type="learned_absolute")


def file_keys(state):
    return [(k, None if v is None else tuple(v.shape)) for k, v in state["model"].items()]


def check_keys(mf, tmp, name, args, tp, pp):
    """Exactly the real key set: Megatron's Column/RowParallelLinear load pre-hook would default
    a missing "<prefix>_extra_state" to None, so a strict load alone does not catch a missing
    one (real Megatron saves it, and tpshard's writer is checked against this fixture)."""
    d = os.path.join(tmp, "keys-%s-tp%d-pp%d" % (name, tp, pp))
    mf.write_checkpoint(d, mr.scaled_full(mf, args, 0), args, tp, pp)
    states = mr.load_state(d)
    real = mr.state_dict_keys(states[(0, 0)]["args"], tp, pp)
    bad = []
    for rank, keys in sorted(real.items()):
        got = file_keys(states[rank])
        missing = sorted(set(keys) - set(got), key=str)
        extra = sorted(set(got) - set(keys), key=str)
        if missing or extra:
            bad.append("rank %s: real has, fixture lacks %s; fixture has, real lacks %s"
                       % (rank, missing[:6], extra[:6]))
    report(not bad, "megatron real keys: %s tp%d pp%d: each rank file's keys and shapes equal "
           "real GPTModel.state_dict_for_save_checkpoint() (_extra_state included)"
           % (name, tp, pp), "\n".join(bad))
    return d


def forward_cases(mf, tmp):
    args = mr.fixture_llama_args(mf)
    full = mr.scaled_full(mf, args, 1)
    ref_dir = os.path.join(tmp, "fw-tp1")
    mf.write_checkpoint(ref_dir, full, args, 1, 1)
    ref = mr.load_and_forward(ref_dir, TOKENS)
    report(ref.shape == (len(TOKENS), 100), "megatron real: tp1 checkpoint loads strict and gives "
           "[tokens, vocab] logits", str(ref.shape))
    for tp, pp, extra in [(2, 1, "none"), (4, 1, "bytesio"), (2, 2, "none"), (1, 2, "empty")]:
        d = os.path.join(tmp, "fw-tp%d-pp%d" % (tp, pp))
        mf.write_checkpoint(d, full, args, tp, pp, extra_state=extra)
        mr.close(mr.load_and_forward(d, TOKENS), ref,
              "megatron real: fixture tp%d pp%d (_extra_state %s%s) loads strict and equals tp1"
              % (tp, pp, extra, ", tp > query groups" if tp > 2 else ""))
    # tied embeddings: the last stage's output_layer copy
    targs = mr.fixture_llama_args(mf, untie_embeddings_and_output_weights=False)
    tfull = mr.scaled_full(mf, targs, 2)
    t1 = os.path.join(tmp, "tied-tp1")
    mf.write_checkpoint(t1, tfull, targs, 1, 1)
    t22 = os.path.join(tmp, "tied-tp2-pp2")
    mf.write_checkpoint(t22, tfull, targs, 2, 2)
    mr.close(mr.load_and_forward(t22, TOKENS), mr.load_and_forward(t1, TOKENS),
          "megatron real: tied embeddings tp2 pp2 (output_layer copy on the last stage) equals tp1")
    # GPT-2 style
    gargs = gpt2(mf)
    gfull = mr.scaled_full(mf, gargs, 3)
    g1 = os.path.join(tmp, "gpt2-tp1")
    mf.write_checkpoint(g1, gfull, gargs, 1, 1)
    g2 = os.path.join(tmp, "gpt2-tp2-pp2")
    mf.write_checkpoint(g2, gfull, gargs, 2, 2)
    mr.close(mr.load_and_forward(g2, TOKENS), mr.load_and_forward(g1, TOKENS),
          "megatron real: LayerNorm/bias/GeLU/learned-position model tp2 pp2 equals tp1")

    # wrong cuts must show
    wrong = os.path.join(tmp, "wrong-fc1")
    mf.write_checkpoint(wrong, full, args, 2, 1)
    states = mr.load_state(wrong)
    for (t, p), st in states.items():
        for k in list(st["model"]):
            if k.endswith("linear_fc1.weight"):  # pp 1: local names are global
                st["model"][k] = full[k].chunk(2)[t].clone()
        rd = "mp_rank_%02d" % t
        mf.torch_save(st, os.path.join(wrong, "iter_0000001", rd, "model_optim_rng.pt"))
    diff = float((mr.load_and_forward(wrong, TOKENS) - ref).abs().max())
    report(diff > 1e-2, "megatron real: fc1 cut as a plain row chunk (not [gate_r; up_r]) changes "
           "the logits (max abs diff %.2g)" % diff)
    swapped = os.path.join(tmp, "swapped")
    shutil.copytree(os.path.join(tmp, "fw-tp2-pp1"), swapped)
    it = os.path.join(swapped, "iter_0000001")
    os.rename(os.path.join(it, "mp_rank_00"), os.path.join(it, "x"))
    os.rename(os.path.join(it, "mp_rank_01"), os.path.join(it, "mp_rank_00"))
    os.rename(os.path.join(it, "x"), os.path.join(it, "mp_rank_01"))
    diff = float((mr.load_and_forward(swapped, TOKENS) - ref).abs().max())
    report(diff > 1e-2, "megatron real: tp2 rank directories swapped change the logits "
           "(max abs diff %.2g)" % diff)


def hf_case(mf, tmp):
    from safetensors.torch import load_file
    import json
    hf = mr.random_llama(os.path.join(tmp, "hf"), vocab=100, hidden=32, layers=4, heads=4,
                         kv_heads=2, inter=64)
    cfg = json.load(open(os.path.join(hf, "config.json")))
    full = mf.hf_llama_to_megatron_full(load_file(os.path.join(hf, "model.safetensors")), cfg)
    args = mf.megatron_args_from_hf(cfg, make_vocab_size_divisible_by=4)
    d = os.path.join(tmp, "hf-tp2-pp2")
    mf.write_checkpoint(d, full, args, 2, 2)
    mr.close(mr.load_and_forward(d, TOKENS), mr.hf_logits(hf, TOKENS),
          "megatron real: HF Llama through the fixture's hf_llama_to_megatron_full at tp2 pp2 "
          "equals transformers' logits")
    # the harness's own converter, used by the tpshard tests' references
    d2 = os.path.join(tmp, "hf-harness-tp2-pp2")
    mr.hf_llama_to_megatron(hf, 2, 2, d2, make_vocab_size_divisible_by=4)
    mr.close(mr.load_and_forward(d2, TOKENS), mr.hf_logits(hf, TOKENS),
          "megatron real: HF Llama through megatron_real.hf_llama_to_megatron at tp2 pp2 equals "
          "transformers' logits")


def real_save_case(mf, tmp):
    args = mr.llama_args(100, 32, 4, 4, 2, 64, max_pos=64, make_vocab_size_divisible_by=4)
    d = os.path.join(tmp, "real-tp2-pp2")
    mr.save_checkpoint(args, 2, 2, d)
    states = mr.load_state(d)
    real = mr.state_dict_keys(states[(0, 0)]["args"], 2, 2)
    report(all(sorted(file_keys(states[r]), key=str) == sorted(real[r], key=str) for r in real),
           "megatron real: real GPTModel tp2 pp2 saved per the spec keeps its own key set")
    rargs, full = mf.read_checkpoint(d, trim_vocab=True)
    one = os.path.join(tmp, "real-as-tp1")
    mf.write_checkpoint(one, full, rargs, 1, 1)
    mr.close(mr.load_and_forward(one, TOKENS), mr.load_and_forward(d, TOKENS),
          "megatron real: real Megatron's tp2 pp2 state dicts, read by the fixture's reader and "
          "written at tp1, give the same logits")


def main():
    mf = fixture()
    with tempfile.TemporaryDirectory(prefix="mgreal-fixture") as tmp:
        for name, args, grid in [
            ("llama-untied", mr.fixture_llama_args(mf), [(1, 1), (2, 1), (4, 1), (2, 2)]),
            ("llama-tied", mr.fixture_llama_args(mf, untie_embeddings_and_output_weights=False), [(1, 1), (1, 2), (2, 2)]),
            ("gpt2-style", gpt2(mf), [(2, 2)]),
        ]:
            for tp, pp in grid:
                check_keys(mf, tmp, name, args, tp, pp)
        forward_cases(mf, tmp)
        hf_case(mf, tmp)
        real_save_case(mf, tmp)
    return status()


if __name__ == "__main__":
    # line by line: a library that forks would otherwise flush a second copy of the buffer
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
