"""The test tier's FP8 E4M3 encoder (testdata/gen_quant_fixtures.py, which made the quantized
fixtures) against torch 2's own float8_e4m3fn cast: every E4M3 value, the midpoints between
neighbours (ties to even), values past 448 (saturated here; torch's cast gives NaN, so those
are checked against 448 explicitly), subnormals and random values."""
import os
import random
import sys

import tap

sys.path.insert(0, os.path.join(tap.TOP, "testdata"))
import gen_quant_fixtures as q  # noqa: E402


def main():
    try:
        import torch
        torch.zeros(1).to(torch.float8_e4m3fn)
    except Exception as e:  # noqa: BLE001
        print("skip - torch2_fp8_encoder: torch with float8_e4m3fn is not available (%s)" % e)
        return 0
    vals = [q.fp8_e4m3_value(c) for c in range(256) if c & 0x7F != 0x7F]
    pos = sorted(v for v in vals if v > 0)
    xs = vals + [(a + b) / 2 for a, b in zip(pos, pos[1:])] + [-(a + b) / 2 for a, b in zip(pos, pos[1:])]
    rng = random.Random(7)
    xs += [rng.gauss(0, 1) * 10 ** rng.uniform(-4, 2.6) for _ in range(20000)]
    xs = [x for x in xs if abs(x) < 448]
    t = torch.tensor(xs, dtype=torch.float64).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    ours = [q.fp8_e4m3_code(x) for x in xs]
    bad = [(x, a, b) for x, a, b in zip(xs, ours, t) if a != b and not (x == 0 and (a & 0x7F) == (b & 0x7F) == 0)]
    tap.report(not bad, "E4M3 codes of %d values equal torch's float8_e4m3fn cast (RNE)" % len(xs), bad[:5])
    tap.report(q.fp8_e4m3_code(1e6) == 0x7E and q.fp8_e4m3_code(-449.0) == 0xFE, "beyond 448 saturates to +-448")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
