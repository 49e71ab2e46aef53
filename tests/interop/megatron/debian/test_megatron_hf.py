"""Truth from outside for Hugging Face <-> Megatron-LM: `split --target megatron` and
`merge --target hf`, against transformers and megatron_fixture.py (an implementation of
Megatron's own conversion and cutting rules in torch, written from the specification, not
from tpshard).

Each case builds a tiny model with transformers' classes (random weights under a seed, norms
and biases included; nothing downloaded), saves it with save_pretrained, then at several tp
and pp (tp 1, 2, 4, and a tp above the query groups, where a rank holds a plain row chunk of
its group's [q; k; v] block; pp 1 and 2):

  * splits it with `tpshard split --target megatron` and torch.load-s every rank file: the
    key set (the _extra_state keys as None included), each tensor bit-equal, and the args
    fields a loader reads, against megatron_fixture.write_checkpoint of
    megatron_fixture.hf_llama_to_megatron_full (the loader_llama_mistral.py grouping) at
    that tp and pp; the tracker says 1, iteration 1, checkpoint_version 3.0;
  * runs the model the tensor-parallel way in torch from the Megatron rank files alone
    (linear_qkv's output viewed per local query group and split [q; k; v] as Megatron-Core's
    SelfAttention.get_query_key_value_tensors does, and above the query groups all-gathered
    over the ranks sharing a group, which then pick their q heads; linear_fc1 chunked into
    [gate_r; up_r]; row-parallel partial sums added; the vocabulary-parallel head gathered
    and its zero padding dropped) and compares the logits with transformers' (<= 1e-4);
  * runs `tpshard check` and `tpshard verify` (every layer, and the whole model) on it;
  * merges it back with `tpshard merge --target hf` (into a directory, and as DIR/model.safetensors):
    every tensor bit-equal to the original save, and transformers loading the merged
    directory's config.json and weights gives the original's logits.
A checkpoint written by megatron_fixture alone (not by tpshard), with the local layer spec's
names and with TransformerEngine's (norms inside the fused linears, TEGroupedMLP experts),
also merges into the original tensors.  Refusals: a family with no Megatron mapping (exit 3, naming the presets that have
one), and a tp Megatron cannot cut the query groups by (exit 3, naming the tp values that fit).

Cases: Llama (GQA), Mistral, Qwen2 (q/k/v biases, tied embeddings), Mixtral (SequentialMLP
experts).  Skips loudly when transformers cannot be imported (tests/interop/setup.sh).
"""
import json
import os
import re
import shutil
import sys
import tempfile

import torch

import hf_tier as hf
import megatron_fixture as mf
import tap
from hf_tier import causal_mask, rms, rotate_half

BASE = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)

# args fields a loader reads, compared with the fixture's (megatron_args_from_hf)
ARGS = ["num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
        "group_query_attention", "kv_channels", "max_position_embeddings", "seq_length", "rotary_base",
        "norm_epsilon", "vocab_size", "padded_vocab_size", "make_vocab_size_divisible_by",
        "tensor_model_parallel_size", "pipeline_model_parallel_size", "untie_embeddings_and_output_weights",
        "add_qkv_bias", "add_bias_linear", "swiglu", "normalization", "position_embedding_type", "params_dtype",
        "rotary_interleaved", "tokenizer_type", "ckpt_format", "fp16", "bf16"]


def cases():
    from transformers import LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config
    return [
        # 2 query groups: tp 4 and 8 put 2 and 4 ranks on one group's block
        ("llama-gqa", LlamaConfig(**BASE), [(1, 1), (2, 1), (4, 1), (8, 1), (2, 2)]),
        ("mistral", MistralConfig(**BASE), [(2, 1), (1, 2)]),
        ("qwen2-tied", Qwen2Config(**dict(BASE, tie_word_embeddings=True)), [(1, 1), (2, 2), (4, 1)]),
        ("mixtral", MixtralConfig(**dict(BASE, num_local_experts=4, num_experts_per_tok=2)), [(2, 1), (4, 2)]),
    ]


def load_files(ckpt):
    """{(tp rank, pp rank): torch.load of that rank file}, and the tracker's text."""
    _, it = mf.find_iter_dir(ckpt)
    out = {}
    for d in sorted(os.listdir(it)):
        parts = d.split("_")  # mp_rank_XX[_YYY]
        r, p = int(parts[2]), int(parts[3]) if len(parts) > 3 else 0
        out[(r, p)] = torch.load(os.path.join(it, d, "model_optim_rng.pt"), map_location="cpu")
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
        return out, f.read(), os.path.basename(it)


