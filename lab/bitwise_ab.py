"""Two builds of one spec, bit for bit: every kernel the two libraries share by name, run on the
same weights and inputs (plain and skewed routing), outputs compared with torch.equal.
For source changes that must not move a single bit (a reordered mainloop, a new load path).

  python3 lab/bitwise_ab.py BUILD_A BUILD_B MODEL [--activations fp8] [--tokens 1,37,300,2048,4100]
"""
import argparse
import random
import sys

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("model")
    ap.add_argument("--activations", default=None)
    ap.add_argument("--tokens", default="1,37,300,2048,4100")
    args = ap.parse_args()

    from moegen.runtime import load
    from moegen.spec import load_model
    from moegen.testing import random_inputs, random_weights

    spec = load_model(args.model)
    if args.activations:
        spec = spec.with_activations(args.activations)
    la, lb = load(args.a, spec=spec), load(args.b, spec=spec)
    na, nb = [k.name for k in la.kernels], [k.name for k in lb.kernels]
    seed = random.SystemRandom().randrange(2**31)
    print(f"seed {seed}")
    w = random_weights(spec, "cuda", seed, layout=la.weight_layout)
    bad = 0
    for t in (int(x) for x in args.tokens.split(",")):
        for skew in (False, True):
            x = random_inputs(spec, t, "cuda", seed + 7 * t + skew, skew=skew)
            g1 = [n for n in na if "gemm1" in n and n in nb]
            g2 = [n for n in na if "gemm2" in n and n in nb]
            # every kernel once: each GEMM1 with the first GEMM2, each other GEMM2 with the first GEMM1
            for n1, n2 in [(n, g2[0]) for n in g1] + [(g1[0], n) for n in g2[1:]]:
                ya = la(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(na.index(n1), na.index(n2)), poison=True)
                yb = lb(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(nb.index(n1), nb.index(n2)), poison=True)
                same = torch.equal(ya.out, yb.out) and not torch.isnan(ya.out.float()).any()
                bad += not same
                print(f"T={t} skew={int(skew)} {n1} + {n2}: {'equal' if same else 'DIFFERENT'}")
    torch.cuda.synchronize()
    print(f"{'all equal' if not bad else f'{bad} different'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
