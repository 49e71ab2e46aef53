"""Real Megatron-Core as the outside truth for Megatron checkpoints (issue #18).

Run with build/venv-megatron's python (tests/interop/megatron/setup_megatron.sh).  Megatron-Core's
GPTModel with the local (non-TransformerEngine) layer spec is built on the CPU, one process per
rank (tensor x pipeline), gloo over 127.0.0.1.  Small stubs make that possible: the "current
CUDA device" query answers "cpu", Tensor.cuda() keeps the tensor where it is (the tied
embeddings' first/last-stage all-reduce), and the CUDA RNG tracker's fork() is a no-op
(dropout is 0).

  state_dict_keys(args, tp, pp)       each rank's real state_dict_for_save_checkpoint() keys
                                      and shapes (None for the _extra_state values, which are
                                      None in the local spec)
  load_and_forward(ckpt_dir, tokens)  torch.load(weights_only=True, Megatron's safe globals
                                      registered) of a legacy checkpoint, load_state_dict(
                                      strict=True) into each rank's GPTModel built from the
                                      checkpoint's args, the forward through the pipeline
                                      stages (hidden states sent stage to stage), the vocab-
                                      parallel logits gathered: [tokens, V] (padding removed)
  save_checkpoint(args, tp, pp, dir)  real GPTModel ranks (CPU-initialized from one seed, so
                                      their full tensors do not depend on tp) saved as
                                      Megatron's save_checkpoint lays them out (megatron/
                                      training/checkpointing.py: tracker, iter_NNNNNNN,
                                      mp_rank_XX[_YYY]/model_optim_rng.pt)
  hf_llama_to_megatron(...)           Megatron's own HF Llama -> mcore rules (loader_llama_
                                      mistral set_attn_state / saver chunk_weight), written
                                      independently of tpshard, for harness self-checks
  hf_logits(model_dir, tokens)        transformers' forward of a HF model: the reference

The outer dict (args Namespace, checkpoint_version, iteration) is written by this file: the
PyPI package has no training code (save_checkpoint, argument parsing, tools/checkpoint).
"""

import argparse
import contextlib
import glob
import json
import os
import re
import socket
import sys
import tempfile
import traceback
import warnings

warnings.filterwarnings("ignore")
# the ranks (forked from a server started with this environment) stay quiet about the missing
# TransformerEngine / Apex
os.environ.setdefault("PYTHONWARNINGS", "ignore")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


# ---------------------------------------------------------------------------------------------
# args: the checkpoint's argparse.Namespace fields that decide the model
# ---------------------------------------------------------------------------------------------