def compare_files(got, want, what):
    """Key by key: each rank file's model dict (tensors bit-equal, None entries as None) and args."""
    problems = []
    if sorted(got) != sorted(want):
        return ["rank files %s, expected %s" % (sorted(got), sorted(want))]
    for rp in sorted(want):
        g, w = got[rp], want[rp]
        gm, wm = g["model"], w["model"]
        if set(gm) != set(wm):
            problems.append("%s: keys differ: extra %s, missing %s" % (rp, sorted(set(gm) - set(wm)),
                                                                       sorted(set(wm) - set(gm))))
        for k in sorted(set(gm) & set(wm)):
            a, b = gm[k], wm[k]
            if (a is None) != (b is None) or (a is not None and (a.dtype != b.dtype or a.shape != b.shape
                                                                 or not torch.equal(a, b))):
                problems.append("%s: %s differs (%s vs %s)" % (rp, k, None if a is None else tuple(a.shape),
                                                                None if b is None else tuple(b.shape)))
        ga, wa = vars(g["args"]), vars(w["args"])
        for f in ARGS:
            if f not in ga or ga[f] != wa[f]:
                problems.append("%s: args.%s = %r, expected %r" % (rp, f, ga.get(f, "(absent)"), wa[f]))
        if g.get("iteration") != 1 or g.get("checkpoint_version") != 3.0:
            problems.append("%s: iteration %r, checkpoint_version %r" % (rp, g.get("iteration"),
                                                                          g.get("checkpoint_version")))
        for k in ("optimizer", "rng_state"):
            if k in g:
                problems.append("%s: has %s" % (rp, k))
    return problems


def stage_tensors(files, tp, pp, args):
    """Per TP rank, its tensors under GLOBAL names (the layers renumbered from each stage's)."""
    ranges = mf.stage_ranges(args.num_layers, pp)
    ranks = []
    for r in range(tp):
        R = {}
        for p in range(pp):
            first = ranges[p][0]
            for k, v in files[(r, p)]["model"].items():
                if v is None:
                    continue
                m = mf.LAYER_RE.match(k)
                name = "decoder.layers.%d.%s" % (int(m.group(1)) + first, m.group(2)) if m else k
                if name == "output_layer.weight" and p == pp - 1 and pp > 1 and \
                        not args.untie_embeddings_and_output_weights:
                    assert torch.equal(v, R["embedding.word_embeddings.weight"]), "tied copy differs"
                    continue
                R[name] = v
        ranks.append(R)
    return ranks


