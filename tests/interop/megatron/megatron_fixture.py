"""Megatron-LM legacy (--ckpt-format torch) checkpoints for the tests, written and read with
torch alone, independently of tpshard, following the targets spec Part 2
and the interop spec B (the rules of Megatron's tools/checkpoint loaders and savers).

    write_checkpoint(out_dir, full, args, tp, pp, ...)   full mcore tensors -> a checkpoint
    read_checkpoint(ckpt_dir)      -> (args Namespace, {mcore global name: full tensor})
    hf_llama_to_megatron_full(hf_sd, config) -> full mcore tensors of a HF Llama-family model
    megatron_args(**fields)        -> the args dict of a GPT model (defaults filled)

`full` holds the FULL tensors under Megatron-Core GLOBAL names: linear_qkv already grouped
per query group ([q_g; k_g; v_g] one group after another), linear_fc1 as [gate_all; up_all]
with swiglu, the word embeddings / output_layer at the TRUE vocabulary (the writer pads them
with zero rows to make_vocab_size_divisible_by * tp).

Works with Debian's torch 1.13 and with the torch-2 venv.  Megatron's enums are pickled as
GLOBAL module.Class + (value,) + REDUCE from the stub package megatron_stub/ (put on sys.path
only when a real megatron is not importable).
"""
import argparse
import collections
import enum
import io
import math
import os
import pathlib
import pickle
import random
import re
import signal
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STUB = os.path.join(HERE, "megatron_stub")
try:
    from megatron.core.enums import ModelType  # a real Megatron-Core when installed
except ImportError:
    sys.path.insert(0, STUB)
    from megatron.core.enums import ModelType
from megatron.core.rerun_state_machine import RerunMode, RerunState  # noqa: E402
from megatron.core.transformer.enums import AttnBackend  # noqa: E402



class _Pickler(pickle.Pickler):
    """Python >= 3.11 pickles an Enum member as getattr(Class, name), which torch's
    weights_only loader refuses; Megatron's allow-list wants Class(value): GLOBAL + REDUCE."""

    def reducer_override(self, obj):
        if isinstance(obj, enum.Enum):
            return type(obj), (obj.value,)
        return NotImplemented


class _PickleModule:
    Pickler = _Pickler
    Unpickler = pickle.Unpickler
    __name__ = "pickle"


def torch_save(obj, path):
    torch.save(obj, path, pickle_module=_PickleModule, pickle_protocol=2)


LAYER_RE = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
# (mcore suffix inside a layer, legacy suffix inside encoder 'layers.N.')
LEGACY_LAYER = [
    ("input_layernorm.", "input_norm."),
    ("self_attention.linear_qkv.", "self_attention.query_key_value."),
    ("self_attention.linear_proj.", "self_attention.dense."),
    ("pre_mlp_layernorm.", "post_attention_norm."),
    ("mlp.linear_fc1.", "mlp.dense_h_to_4h."),
    ("mlp.linear_fc2.", "mlp.dense_4h_to_h."),
]
EXTRA_KINDS = ("none", "bytesio", "uint8", "empty", "absent")


def padded_vocab(v, divisible_by, tp):
    m = divisible_by * tp
    return int(math.ceil(v / m) * m)


def megatron_args(**fields):
    """The args of a Megatron GPT model as a dict: the fields Megatron's loaders need
    (the interop spec C.2 item 3) with Llama-like defaults; `fields` override them."""
    a = collections.OrderedDict(
        num_layers=2, hidden_size=16, ffn_hidden_size=32, num_attention_heads=4,
        num_query_groups=2, group_query_attention=True, kv_channels=4, seq_length=64,
        max_position_embeddings=64, position_embedding_type="rope", add_position_embedding=True,
        use_rotary_position_embeddings=True, rotary_base=10000, rotary_percent=1.0,
        rotary_interleaved=False, add_bias_linear=False, add_qkv_bias=False, swiglu=True,
        squared_relu=False, untie_embeddings_and_output_weights=True, apply_layernorm_1p=False,
        normalization="RMSNorm", norm_epsilon=1e-5, apply_query_key_layer_scaling=False,
        attention_dropout=0.0, hidden_dropout=0.0, tokenizer_type="HuggingFaceTokenizer",
        tokenizer_model=None, vocab_size=100, make_vocab_size_divisible_by=4,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None, num_layers_per_virtual_pipeline_stage=None,
        expert_model_parallel_size=1, num_experts=None, sequence_parallel=False, fp16=False,
        bf16=False, params_dtype=torch.float32, ckpt_format="torch", consumed_train_samples=0,
        consumed_valid_samples=0, skipped_train_samples=0, iteration=1,
        model_type=ModelType.encoder_or_decoder, attention_backend=AttnBackend.auto,
        exit_signal=signal.Signals.SIGTERM, data_cache_path=pathlib.PosixPath("/tmp/cache"),
        lr=3.0e-4, clip_grad=1.0, world_size=1, rank=0, seed=1234, data_path=["a", "b"],
        eval_iters_tuple=(1, 2), loss_scale=None, recompute_granularity=None,
    )
    a.update(fields)
    return a


