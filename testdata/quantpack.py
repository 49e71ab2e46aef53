"""GPTQ and AWQ 4-bit quantizers and packers in the producers' exact layouts, standard library
only (testdata/gen_quant_int.py writes the fixtures with them; tests/interop/quant/quant_ref.py
unpacks them again with numpy, written separately so the two check each other).

Matrices are lists of rows.  A weight is W[out][in] as nn.Linear holds it.

GPTQ (AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_cuda.py QuantLinear.pack, HEAD 9f7d370):
  intweight[k][n] = round(W[n][k] / s[g_idx[k]][n] + z[g_idx[k]][n])
  qweight [K/pf, N]   word row r holds input rows r*pf + j at bits*j (sequential)
  qzeros  [G, N/pf]   word c holds output columns c*pf + j at bits*j; the stored zero is
                      zero - 1 (v1), the uint32 of -1 smearing ones into the higher fields
                      as numpy's `zeros -= 1; astype(uint32)` does; gptq_v2 stores zero
  scales  [G, N]      F16
  g_idx   [K]         k // g, or with act-order (desc_act) the group of k's position in the
                      permutation (GPTQ.fasterquant: g_idx[invperm])
AWQ GEMM (AutoAWQ awq/modules/linear/gemm.py WQLinear_GEMM.from_linear, HEAD 88e4c76):
  qweight [K, N/8]    word c of row k: nibble i holds column 8c + AWQ_ORDER[i]
  qzeros  [K/g, N/8]  the zeros in the same order, no offset
  scales  [K/g, N]    F16
"""
import struct

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def f16(x):
    """x rounded to the nearest IEEE binary16 (ties to even), as a Python float."""
    return struct.unpack("<e", struct.pack("<e", x))[0]


def group_params(values, bits, sym):
    """Scale and zero of one group (AutoGPTQ Quantizer.find_params / AutoAWQ
    pseudo_quantize_tensor: min-max over the group, the range widened to include 0; sym puts
    the zero in the middle).  The scale is rounded to F16 first, as it is stored."""
    maxq = (1 << bits) - 1
    lo, hi = min(min(values), 0.0), max(max(values), 0.0)
    if sym:
        m = max(abs(lo), hi)
        lo, hi = -m, m
    if hi == lo:
        lo, hi = -1.0, 1.0
    scale = f16((hi - lo) / maxq)
    zero = (maxq + 1) // 2 if sym else min(max(int(round(-lo / scale)), 0), maxq)
    return scale, zero


def quantize(W, bits, g, g_idx, sym):
    """Codes q[k][n], scales s[G][n] (F16 values) and zeros z[G][n] of W[out][in] for the
    groups g_idx names (g -1: one group over all of in)."""
    N, K = len(W), len(W[0])
    G = 1 if g == -1 else (K + g - 1) // g
    maxq = (1 << bits) - 1
    members = [[k for k in range(K) if g_idx[k] == gi] for gi in range(G)]
    s = [[0.0] * N for _ in range(G)]
    z = [[0] * N for _ in range(G)]
    for gi in range(G):
        for n in range(N):
            s[gi][n], z[gi][n] = group_params([W[n][k] for k in members[gi]], bits, sym)
    q = [[0] * N for _ in range(K)]
    for k in range(K):
        gi = g_idx[k]
        for n in range(N):
            q[k][n] = min(max(int(round(W[n][k] / s[gi][n])) + z[gi][n], 0), maxq)
    return q, s, z


def gptq_g_idx(K, g, perm=None):
    """g_idx of K input rows: k // g, or with act-order the group of k's place in perm."""
    if g == -1:
        return [0] * K
    if perm is None:
        return [k // g for k in range(K)]
    place = [0] * K
    for i, k in enumerate(perm):
        place[k] = i
    return [place[k] // g for k in range(K)]


def gptq_pack(q, z, bits, v2=False):
    """qweight [K/pf][N] and qzeros [G][N/pf] as uint32 words (AutoGPTQ QuantLinear.pack)."""
    pf = 32 // bits
    K, N = len(q), len(q[0])
    qweight = [[0] * N for _ in range(K // pf)]
    for row in range(K // pf):
        for j in range(pf):
            src = q[row * pf + j]
            for n in range(N):
                qweight[row][n] |= (src[n] << (bits * j)) & 0xFFFFFFFF
    G = len(z)
    qzeros = [[0] * (N // pf) for _ in range(G)]
    for gi in range(G):
        for c in range(N // pf):
            for j in range(pf):
                v = z[gi][c * pf + j] - (0 if v2 else 1)
                qzeros[gi][c] |= ((v & 0xFFFFFFFF) << (bits * j)) & 0xFFFFFFFF
    return qweight, qzeros


def awq_pack(q, z):
    """qweight [K][N/8] and qzeros [G][N/8] as uint32 words (AutoAWQ from_linear, 4-bit)."""
    def pack_rows(rows):
        out = []
        for r in rows:
            words = []
            for c in range(len(r) // 8):
                w = 0
                for i in range(8):
                    w |= r[8 * c + AWQ_ORDER[i]] << (4 * i)
                words.append(w)
            out.append(words)
        return out
    return pack_rows(q), pack_rows(z)


def transpose(m):
    return [list(r) for r in zip(*m)]


def int32_bytes(rows):
    return b"".join(struct.pack("<%di" % len(r), *[w - (1 << 32) if w >= 1 << 31 else w for w in r]) for r in rows)


def f16_bytes(rows):
    return b"".join(struct.pack("<%de" % len(r), *r) for r in rows)