def llama_args(vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, ffn_hidden_size,
               tp=1, pp=1, max_pos=128, rope_theta=10000.0, eps=1e-5, untie=True,
               make_vocab_size_divisible_by=128, params_dtype=torch.float32):
    """A Megatron args Namespace for a Llama-style model: the fields Megatron's loaders read
    (load_args_from_checkpoint, check_checkpoint_args in megatron/training/checkpointing.py)."""
    mult = make_vocab_size_divisible_by * tp
    padded = -(-vocab_size // mult) * mult
    a = dict(
        num_layers=num_layers, hidden_size=hidden_size, ffn_hidden_size=ffn_hidden_size,
        num_attention_heads=num_heads, num_query_groups=num_kv_heads,
        group_query_attention=num_kv_heads != num_heads, kv_channels=hidden_size // num_heads,
        seq_length=max_pos, max_position_embeddings=max_pos, position_embedding_type="rope",
        add_position_embedding=True, use_rotary_position_embeddings=True, rotary_base=rope_theta,
        rotary_percent=1.0, rotary_interleaved=False, use_rope_scaling=False,
        add_bias_linear=False, add_qkv_bias=False, swiglu=True, squared_relu=False,
        untie_embeddings_and_output_weights=untie, apply_layernorm_1p=False,
        normalization="RMSNorm", norm_epsilon=eps, apply_query_key_layer_scaling=False,
        attention_dropout=0.0, hidden_dropout=0.0, tokenizer_type="HuggingFaceTokenizer",
        tokenizer_model=None, vocab_size=vocab_size, padded_vocab_size=padded,
        make_vocab_size_divisible_by=make_vocab_size_divisible_by,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=None, num_layers_per_virtual_pipeline_stage=None,
        expert_model_parallel_size=1, num_experts=None, sequence_parallel=False, fp16=False,
        bf16=params_dtype == torch.bfloat16, params_dtype=params_dtype, ckpt_format="torch",
        consumed_train_samples=0, consumed_valid_samples=0, skipped_train_samples=0,
        iteration=1, qk_layernorm=False,
    )
    return argparse.Namespace(**a)


def _get(args, name, default=None):
    v = getattr(args, name, default)
    return default if v is None else v


def _transformer_config(args, tp, pp):
    from megatron.core.transformer.transformer_config import TransformerConfig
    import torch.nn.functional as F
    swiglu = bool(_get(args, "swiglu", False))
    groups = _get(args, "num_query_groups", None) if _get(args, "group_query_attention", False) \
        else None
    kw = dict(
        num_layers=args.num_layers, hidden_size=args.hidden_size,
        ffn_hidden_size=_get(args, "ffn_hidden_size", 4 * args.hidden_size),
        num_attention_heads=args.num_attention_heads, num_query_groups=groups,
        kv_channels=_get(args, "kv_channels", None),
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        normalization=_get(args, "normalization", "LayerNorm"),
        layernorm_epsilon=_get(args, "norm_epsilon", 1e-5),
        layernorm_zero_centered_gamma=bool(_get(args, "apply_layernorm_1p", False)),
        gated_linear_unit=swiglu, activation_func=F.silu if swiglu else F.gelu,
        add_bias_linear=bool(_get(args, "add_bias_linear", True)),
        add_qkv_bias=bool(_get(args, "add_qkv_bias", False)),
        qk_layernorm=bool(_get(args, "qk_layernorm", False)),
        hidden_dropout=0.0, attention_dropout=0.0,
        init_method_std=_get(args, "init_method_std", 0.02),
        use_cpu_initialization=True, perform_initialization=True, params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        sequence_parallel=False,
    )
    first = _get(args, "decoder_first_pipeline_num_layers", None)
    last = _get(args, "decoder_last_pipeline_num_layers", None)
    if first is not None:
        kw["num_layers_in_first_pipeline_stage"] = first
    if last is not None:
        kw["num_layers_in_last_pipeline_stage"] = last
    return TransformerConfig(**kw)


# ---------------------------------------------------------------------------------------------
# the per-rank worker
# ---------------------------------------------------------------------------------------------

class _CpuRngTracker:
    """Stands in for Megatron's CUDA RNG tracker: with dropout 0 and CPU initialization
    nothing draws from the CUDA generators, so fork() only has to be a context."""

    def reset(self):
        pass

    def add(self, name, seed):
        pass

    def get_states(self):
        return {}

    def set_states(self, states):
        pass

    def is_initialized(self):
        return True

    @contextlib.contextmanager
    def fork(self, name=None):
        yield


def _install_stubs():
    torch.cuda.current_device = lambda: "cpu"
    # dist_checkpointing.save's preload step synchronizes the (absent) GPU
    torch.cuda.synchronize = lambda *a, **k: None
    # tied embeddings with pp > 1: LanguageModule moves the shared weight to the GPU before
    # the first/last-stage all-reduce; gloo reduces it where it is
    torch.Tensor.cuda = lambda self, *a, **k: self
    from megatron.core.tensor_parallel import random as mrandom
    mrandom._CUDA_RNG_STATE_TRACKER = _CpuRngTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build_model(args, tp, pp, seed=1234):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    cfg = _transformer_config(args, tp, pp)
    spec = get_gpt_layer_local_spec(normalization=cfg.normalization,
                                    qk_layernorm=cfg.qk_layernorm)
    torch.manual_seed(seed)
    model = GPTModel(
        config=cfg, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
        max_sequence_length=_get(args, "max_position_embeddings", 4096),
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=not _get(args, "untie_embeddings_and_output_weights",
                                                     False),
        position_embedding_type=_get(args, "position_embedding_type", "learned_absolute"),
        rotary_percent=_get(args, "rotary_percent", 1.0),
        rotary_base=int(_get(args, "rotary_base", 10000)),
    )
    model.eval()
    return model


def _rank_file(ckpt_iter_dir, tp_rank, pp_rank, pp):
    name = "mp_rank_%02d" % tp_rank if pp == 1 else "mp_rank_%02d_%03d" % (tp_rank, pp_rank)
    return os.path.join(ckpt_iter_dir, name, "model_optim_rng.pt")


def _forward(model, tokens, tp, pp):
    """Runs the pipeline: stage p receives stage p-1's hidden states from the rank with the
    same tensor-parallel rank, the last stage gathers the vocab-parallel logits."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    pp_rank = ps.get_pipeline_model_parallel_rank()
    tp_rank = ps.get_tensor_model_parallel_rank()
    world_rank = dist.get_rank()
    ids = torch.tensor([tokens], dtype=torch.long)
    pos = torch.arange(len(tokens), dtype=torch.long).unsqueeze(0)
    with torch.no_grad():
        if pp_rank > 0:
            hidden = torch.empty(len(tokens), 1, model.config.hidden_size)
            dist.recv(hidden, src=ps.get_pipeline_model_parallel_prev_rank())
            model.set_input_tensor(hidden)
        # True = masked; Megatron's default mask would be made on "cuda"
        mask = torch.triu(torch.ones(len(tokens), len(tokens)), diagonal=1).bool()[None, None]
        out = model(input_ids=ids, position_ids=pos, attention_mask=mask)
        if pp_rank < pp - 1:
            dist.send(out.contiguous(), dst=ps.get_pipeline_model_parallel_next_rank())
            return None
        # out: [b, s, V/tp] (parallel_output); gather over the tensor-parallel group
        local = out[0].contiguous()
        parts = [torch.empty_like(local) for _ in range(tp)]
        dist.all_gather(parts, local, group=ps.get_tensor_model_parallel_group())
        del world_rank, tp_rank
        return torch.cat(parts, dim=-1)


def _save_dist(payload, tp, pp, tp_rank, pp_rank):
    """What Megatron's save_checkpoint does for --ckpt-format torch_dist (megatron/training/
    checkpointing.py, generate_state_dict + dist_checkpointing.save): the model's
    sharded_state_dict, an Adam-like optimizer state made with Megatron's own
    make_sharded_optimizer_tensor (optimizer.state.exp_avg.<key>), the RNG state as a
    ShardedObject, and the common part (args, checkpoint_version, iteration) that goes to
    common.pt."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    from megatron.core.dist_checkpointing.optimizer import make_sharded_optimizer_tensor
    if "from_iter_dir" in payload:  # a legacy checkpoint's model, loaded strict, saved again
        state = _load_rank_state(_rank_file(payload["from_iter_dir"], tp_rank, pp_rank, pp))
        args = argparse.Namespace(**vars(state["args"]))
        model = _build_model(args, tp, pp)
        model.load_state_dict(state["model"], strict=True)
    else:
        args = argparse.Namespace(**vars(payload["args"]))
        # Megatron pads the vocabulary for the tp it trains at (_vocab_size_with_padding)
        mult = _get(args, "make_vocab_size_divisible_by", 128) * tp
        args.padded_vocab_size = -(-args.vocab_size // mult) * mult
        model = _build_model(args, tp, pp, seed=payload["seed"])
    args.tensor_model_parallel_size, args.pipeline_model_parallel_size = tp, pp
    args.ckpt_format = "torch_dist"
    msd = model.sharded_state_dict()
    opt = {}
    for k, v in msd.items() if payload.get("optimizer", True) else ():
        if isinstance(v, ShardedTensor):
            opt[k] = make_sharded_optimizer_tensor(v, torch.zeros_like(v.data) + 0.5,
                                                   "optimizer.state.exp_avg")
    state = {"args": args, "checkpoint_version": 3.0, "iteration": payload["iteration"],
             "model": msd, "optimizer": {"state": opt}, "num_floating_point_operations_so_far": 0,
             "rng_state": ShardedObject("rng_state", [{"random_rng_state": [1, 2, 3]}],
                                        (pp, tp), (pp_rank, tp_rank), replica_id=0)}
    dist_checkpointing.save(state, payload["iter_dir"])


def _load_rank_state(path):
    try:
        from megatron.core.safe_globals import register_safe_globals
        register_safe_globals()
    except ImportError:
        pass
    return torch.load(path, map_location="cpu", weights_only=True)


def _worker(rank, world, port, tp, pp, job, payload, outdir):
    try:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        _install_stubs()
        from megatron.core import parallel_state as ps
        ps.initialize_model_parallel(tensor_model_parallel_size=tp,
                                     pipeline_model_parallel_size=pp)
        tp_rank = ps.get_tensor_model_parallel_rank()
        pp_rank = ps.get_pipeline_model_parallel_rank()
        result = None
        if job == "keys":
            args = payload["args"]
            model = _build_model(args, tp, pp)
            sd = model.state_dict_for_save_checkpoint()
            result = [(k, None if v is None else tuple(v.shape)) for k, v in sd.items()]
        elif job == "save":
            args = payload["args"]
            model = _build_model(args, tp, pp, seed=payload["seed"])
            sd = model.state_dict_for_save_checkpoint()
            path = _rank_file(payload["iter_dir"], tp_rank, pp_rank, pp)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            a = argparse.Namespace(**vars(args))
            a.tensor_model_parallel_size, a.pipeline_model_parallel_size = tp, pp
            torch.save({"args": a, "checkpoint_version": 3.0,
                        "iteration": payload["iteration"], "model": sd}, path)
        elif job == "save_dist":
            _save_dist(payload, tp, pp, tp_rank, pp_rank)
        elif job == "forward_dist":
            from megatron.core import dist_checkpointing
            args = dist_checkpointing.load_common_state_dict(payload["iter_dir"])["args"]
            model = _build_model(args, tp, pp)
            # as Megatron's load_checkpoint: the model under "model", the common part beside it
            sd = dist_checkpointing.load({"model": model.sharded_state_dict()}, payload["iter_dir"])
            model.load_state_dict(sd["model"], strict=True)
            logits = _forward(model, payload["tokens"], tp, pp)
            if logits is not None and tp_rank == 0:
                result = logits[:, :args.vocab_size]
        elif job == "forward":
            path = _rank_file(payload["iter_dir"], tp_rank, pp_rank, pp)
            state = _load_rank_state(path)
            args = state["args"]
            model = _build_model(args, tp, pp)
            model.load_state_dict(state["model"], strict=True)
            logits = _forward(model, payload["tokens"], tp, pp)
            if logits is not None and tp_rank == 0:
                result = logits
        if result is not None:
            torch.save(result, os.path.join(outdir, "rank%d.pt" % rank))
        dist.barrier()
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    except BaseException:
        with open(os.path.join(outdir, "error%d.txt" % rank), "w") as f:
            f.write(traceback.format_exc())
        raise


_PRELOADED = False


def _preload():
    """Ranks are forked from one server that imported Megatron once (an import costs seconds
    per rank with spawn); the server itself never ran torch ops, so forking it is safe."""
    global _PRELOADED
    if not _PRELOADED:
        import multiprocessing
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        multiprocessing.get_context("forkserver").set_forkserver_preload(
            ["megatron_real", "megatron.core.models.gpt", "megatron.core.parallel_state"])
        _PRELOADED = True


def _run(tp, pp, job, payload):
    """Starts tp*pp ranks; returns {global rank: result} of the ranks that produced one."""
    world = tp * pp
    _preload()
    with tempfile.TemporaryDirectory(prefix="mgreal") as outdir:
        try:
            mp.start_processes(_worker, args=(world, _free_port(), tp, pp, job, payload, outdir),
                               nprocs=world, join=True, start_method="forkserver")
        except Exception as e:
            errs = sorted(glob.glob(os.path.join(outdir, "error*.txt")))
            text = "".join(open(p).read() for p in errs[:1])
            raise RuntimeError("megatron ranks failed (%s):\n%s" % (e, text)) from None
        res = {}
        for p in glob.glob(os.path.join(outdir, "rank*.pt")):
            res[int(re.search(r"rank(\d+)", p).group(1))] = torch.load(p, weights_only=False)
        return res


def _global_rank(tp_rank, pp_rank, tp):
    # Megatron's default order "tp-cp-ep-dp-pp": tensor rank varies fastest
    return pp_rank * tp + tp_rank


# ---------------------------------------------------------------------------------------------
# the public functions
# ---------------------------------------------------------------------------------------------

def state_dict_keys(args, tp, pp):
    """{(tp_rank, pp_rank): [(key, shape or None), ...]} in state_dict order."""
    res = _run(tp, pp, "keys", {"args": args})
    return {(r % tp, r // tp): v for r, v in res.items()}


def save_checkpoint(args, tp, pp, out_dir, iteration=1, seed=1234):
    """Writes a legacy checkpoint of a randomly initialized real GPTModel."""
    iter_dir = os.path.join(out_dir, "iter_%07d" % iteration)
    _run(tp, pp, "save", {"args": args, "iter_dir": iter_dir, "iteration": iteration,
                          "seed": seed})
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return out_dir


def save_dist_checkpoint(args, tp, pp, out_dir, iteration=1, seed=1234, optimizer=True):
    """Writes a torch_dist checkpoint (Megatron-Core dist_checkpointing.save) of a randomly
    initialized real GPTModel saved at tp x pp, the tracker beside it."""
    iter_dir = os.path.join(out_dir, "iter_%07d" % iteration)
    os.makedirs(iter_dir, exist_ok=True)
    _run(tp, pp, "save_dist", {"args": args, "iter_dir": iter_dir, "iteration": iteration,
                               "seed": seed, "optimizer": optimizer})
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return out_dir


def legacy_to_dist(legacy_dir, out_dir, iteration=1):
    """The legacy checkpoint's model loaded strict into real GPTModel ranks at its grid and
    saved with dist_checkpointing.save (torch_dist), the tracker beside it."""
    src_iter, tp, pp = checkpoint_grid(legacy_dir)
    iter_dir = os.path.join(out_dir, "iter_%07d" % iteration)
    os.makedirs(iter_dir, exist_ok=True)
    _run(tp, pp, "save_dist", {"from_iter_dir": src_iter, "iter_dir": iter_dir,
                               "iteration": iteration})
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return out_dir


def checkpoint_grid(ckpt_dir):
    """(iter_dir, tp, pp) of a legacy checkpoint directory (the tracker's parent, an iter_* /
    release directory)."""
    tracker = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")
    if os.path.exists(tracker):
        it = open(tracker).read().strip()
        iter_dir = os.path.join(ckpt_dir, "release" if it == "release" else
                                "iter_%07d" % int(it))
    else:
        iter_dir = ckpt_dir
    tps, pps = set(), set()
    for d in os.listdir(iter_dir):
        m = re.fullmatch(r"mp_rank_(\d\d)(?:_(\d\d\d))?", d)
        if not m:
            raise ValueError("%s: unexpected entry %s in the iteration directory" % (iter_dir, d))
        tps.add(int(m.group(1)))
        pps.add(int(m.group(2) or 0))
    tp, pp = len(tps), len(pps)
    if tps != set(range(tp)) or pps != set(range(pp)):
        raise ValueError("%s: rank directories do not form a grid" % iter_dir)
    return iter_dir, tp, pp


def load_and_forward(ckpt_dir, tokens):
    """Real Megatron's logits [len(tokens), V] (V = args.vocab_size when the checkpoint
    says it, else the padded size) for a legacy checkpoint."""
    iter_dir, tp, pp = checkpoint_grid(ckpt_dir)
    args = _load_rank_state(_rank_file(iter_dir, 0, 0, pp))["args"]
    res = _run(tp, pp, "forward", {"iter_dir": iter_dir, "tokens": list(tokens)})
    logits = res[_global_rank(0, pp - 1, tp)]
    v = _get(args, "vocab_size", None)
    return logits[:, :v] if v else logits


def load_dist_and_forward(ckpt_dir, tokens, tp, pp):
    """Real Megatron's logits [len(tokens), vocab_size] for a torch_dist checkpoint (the
    tracker's directory) loaded with dist_checkpointing.load into GPTModel ranks at tp x pp
    (any grid: the checkpoint's tensors are global)."""
    it = open(os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")).read().strip()
    iter_dir = os.path.join(ckpt_dir, "iter_%07d" % int(it))
    res = _run(tp, pp, "forward_dist", {"iter_dir": iter_dir, "tokens": list(tokens)})
    return res[_global_rank(0, pp - 1, tp)]


def load_state(ckpt_dir):
    """{(tp_rank, pp_rank): the file's dict} read the way Megatron reads it."""
    iter_dir, tp, pp = checkpoint_grid(ckpt_dir)
    return {(t, p): _load_rank_state(_rank_file(iter_dir, t, p, pp))
            for t in range(tp) for p in range(pp)}


# ---------------------------------------------------------------------------------------------
# Hugging Face side (the reference)
# ---------------------------------------------------------------------------------------------

def hf_logits(model_dir, tokens):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0]


def hf_llama_to_megatron(model_dir, tp, pp, out_dir, iteration=1,
                         make_vocab_size_divisible_by=128):
    """Megatron's own conversion rules, applied with torch to a HF Llama checkpoint:
    grouped QKV (loader_llama_mistral.set_attn_state), fc1 = [gate_r; up_r]
    (saver_base.receive_lm), chunk_weight row/column splits, vocabulary zero-padded to
    make_vocab_size_divisible_by*tp, stages with local layer numbers."""
    from safetensors.torch import load_file
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    sd = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        sd.update(load_file(f))
    H, nq = cfg["hidden_size"], cfg["num_attention_heads"]
    ng = cfg.get("num_key_value_heads", nq)
    hd = cfg.get("head_dim") or H // nq
    L, V = cfg["num_hidden_layers"], cfg["vocab_size"]
    untie = not cfg.get("tie_word_embeddings", False)
    args = llama_args(V, H, L, nq, ng, cfg["intermediate_size"], tp=tp, pp=pp,
                      max_pos=cfg.get("max_position_embeddings", 128),
                      rope_theta=float(cfg.get("rope_theta", 10000.0)),
                      eps=cfg.get("rms_norm_eps", 1e-5), untie=untie,
                      make_vocab_size_divisible_by=make_vocab_size_divisible_by)
    args.kv_channels = hd
    Vp = args.padded_vocab_size

    def pad(w):
        return torch.cat([w, w.new_zeros(Vp - w.shape[0], w.shape[1])])

    emb = pad(sd["model.embed_tokens.weight"])
    head = pad(sd["lm_head.weight"] if untie else sd["model.embed_tokens.weight"])
    full = {}
    for i in range(L):
        p = "model.layers.%d." % i
        q = sd[p + "self_attn.q_proj.weight"].reshape(ng, nq // ng * hd, H)
        k = sd[p + "self_attn.k_proj.weight"].reshape(ng, hd, H)
        v = sd[p + "self_attn.v_proj.weight"].reshape(ng, hd, H)
        full[i] = {
            "input_layernorm.weight": sd[p + "input_layernorm.weight"],
            "self_attention.linear_qkv.weight": torch.cat([q, k, v], dim=1).reshape(-1, H),
            "self_attention.linear_proj.weight": sd[p + "self_attn.o_proj.weight"],
            "pre_mlp_layernorm.weight": sd[p + "post_attention_layernorm.weight"],
            "gate": sd[p + "mlp.gate_proj.weight"], "up": sd[p + "mlp.up_proj.weight"],
            "mlp.linear_fc2.weight": sd[p + "mlp.down_proj.weight"],
        }
    per = L // pp
    iter_dir = os.path.join(out_dir, "iter_%07d" % iteration)
    for pr in range(pp):
        for tr in range(tp):
            m = {}
            if pr == 0:
                m["embedding.word_embeddings.weight"] = emb.chunk(tp)[tr].clone()
            for j in range(per):
                f = full[pr * per + j]
                pre = "decoder.layers.%d." % j
                m[pre + "input_layernorm.weight"] = f["input_layernorm.weight"].clone()
                m[pre + "self_attention.linear_qkv.weight"] = \
                    f["self_attention.linear_qkv.weight"].chunk(tp)[tr].clone()
                m[pre + "self_attention.linear_qkv._extra_state"] = None
                m[pre + "self_attention.linear_proj.weight"] = \
                    f["self_attention.linear_proj.weight"].chunk(tp, dim=1)[tr].clone()
                m[pre + "self_attention.linear_proj._extra_state"] = None
                m[pre + "pre_mlp_layernorm.weight"] = f["pre_mlp_layernorm.weight"].clone()
                m[pre + "mlp.linear_fc1.weight"] = torch.cat(
                    [f["gate"].chunk(tp)[tr], f["up"].chunk(tp)[tr]]).clone()
                m[pre + "mlp.linear_fc1._extra_state"] = None
                m[pre + "mlp.linear_fc2.weight"] = \
                    f["mlp.linear_fc2.weight"].chunk(tp, dim=1)[tr].clone()
                m[pre + "mlp.linear_fc2._extra_state"] = None
            if pr == pp - 1:
                m["decoder.final_layernorm.weight"] = sd["model.norm.weight"].clone()
                if untie or pp > 1:
                    m["output_layer.weight"] = head.chunk(tp)[tr].clone()
                m["output_layer._extra_state"] = None
            path = _rank_file(iter_dir, tr, pr, pp)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration,
                        "model": m}, path)
    with open(os.path.join(out_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    return args


def random_llama(out_dir, vocab=1000, hidden=64, layers=4, heads=8, kv_heads=4, inter=96,
                 tie=False, seed=0):
    """A random HF Llama (norms random too) saved with save_pretrained."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=tie, torch_dtype="float32")
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    m.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


if __name__ == "__main__":
    # a quick self-check: python megatron_real.py
    with tempfile.TemporaryDirectory() as d:
        hf = random_llama(os.path.join(d, "hf"))
        toks = [1, 5, 99, 3, 700, 42, 8]
        ref = hf_logits(hf, toks)
        for tp, pp in [(1, 1), (2, 2)]:
            ck = os.path.join(d, "mg%d%d" % (tp, pp))
            hf_llama_to_megatron(hf, tp, pp, ck)
            got = load_and_forward(ck, toks)
            print("tp%d pp%d max abs diff vs HF: %.3g" % (tp, pp, (got - ref).abs().max()))
    sys.exit(0)


def fixture_llama_args(mf, **kw):
    """megatron_fixture's args of a small GQA Llama-style model (4 heads in 2 query groups
    unless kw says otherwise), for the tier's tests."""
    f = dict(num_layers=4, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
             num_query_groups=2, group_query_attention=True, kv_channels=8, vocab_size=100,
             make_vocab_size_divisible_by=4)
    f.update(kw)
    return mf.megatron_args(**f)


def scaled_full(mf, args, seed, scale=0.2):
    """The fixture's random full tensors, all but the norms scaled so that the logits stay
    O(1): a 1e-4 bound then means something."""
    full = mf.random_full(args, seed=seed)
    return {k: (v if "layernorm" in k else v * scale) for k, v in full.items()}


def close(got, want, what, tol=1e-4):
    """Reports whether logits got equal want within tol (and want is not ~0 everywhere, so
    the bound means something)."""
    from tap import report
    diff = float((got - want).abs().max())
    big = float(want.abs().max())
    return report(got.shape == want.shape and diff <= tol and big > 1e-2,
                  "%s (max abs diff %.2g, logits up to %.2g)" % (what, diff, big),
                  "shapes %s vs %s" % (tuple(got.shape), tuple(want.shape)))
