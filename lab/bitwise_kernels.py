"""One build's kernels against each other, bit for bit: every GEMM1 (with the first GEMM2) and every
GEMM2 (with the first GEMM1) on the same weights and inputs (plain and skewed routing), each output
compared with the first pair's by torch.equal.  Batch invariance needs every kernel a table may pick
to give the same bits; this checks it for a candidate library before any table picks its kernels.

  python3 lab/bitwise_kernels.py BUILD MODEL [--tp N] [--tokens 1,37,300,2048]      (GPU machine; prints its seed)
"""
import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bitwise_ab import kernel_pairs, load_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--activations", default=None)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--tokens", default="1,37,300,2048")
    args = ap.parse_args()

    from moegen.runtime import load
    from moegen.testing import random_inputs, random_weights

    spec = load_spec(args.model, args.activations)
    spec = spec.with_parallel(tp_size=args.tp) if args.tp > 1 else spec
    layer = load(args.build, spec=spec)
    names = [k.name for k in layer.kernels]
    seed = random.SystemRandom().randrange(2**31)
    print(f"seed {seed}")
    w = random_weights(spec, "cuda", seed, layout=layer.weight_layout)
    bad = 0
    for t in (int(x) for x in args.tokens.split(",")):
        for skew in (False, True):
            x = random_inputs(spec, t, "cuda", seed + 7 * t + skew, skew=skew)
            pairs = kernel_pairs(names)
            ref = None
            for n1, n2 in pairs:
                y = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(names.index(n1), names.index(n2)),
                          poison=True).out.clone()
                if ref is None:
                    ref = y
                    ok = not torch.isnan(y.float()).any()
                else:
                    ok = torch.equal(y, ref)
                bad += not ok
                print(f"T={t} skew={int(skew)} {n1} + {n2}: {'equal' if ok else 'DIFFERENT'}")
    torch.cuda.synchronize()
    print(f"{'all equal' if not bad else f'{bad} different'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