def _ns(args):
    return args if isinstance(args, argparse.Namespace) else argparse.Namespace(**dict(args))


def stage_ranges(num_layers, pp, pp_layers=None):
    """[(first global layer, count)] per stage: Megatron's uniform rule, or an explicit split."""
    if pp_layers is None:
        if num_layers % pp:
            raise ValueError("pp %d does not divide num_layers %d" % (pp, num_layers))
        pp_layers = [num_layers // pp] * pp
    if len(pp_layers) != pp or sum(pp_layers) != num_layers:
        raise ValueError("pp_layers %r do not split %d layers in %d stages" % (pp_layers, num_layers, pp))
    out, first = [], 0
    for n in pp_layers:
        out.append((first, n))
        first += n
    return out


def _chunk(t, tp, dim):
    if t.shape[dim] % tp:
        raise ValueError("tp %d does not divide dim %d of %r" % (tp, dim, tuple(t.shape)))
    return [c.clone().contiguous() for c in torch.chunk(t, tp, dim=dim)]


def cut(name, t, tp, args):
    """The tp pieces of one full tensor by Megatron's saver rules (chunk_weight/chunk_bias)."""
    a = _ns(args)
    if name in ("embedding.word_embeddings.weight", "output_layer.weight"):
        vp = padded_vocab(t.shape[0], a.make_vocab_size_divisible_by, tp)
        pad = torch.zeros((vp - t.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype)
        return _chunk(torch.cat([t, pad], 0), tp, 0)
    base = re.sub(r"\d+$", "", name)  # TEGroupedMLP: linear_fc1.weight{e}
    if ".linear_qkv." in base and (base.endswith(".weight") or base.endswith(".bias")):
        return _chunk(t, tp, 0)
    if ".linear_fc1." in base and (base.endswith(".weight") or base.endswith(".bias")):
        if getattr(a, "swiglu", False):
            gate, up = torch.chunk(t, 2, dim=0)
            return [torch.cat([g, u], 0).contiguous() for g, u in zip(_chunk(gate, tp, 0), _chunk(up, tp, 0))]
        return _chunk(t, tp, 0)
    if (".linear_proj." in base or ".linear_fc2." in base) and base.endswith(".weight"):
        return _chunk(t, tp, 1)
    return [t.clone().contiguous() for _ in range(tp)]  # norms, biases of row linears, router, positions


def _extra_value(kind):
    if kind == "none":
        return None
    if kind == "bytesio":  # TransformerEngine <= 1.13: torch.save(None) in a BytesIO
        b = io.BytesIO()
        torch.save(None, b)
        b.seek(0)
        return b
    if kind == "uint8":  # TE 2.0-2.4: the pickled state as a uint8 tensor
        return torch.tensor(list(pickle.dumps(None)), dtype=torch.uint8)
    if kind == "empty":  # TE >= 2.5
        return torch.empty(0, dtype=torch.uint8)
    raise ValueError("extra_state kind %r" % (kind,))


def _linears_of_layer(local_names):
    """The linear modules of a stage whose local-spec GPTModel.state_dict() has _extra_state."""
    mods = []
    for n in local_names:
        for lin in (".linear_qkv.", ".linear_proj.", ".linear_fc1.", ".linear_fc2."):
            if lin in n and n.endswith(".weight") or (lin in n and re.search(r"\.weight\d+$", n)):
                mod = n[: n.index(lin) + len(lin) - 1]
                if mod not in mods:
                    mods.append(mod)
    return mods


def _to_legacy(model, tied_head):
    """mcore flat keys -> megatron.legacy nesting (language_model.{embedding, encoder,
    output_layer}, word_embeddings_for_head)."""
    lm = collections.OrderedDict()
    emb, enc, out, head = collections.OrderedDict(), collections.OrderedDict(), collections.OrderedDict(), None
    for k, v in model.items():
        m = LAYER_RE.match(k)
        if k.startswith("embedding."):
            mod, leaf = k[len("embedding."):].rsplit(".", 1)
            emb.setdefault(mod, collections.OrderedDict())[leaf] = v
        elif m:
            rest = m.group(2)
            for mc, lg in LEGACY_LAYER:
                if rest.startswith(mc):
                    rest = lg + rest[len(mc):]
                    break
            enc["layers.%s.%s" % (m.group(1), rest)] = v
        elif k.startswith("decoder.final_layernorm."):
            enc["final_norm." + k[len("decoder.final_layernorm."):]] = v
        elif k == "output_layer._extra_state" and "output_layer.weight" not in model:
            pass  # legacy GPTModel has no output layer when tied at one stage
        elif k.startswith("output_layer."):
            if tied_head:
                if k == "output_layer.weight":
                    head = collections.OrderedDict(weight=v)
            else:
                out[k[len("output_layer."):]] = v
        else:
            raise ValueError("no legacy name for %s" % k)
    if emb:
        lm["embedding"] = emb
    if enc:
        lm["encoder"] = enc
    if out:
        lm["output_layer"] = out
    model = collections.OrderedDict(language_model=lm)
    if head is not None:
        model["word_embeddings_for_head"] = head
    return model


def rank_dir_name(tp_rank, pp_rank, pp):
    return "mp_rank_%02d" % tp_rank if pp == 1 else "mp_rank_%02d_%03d" % (tp_rank, pp_rank)


def write_checkpoint(out_dir, full, args, tp, pp, *, pp_layers=None, iteration=1, legacy_names=False,
                     extra_state="none", with_optimizer=False, with_rng=False, with_rerun=True,
                     top_iteration="auto", tracker=True):
    """Writes out_dir/latest_checkpointed_iteration.txt and out_dir/{iter_%07d|release}/
    mp_rank_XX[_YYY]/model_optim_rng.pt; returns the iteration directory.

    args: a dict (see megatron_args) or Namespace; tensor/pipeline sizes, padded_vocab_size
    and vocab_size (the true vocabulary, from the embeddings) are set here.  iteration: an
    int > 0 or "release".  extra_state: the value of every linear's _extra_state ("none",
    "bytesio", "uint8", "empty") or "absent".  top_iteration: the file's "iteration" entry
    ("auto": the iteration, absent for release; None: absent)."""
    if extra_state not in EXTRA_KINDS:
        raise ValueError("extra_state must be one of %s" % (EXTRA_KINDS,))
    a = collections.OrderedDict(vars(args) if isinstance(args, argparse.Namespace) else args)
    v_true = full["embedding.word_embeddings.weight"].shape[0]
    a["vocab_size"] = v_true
    a["tensor_model_parallel_size"] = tp
    a["pipeline_model_parallel_size"] = pp
    a["padded_vocab_size"] = padded_vocab(v_true, a["make_vocab_size_divisible_by"], tp)
    if pp_layers is not None:
        a["decoder_first_pipeline_num_layers"] = pp_layers[0]
        a["decoder_last_pipeline_num_layers"] = pp_layers[-1]
    release = iteration == "release"
    a["iteration"] = 0 if release else int(iteration)
    ns = argparse.Namespace(**a)
    tied = not a.get("untie_embeddings_and_output_weights", False)
    ranges = stage_ranges(a["num_layers"], pp, pp_layers)
    iter_name = "release" if release else "iter_%07d" % int(iteration)
    iter_dir = os.path.join(out_dir, iter_name)
    os.makedirs(iter_dir, exist_ok=True)
    if tracker:
        with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("release" if release else str(int(iteration)))

    pieces = {name: cut(name, t, tp, a) for name, t in full.items()}
    for p in range(pp):
        first, count = ranges[p]
        names = []  # (global name, local name), in GPTModel.state_dict() order
        if p == 0:
            names += [(n, n) for n in full if n.startswith("embedding.")]
        for n in full:
            m = LAYER_RE.match(n)
            if m and first <= int(m.group(1)) < first + count:
                names.append((n, "decoder.layers.%d.%s" % (int(m.group(1)) - first, m.group(2))))
        if p == pp - 1:
            names += [(n, n) for n in full if n.startswith("decoder.final_layernorm.")]
            if "output_layer.weight" in full:
                names.append(("output_layer.weight", "output_layer.weight"))
            elif tied and pp > 1:  # the last stage's copy of the word embeddings
                names.append(("embedding.word_embeddings.weight", "output_layer.weight"))
        for r in range(tp):
            model = collections.OrderedDict()
            for g, loc in names:
                model[loc] = pieces[g][r]
            if extra_state != "absent":
                locs = [loc for _, loc in names]
                extras = [m + "._extra_state" for m in _linears_of_layer(locs)]
                # GPTModel's last stage always has output_layer: tied at pp 1 it has no weight
                # (the embeddings serve) but still saves its _extra_state, last in the dict
                if p == pp - 1:
                    extras.append("output_layer._extra_state")
                ordered = collections.OrderedDict()
                for k, v in model.items():  # each _extra_state right after its module's tensors
                    ordered[k] = v
                    mod = k.rsplit(".", 1)[0]
                    nxt = [x for x in model if x.rsplit(".", 1)[0] == mod]
                    if k == nxt[-1] and mod + "._extra_state" in extras:
                        ordered[mod + "._extra_state"] = _extra_value(extra_state)
                for e in extras:
                    if e not in ordered:
                        ordered[e] = _extra_value(extra_state)
                model = ordered
            if legacy_names:
                model = _to_legacy(model, tied and pp > 1)
            else:
                model._metadata = collections.OrderedDict([("", {"version": 1})])
            top = collections.OrderedDict()
            top["args"] = ns
            top["checkpoint_version"] = 3.0
            if top_iteration == "auto":
                if not release:
                    top["iteration"] = int(iteration)
            elif top_iteration is not None:
                top["iteration"] = top_iteration
            top["model"] = model
            if with_optimizer:
                top["optimizer"] = _optimizer_state(model)
                top["opt_param_scheduler"] = {"max_lr": 3e-4, "num_steps": 10, "decay_style": "cosine"}
            if with_rng:
                top["rng_state"] = [_rng_state()]
            if with_rerun:
                top["rerun_state_machine"] = {"mode": RerunMode.DISABLED, "state": RerunState.NOT_RUNNING_YET,
                                              "current_iteration": 0, "rerun_requested": False,
                                              "checkpoint_state": None, "data_iterator_checkpoints": None}
            top["num_floating_point_operations_so_far"] = 0
            d = os.path.join(iter_dir, rank_dir_name(r, p, pp))
            os.makedirs(d, exist_ok=True)
            torch_save(dict(top), os.path.join(d, "model_optim_rng.pt"))
    return iter_dir


def _optimizer_state(model):
    flat = [v for v in _leaves(model) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    state = {i: {"exp_avg": torch.full_like(t, 0.5), "exp_avg_sq": torch.full_like(t, 0.25), "step": torch.tensor(3.0)}
             for i, t in enumerate(flat)}
    return {"optimizer": {"state": state, "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                                                            "params": list(range(len(flat)))}]},
            "fp32_from_fp16_params": [[t.float() for t in flat]], "grad_scaler": None}


def _leaves(d):
    for v in d.values():
        if isinstance(v, dict):
            yield from _leaves(v)
        else:
            yield v


def _rng_state():
    rs = random.Random(7)
    nrs = np.random.RandomState(7)
    return {"random_rng_state": rs.getstate(), "np_rng_state": nrs.get_state(),
            "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": torch.zeros(16, dtype=torch.uint8),
            "rng_tracker_states": {"model-parallel-rng": torch.zeros(16, dtype=torch.uint8)}}


# ---------------------------------------------------------------- reading (Megatron's loader)

def _load(path):
    if STUB not in sys.path:
        try:
            import megatron.core.enums  # noqa: F401
        except ImportError:
            sys.path.insert(0, STUB)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch without weights_only
        return torch.load(path, map_location="cpu")


def _from_legacy(model):
    out = collections.OrderedDict()
    lm = model.get("language_model", {})
    for mod, d in lm.get("embedding", {}).items():
        for leaf, v in d.items():
            out["embedding.%s.%s" % (mod, leaf)] = v
    for k, v in lm.get("encoder", {}).items():
        m = re.match(r"^layers\.(\d+)\.(.+)$", k)
        if m:
            rest = m.group(2)
            for mc, lg in LEGACY_LAYER:
                if rest.startswith(lg):
                    rest = mc + rest[len(lg):]
                    break
            out["decoder.layers.%s.%s" % (m.group(1), rest)] = v
        elif k.startswith("final_norm."):
            out["decoder.final_layernorm." + k[len("final_norm."):]] = v
        else:
            out["decoder." + k] = v
    for leaf, v in lm.get("output_layer", {}).items():
        out["output_layer." + leaf] = v
    for leaf, v in model.get("word_embeddings_for_head", {}).items():
        out["output_layer." + leaf] = v
    return out


def find_iter_dir(path):
    """(root, iteration directory) of a checkpoint path by Megatron's read_metadata rules."""
    path = os.path.abspath(path)
    tr = os.path.join(path, "latest_checkpointed_iteration.txt")
    if os.path.isfile(tr):
        s = open(tr).read().strip()
        if s == "release":
            return path, os.path.join(path, "release")
        n = int(s)
        if n <= 0:
            raise ValueError("iteration %d in the tracker" % n)
        return path, os.path.join(path, "iter_%07d" % n)
    return os.path.dirname(path), path


def read_checkpoint(ckpt_dir, trim_vocab=False):
    """(args Namespace, {mcore global name: full tensor}) the way Megatron's loader gets them:
    cat the TP ranks (qkv/fc1/embeddings dim 0 with fc1's gate/up halves regrouped, proj/fc2
    dim 1), globalize layer numbers, drop _extra_state, rotary inv_freq and the tied head copy.
    trim_vocab: cut the embeddings back to args.vocab_size."""
    _, it = find_iter_dir(ckpt_dir)
    rank_dirs = sorted(d for d in os.listdir(it) if d.startswith("mp_rank_"))
    grid = {}
    for d in rank_dirs:
        parts = d[len("mp_rank_"):].split("_")
        grid[(int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)] = os.path.join(it, d, "model_optim_rng.pt")
    tp = 1 + max(t for t, _ in grid)
    pp = 1 + max(p for _, p in grid)
    args = None
    stages = []
    for p in range(pp):
        ranks = []
        for r in range(tp):
            sd = _load(grid[(r, p)])
            args = sd["args"]
            model = sd["model"]
            if "language_model" in model:
                model = _from_legacy(model)
            ranks.append(collections.OrderedDict(
                (k, v) for k, v in model.items()
                if not k.endswith("._extra_state") and not k.endswith("rotary_pos_emb.inv_freq")))
        stages.append(ranks)
    tied = not getattr(args, "untie_embeddings_and_output_weights", False)
    swiglu = getattr(args, "swiglu", False)
    out = collections.OrderedDict()
    offset = 0
    for p, ranks in enumerate(stages):
        n_local = 0
        for k in ranks[0]:
            m = LAYER_RE.match(k)
            name = k
            if m:
                n_local = max(n_local, int(m.group(1)) + 1)
                name = "decoder.layers.%d.%s" % (int(m.group(1)) + offset, m.group(2))
            if k == "output_layer.weight" and tied:
                continue
            vals = [rk[k] for rk in ranks]
            base = re.sub(r"\d+$", "", k)
            if k in ("embedding.word_embeddings.weight", "output_layer.weight") or ".linear_qkv." in base:
                t = torch.cat(vals, 0)
            elif ".linear_fc1." in base and (base.endswith(".weight") or base.endswith(".bias")):
                if swiglu:
                    halves = [torch.chunk(v, 2, dim=0) for v in vals]
                    t = torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)
                else:
                    t = torch.cat(vals, 0)
            elif (".linear_proj." in base or ".linear_fc2." in base) and base.endswith(".weight"):
                t = torch.cat(vals, 1)
            else:
                t = vals[0]
            if trim_vocab and k in ("embedding.word_embeddings.weight", "output_layer.weight"):
                t = t[: args.vocab_size]
            out[name] = t
        offset += n_local
    return args, out


# ---------------------------------------------------------------- Hugging Face -> Megatron

def _cfg(config, key, default=None):
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def hf_llama_to_megatron_full(hf_sd, config):
    """Full mcore tensors of a HF Llama/Mistral/Qwen2(/3)/Mixtral state dict, grouped QKV built
    as Megatron's loader_llama_mistral.py set_attn_state builds it."""
    nq = _cfg(config, "num_attention_heads")
    ng = _cfg(config, "num_key_value_heads", nq) or nq
    H = _cfg(config, "hidden_size")
    # head_dim may differ from H / nq (Qwen3, Gemma); the q_proj rows say which it is
    hd = _cfg(config, "head_dim") or hf_sd["model.layers.0.self_attn.q_proj.weight"].shape[0] // nq
    L = _cfg(config, "num_hidden_layers")
    out = collections.OrderedDict()
    out["embedding.word_embeddings.weight"] = hf_sd["model.embed_tokens.weight"]

    def grouped(q, k, v):
        tail = tuple(q.shape[1:])
        return torch.cat([q.reshape((ng, hd * nq // ng) + tail), k.reshape((ng, hd) + tail),
                          v.reshape((ng, hd) + tail)], dim=1).reshape((-1,) + tail).contiguous()

    for i in range(L):
        p, o = "model.layers.%d." % i, "decoder.layers.%d." % i
        out[o + "input_layernorm.weight"] = hf_sd[p + "input_layernorm.weight"]
        a = p + "self_attn."
        out[o + "self_attention.linear_qkv.weight"] = grouped(hf_sd[a + "q_proj.weight"], hf_sd[a + "k_proj.weight"],
                                                               hf_sd[a + "v_proj.weight"])
        if a + "q_proj.bias" in hf_sd:
            out[o + "self_attention.linear_qkv.bias"] = grouped(hf_sd[a + "q_proj.bias"], hf_sd[a + "k_proj.bias"],
                                                                 hf_sd[a + "v_proj.bias"])
        out[o + "self_attention.linear_proj.weight"] = hf_sd[a + "o_proj.weight"]
        if a + "o_proj.bias" in hf_sd:
            out[o + "self_attention.linear_proj.bias"] = hf_sd[a + "o_proj.bias"]
        if a + "q_norm.weight" in hf_sd:
            out[o + "self_attention.q_layernorm.weight"] = hf_sd[a + "q_norm.weight"]
            out[o + "self_attention.k_layernorm.weight"] = hf_sd[a + "k_norm.weight"]
        out[o + "pre_mlp_layernorm.weight"] = hf_sd[p + "post_attention_layernorm.weight"]
        if p + "mlp.gate_proj.weight" in hf_sd:
            out[o + "mlp.linear_fc1.weight"] = torch.cat([hf_sd[p + "mlp.gate_proj.weight"],
                                                          hf_sd[p + "mlp.up_proj.weight"]], 0)
            out[o + "mlp.linear_fc2.weight"] = hf_sd[p + "mlp.down_proj.weight"]
        else:  # Mixtral: SequentialMLP experts, fc1 = [w1; w3]
            m = p + "block_sparse_moe."
            out[o + "mlp.router.weight"] = hf_sd[m + "gate.weight"]
            e = 0
            while m + "experts.%d.w1.weight" % e in hf_sd:
                x, ox = m + "experts.%d." % e, o + "mlp.experts.local_experts.%d." % e
                out[ox + "linear_fc1.weight"] = torch.cat([hf_sd[x + "w1.weight"], hf_sd[x + "w3.weight"]], 0)
                out[ox + "linear_fc2.weight"] = hf_sd[x + "w2.weight"]
                e += 1
    out["decoder.final_layernorm.weight"] = hf_sd["model.norm.weight"]
    if not _cfg(config, "tie_word_embeddings", False) and "lm_head.weight" in hf_sd:
        out["output_layer.weight"] = hf_sd["lm_head.weight"]
    return out


def megatron_args_from_hf(config, **fields):
    """megatron_args of a HF Llama-family config (as loader_llama_mistral.py sets them)."""
    nq = _cfg(config, "num_attention_heads")
    ng = _cfg(config, "num_key_value_heads", nq) or nq
    H = _cfg(config, "hidden_size")
    dt = _cfg(config, "torch_dtype", None)
    a = dict(num_layers=_cfg(config, "num_hidden_layers"), hidden_size=H,
             ffn_hidden_size=_cfg(config, "intermediate_size"), num_attention_heads=nq,
             num_query_groups=ng, group_query_attention=ng != nq, kv_channels=_cfg(config, "head_dim") or H // nq,
             seq_length=_cfg(config, "max_position_embeddings"),
             max_position_embeddings=_cfg(config, "max_position_embeddings"),
             rotary_base=_cfg(config, "rope_theta", 10000), norm_epsilon=_cfg(config, "rms_norm_eps", 1e-5),
             vocab_size=_cfg(config, "vocab_size"),
             untie_embeddings_and_output_weights=not _cfg(config, "tie_word_embeddings", False),
             add_qkv_bias=bool(_cfg(config, "attention_bias", False)) or _cfg(config, "model_type") == "qwen2",
             params_dtype=dt if isinstance(dt, torch.dtype) else torch.float32)
    if _cfg(config, "num_local_experts"):
        a.update(num_experts=_cfg(config, "num_local_experts"), moe_router_topk=_cfg(config, "num_experts_per_tok"))
    a.update(fields)
    return megatron_args(**a)


def random_full(args, seed=0, dtype=torch.float32):
    """Random full mcore tensors (norms and biases included) for a GPT model of these args."""
    a = _ns(megatron_args(**dict(args)) if not isinstance(args, argparse.Namespace) else args)
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dtype)

    H, nq, ng, hd, F = a.hidden_size, a.num_attention_heads, a.num_query_groups, a.kv_channels, a.ffn_hidden_size
    out = collections.OrderedDict()
    out["embedding.word_embeddings.weight"] = rnd(a.vocab_size, H)
    if a.position_embedding_type == "learned_absolute":
        out["embedding.position_embeddings.weight"] = rnd(a.max_position_embeddings, H)
    bias = a.add_bias_linear
    for i in range(a.num_layers):
        o = "decoder.layers.%d." % i
        out[o + "input_layernorm.weight"] = 1 + rnd(H) * 0.1
        if a.normalization == "LayerNorm":
            out[o + "input_layernorm.bias"] = rnd(H) * 0.1
        out[o + "self_attention.linear_qkv.weight"] = rnd((nq + 2 * ng) * hd, H)
        if bias or a.add_qkv_bias:
            out[o + "self_attention.linear_qkv.bias"] = rnd((nq + 2 * ng) * hd)
        out[o + "self_attention.linear_proj.weight"] = rnd(H, nq * hd)
        if bias:
            out[o + "self_attention.linear_proj.bias"] = rnd(H)
        out[o + "pre_mlp_layernorm.weight"] = 1 + rnd(H) * 0.1
        if a.normalization == "LayerNorm":
            out[o + "pre_mlp_layernorm.bias"] = rnd(H) * 0.1
        f1 = 2 * F if a.swiglu else F
        out[o + "mlp.linear_fc1.weight"] = rnd(f1, H)
        if bias:
            out[o + "mlp.linear_fc1.bias"] = rnd(f1)
        out[o + "mlp.linear_fc2.weight"] = rnd(H, F)
        if bias:
            out[o + "mlp.linear_fc2.bias"] = rnd(H)
    out["decoder.final_layernorm.weight"] = 1 + rnd(H) * 0.1
    if a.normalization == "LayerNorm":
        out["decoder.final_layernorm.bias"] = rnd(H) * 0.1
    if a.untie_embeddings_and_output_weights:
        out["output_layer.weight"] = rnd(a.vocab_size, H)
    return out