def megatron_forward(ranks, args, ids, cos, sin, cfg):
    """The model as Megatron-Core runs it on tp ranks, from their Megatron tensors alone."""
    T, n = len(ranks), ids.shape[0]
    H, nq, ng, hd = args.hidden_size, args.num_attention_heads, args.num_query_groups, args.kv_channels
    eps = args.norm_epsilon
    x = hf.vocab_embed(ranks, "embedding.word_embeddings.weight", ids, H)
    mask = causal_mask(n)
    per_group = nq // ng
    for li in range(args.num_layers):
        p = "decoder.layers.%d." % li
        xn = [rms(x, R[p + "input_layernorm.weight"], eps) for R in ranks]
        qkv = []
        for r, R in enumerate(ranks):
            y = xn[r] @ R[p + "self_attention.linear_qkv.weight"].T
            b = R.get(p + "self_attention.linear_qkv.bias")
            qkv.append(y if b is None else y + b)
        out = torch.zeros(n, H)
        for r, R in enumerate(ranks):
            if T <= ng:  # get_query_key_value_tensors: [n, ng_local, (nq/ng + 2) * hd]
                g = qkv[r].view(n, ng // T, per_group + 2, hd)
                q, k, v = g[:, :, :per_group], g[:, :, per_group], g[:, :, per_group + 1]
                q = q.reshape(n, -1, hd)
            else:  # T > ng: the s = T/ng ranks of a group all-gather its block, then pick q heads
                s = T // ng
                grp = r // s
                block = torch.cat([qkv[j] for j in range(grp * s, grp * s + s)], dim=1).view(n, per_group + 2, hd)
                mine = nq // T
                q = block[:, (r % s) * mine:(r % s + 1) * mine]
                k, v = block[:, per_group:per_group + 1], block[:, per_group + 1:per_group + 2]
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [heads, n, hd]
            ctx = hf.attend(q, k, v, cos, sin, mask)
            out += ctx @ R[p + "self_attention.linear_proj.weight"].T
        x = x + out
        xn = [rms(x, R[p + "pre_mlp_layernorm.weight"], eps) for R in ranks]
        mlp = torch.zeros(n, H)
        if p + "mlp.router.weight" in ranks[0]:
            logits = xn[0] @ ranks[0][p + "mlp.router.weight"].T
            w = torch.softmax(logits, dim=-1)
            top, idx = torch.topk(w, cfg.num_experts_per_tok, dim=-1)
            top = top / top.sum(-1, keepdim=True)
            for e in range(args.num_experts):
                gate_w = ((idx == e).float() * top).sum(-1, keepdim=True)
                ep = p + "mlp.experts.local_experts.%d." % e
                for r, R in enumerate(ranks):
                    gate, up = torch.chunk(R[ep + "linear_fc1.weight"], 2, dim=0)
                    h = torch.nn.functional.silu(xn[r] @ gate.T) * (xn[r] @ up.T)
                    mlp += gate_w * (h @ R[ep + "linear_fc2.weight"].T)
        else:
            for r, R in enumerate(ranks):
                gate, up = torch.chunk(R[p + "mlp.linear_fc1.weight"], 2, dim=0)
                h = torch.nn.functional.silu(xn[r] @ gate.T) * (xn[r] @ up.T)
                mlp += h @ R[p + "mlp.linear_fc2.weight"].T
        x = x + mlp
    x = rms(x, ranks[0]["decoder.final_layernorm.weight"], eps)
    head = "output_layer.weight" if "output_layer.weight" in ranks[0] else "embedding.word_embeddings.weight"
    return hf.gather_logits(ranks, x, head, args.vocab_size)


def check_merge(name, tmp, ckpt, src_sd, model, ids, want, into_file=False):
    out = os.path.join(tmp, ("merged-file-" if into_file else "merged-") + name)
    target = os.path.join(out, "model.safetensors") if into_file else out + "/"
    if into_file:
        os.makedirs(out, exist_ok=True)
    r = tap.tpshard("merge", ckpt, "-o", target, "--target", "hf")
    if not tap.report(r.returncode == 0, "%s: merge --target hf%s" % (name, " -o DIR/model.safetensors" if into_file
                                                                       else ""), r.stderr):
        return
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    got = {}
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(out, f)))
    bad = [k for k in src_sd if k not in got or got[k].dtype != src_sd[k].dtype or not torch.equal(got[k], src_sd[k])]
    extra = sorted(set(got) - set(src_sd))
    tap.report(not bad and not extra, "%s: merged tensors bit-equal to the original save" % name,
               "differ or missing: %s; extra: %s" % (bad[:5], extra[:5]))
    try:
        back = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").float().eval()
        d = (hf.logits(back, ids) - want).abs().max().item()
        tap.report(d <= 1e-6 and type(back).__name__ == type(model).__name__.replace("Mistral", "Llama"),
                   "%s: transformers loads the merged config.json and weights (%s, logits diff %.2e)"
                   % (name, type(back).__name__, d))
    except Exception as e:  # noqa: BLE001 - any failure to load is the finding
        tap.report(False, "%s: transformers loads the merged directory" % name, repr(e))


