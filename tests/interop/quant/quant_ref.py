"""GPTQ and AWQ in numpy for the interop tests: unpacking and dequantization written from the
producers' descriptions (not from testdata/quantpack.py, which packs, nor from tpshard), and
the per-rank pieces each tensor must be cut into, from the engine's parameter classes
(the project's quantization spec, sections 0, 3.2 and 4.2).

A rank's expected piece is given as a tuple of index slices of the checkpoint tensor, so a test
compares `shard[name]` with `full[name][piece]` and nothing of tpshard's plan enters the truth.
"""
import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def unpack_cols(words, bits, order=None):
    """[R, C] int32 words -> [R, C * pf] codes, field i of word c at column c*pf + order[i]."""
    pf = 32 // bits
    order = order or list(range(pf))
    w = words.astype(np.int64) & 0xFFFFFFFF
    out = np.zeros((w.shape[0], w.shape[1] * pf), dtype=np.int64)
    for i in range(pf):
        out[:, order[i]::pf] = (w >> (bits * i)) & ((1 << bits) - 1)
    return out


def unpack_rows(words, bits):
    """[R, C] int32 words -> [R * pf, C] codes, field j of word r at row r*pf + j."""
    pf = 32 // bits
    w = words.astype(np.int64) & 0xFFFFFFFF
    out = np.zeros((w.shape[0] * pf, w.shape[1]), dtype=np.int64)
    for j in range(pf):
        out[j::pf, :] = (w >> (bits * j)) & ((1 << bits) - 1)
    return out


def gptq_dequant(qweight, qzeros, scales, g_idx, bits=4, v2=False):
    """W [out, in] float64: (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]; the v1 format stores
    zero - 1 (AutoGPTQ pack), so 1 is added back to the masked field (a zero of 0, stored as
    -1, reads 16, as AutoGPTQ's forward and vLLM's GPTQ kernel compute it)."""
    q = unpack_rows(qweight, bits)
    z = unpack_cols(qzeros, bits)
    if not v2:
        z = z + 1
    g = np.asarray(g_idx, dtype=np.int64)
    s = scales.astype(np.float64)
    return ((q - z[g, :]) * s[g, :]).T


def awq_dequant(qweight, qzeros, scales, bits=4):
    """W [out, in] float64 of AutoAWQ's GEMM layout: (q - z) * s, columns in AWQ_ORDER."""
    q = unpack_cols(qweight, bits, AWQ_ORDER)
    z = unpack_cols(qzeros, bits, AWQ_ORDER)
    g = q.shape[0] // z.shape[0]
    rows = np.arange(q.shape[0]) // g
    return ((q - z[rows, :]) * scales.astype(np.float64)[rows, :]).T


# ---- the expected per-rank pieces ----

def _cols(lo, n):
    return (slice(None), slice(lo, lo + n))


def _rows(lo, n):
    return (slice(lo, lo + n),)


ALL = (slice(None),)


def column_pieces(method, part, out_parts, r, T, kv_heads=None, hd=None, pf=8):
    """Pieces of one column-parallel linear (q/k/v or gate/up, each its own tensor: the
    default target keeps the source's names) for rank r: part is "qweight", "qzeros",
    "scales" or "g_idx"; out_parts the output size.  kv_heads/hd for k and v: with T >= kv
    heads rank r holds KV head r * kv // T (vLLM QKVParallelLinear: num_kv_head_replicas)."""
    if kv_heads is not None and T > kv_heads:
        lo, n = (r * kv_heads // T) * hd, hd
    else:
        n = out_parts // T
        lo = r * n
    if part == "g_idx":
        return ALL  # RowvLLMParameter on a column layer: the whole [in] everywhere
    if method == "gptq":
        # qweight [in/pf, out] and scales [G, out] by output columns; qzeros [G, out/pf] by
        # packed output words (packed_dim == output_dim: // pf)
        return _cols(lo // pf, n // pf) if part == "qzeros" else _cols(lo, n)
    # AWQ: qweight and qzeros [.., out/8] by words, scales [G, out] by columns
    return _cols(lo, n) if part == "scales" else _cols(lo // pf, n // pf)


def row_pieces(method, part, in_size, group, r, T, desc_act=False, pf=8):
    """Pieces of one row-parallel linear (o_proj, down_proj) for rank r."""
    i = in_size // T
    if method == "gptq":
        if part == "qweight":
            return _rows(r * i // pf, i // pf)
        if part == "g_idx":
            return _rows(r * i, i)
        if desc_act or group == -1:  # ChannelQuantScaleParameter / PackedColumnParameter
            return ALL
        return _rows(r * i // group, i // group)
    if part == "qweight":
        return _rows(r * i, i)
    return _rows(r * i // group, i // group)


def legal_tps(method, group, h, heads, kv, hd, inter, pf=8, candidates=(1, 2, 3, 4, 5, 6, 8, 16)):
    """The tp values spec (3.3, 4.3, 9.3) allow for a Llama-shaped model: heads divide
    (KV heads divide or are replicated), in/T % g and in/T % pf for the row layers (o: in = heads
    * hd, down: in = inter), local out % pf for each column sub-matrix."""
    ok = []
    for T in candidates:
        if heads % T or (kv % T and T % kv) or inter % T:
            continue
        kv_local = hd * (kv // T if kv >= T else 1)
        outs = [heads * hd // T, kv_local, inter // T]
        ins = [heads * hd // T, inter // T]
        if any(o % pf for o in outs) or any(x % pf for x in ins):
            continue
        if group != -1 and any(x % group for x in ins):
            continue
        ok.append(T)
    return ok