def run_case(tmp, name, cfg, grid):
    src = os.path.join(tmp, name)
    model = hf.build(cfg, 7, src)
    from safetensors.torch import load_file
    src_sd = load_file(os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        cfg_json = json.load(f)
    full = mf.hf_llama_to_megatron_full(src_sd, cfg_json)
    ids = torch.tensor([3, 17, 99, 0, 42, 64, 5])
    want = hf.logits(model, ids)
    cos, sin = hf.rope_tables(ids.shape[0], hf.head_dim(cfg), cfg.rope_theta)
    last = None
    for tp, pp in grid:
        what = "%s tp %d pp %d" % (name, tp, pp)
        out = os.path.join(tmp, "%s-tp%d-pp%d" % (name, tp, pp))
        r = tap.tpshard("split", src, "--tp", tp, "--pp", pp, "--target", "megatron", "-o", out, "-q")
        if not tap.report(r.returncode == 0, "%s: split --target megatron" % what, r.stderr):
            continue
        exp = os.path.join(tmp, "expected-%s-tp%d-pp%d" % (name, tp, pp))
        args = mf.megatron_args_from_hf(cfg_json, make_vocab_size_divisible_by=128)
        mf.write_checkpoint(exp, full, args, tp, pp)
        got, tracker, it = load_files(out)
        wanted, _, _ = load_files(exp)
        problems = compare_files(got, wanted, what)
        if tracker != "1" or it != "iter_0000001":
            problems.append("tracker %r, iteration directory %s" % (tracker, it))
        tap.report(not problems, "%s: every rank file equals megatron_fixture's, key by key (args too)" % what,
                   "\n".join(problems[:12]))
        a = got[(0, 0)]["args"]
        ranks = stage_tensors(got, tp, pp, a)
        try:
            d = (megatron_forward(ranks, a, ids, cos, sin, cfg) - want).abs().max().item()
            tap.report(d <= 1e-4, "%s: Megatron's tensor-parallel forward from the rank files equals "
                                  "transformers (max diff %.2e)" % (what, d))
        except Exception as e:  # noqa: BLE001 - a shape the forward cannot use is the finding
            tap.report(False, "%s: Megatron's tensor-parallel forward from the rank files" % what, repr(e))
        r = tap.tpshard("check", out)
        tap.report(r.returncode == 0, "%s: tpshard check proves the files' checksums" % what, r.stdout + r.stderr)
        if getattr(a, "num_experts", None):
            print("skip - %s: tpshard verify: the megatron_gpt preset's block is dense (no MoE block yet)" % what)
        elif tp <= a.num_query_groups:  # verify refuses tp above the groups by name
            for how in (("--layer", "all"), ("--whole-model",)):
                r = tap.tpshard("verify", out, *how)
                tap.report(r.returncode == 0, "%s: tpshard verify %s" % (what, " ".join(how)), r.stdout + r.stderr)
        if tp == 2 and pp == 1:  # the forward can fail: rank 0's and 1's query groups swapped
            bad = [dict(R) for R in ranks]
            k = "decoder.layers.0.self_attention.linear_qkv.weight"
            bad[0][k], bad[1][k] = ranks[1][k], ranks[0][k]
            d = (megatron_forward(bad, a, ids, cos, sin, cfg) - want).abs().max().item()
            tap.report(d > 1e-2, "%s: the forward catches linear_qkv's groups on the wrong ranks (diff %.2e)"
                       % (what, d))
        last = (out, tp, pp)
        if tp == 2:
            check_merge("%s-tp%d-pp%d" % (name, tp, pp), tmp, out, src_sd, model, ids, want)
    if last:
        check_merge("%s-tp%d-pp%d" % (name, last[1], last[2]), tmp, last[0], src_sd, model, ids, want, into_file=True)
    # A checkpoint tpshard did not write: megatron_fixture's own, merged into the original.
    fx = os.path.join(tmp, "fixture-" + name)
    mf.write_checkpoint(fx, full, mf.megatron_args_from_hf(cfg_json, make_vocab_size_divisible_by=128), 2, 2)
    check_merge("fixture-" + name, tmp, fx, src_sd, model, ids, want)
    # The same under TransformerEngine's names: the norms inside the fused linears, the experts
    # of a TEGroupedMLP as linear_fc1.weight{e}.
    fx = os.path.join(tmp, "fixture-te-" + name)
    mf.write_checkpoint(fx, te_names(full), mf.megatron_args_from_hf(cfg_json, make_vocab_size_divisible_by=128), 2, 1)
    check_merge("fixture-te-" + name, tmp, fx, src_sd, model, ids, want)


def te_names(full):
    out = type(full)()
    for k, v in full.items():
        m = re.match(r"(decoder\.layers\.\d+\.)(.*)$", k)
        if m:
            p, rest = m.groups()
            rest = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight"}.get(rest, rest)
            if p + "mlp.router.weight" not in full:  # a dense layer: the MLP norm inside linear_fc1
                rest = {"pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"}.get(rest, rest)
            e = re.match(r"mlp\.experts\.local_experts\.(\d+)\.(linear_fc[12])\.weight$", rest)
            if e:
                rest = "mlp.experts.%s.weight%s" % (e.group(2), e.group(1))
            k = p + rest
        out[k] = v
    return out


def refusals(tmp):
    from transformers import GPT2Config
    src = os.path.join(tmp, "gpt2")
    hf.build(GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=4, n_positions=32), 1, src)
    r = tap.tpshard("split", src, "--tp", 1, "--target", "megatron", "-o", os.path.join(tmp, "gpt2-mg"))
    tap.report(r.returncode == 3 and "llama" in r.stderr and "mixtral" in r.stderr,
               "a family without a Megatron mapping is refused (exit 3) naming those with one",
               "exit %d: %s" % (r.returncode, r.stderr))
    from transformers import LlamaConfig
    src = os.path.join(tmp, "llama-3")
    hf.build(LlamaConfig(**BASE), 1, src)
    r = tap.tpshard("split", src, "--tp", 3, "--target", "megatron", "-o", os.path.join(tmp, "llama-3-mg"))
    tap.report(r.returncode == 3 and "1, 2, 4, 8" in r.stderr and not os.path.exists(os.path.join(tmp, "llama-3-mg")),
               "tp 3 on 2 query groups is refused (exit 3) naming the tp values that fit, nothing written",
               "exit %d: %s" % (r.returncode, r.stderr))


def body():
    tmp = tempfile.mkdtemp(prefix="tps-megatron-hf-")
    try:
        for name, cfg, grid in cases():
            run_case(tmp, name, cfg, grid)
        refusals(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tap.status()


def main():
    skip = tap.transformers_tier("test_megatron_hf")
    if skip is not None:
        return skip
    return body()


if __name__ == "__main__":
    sys.exit(main())
