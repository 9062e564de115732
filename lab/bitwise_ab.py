"""Two builds of one spec, bit for bit: every kernel the two libraries share by name, run on the
same weights and inputs (plain and skewed routing), outputs compared with torch.equal.
For source changes that must not move a single bit (a reordered mainloop, a new load path); the
router's ids and weights are compared too.

  python3 lab/bitwise_ab.py BUILD_A BUILD_B MODEL [--activations fp8] [--tokens 1,37,300,2048,4100]
"""
import argparse
import random
import sys

import torch


def load_spec(model: str, activations: str | None):
    from moegen.spec import load_model
    spec = load_model(model)
    return spec.with_activations(activations) if activations else spec


def kernel_pairs(names: list[str]) -> list[tuple[str, str]]:
    """Every kernel once: each GEMM1 with the first GEMM2, each other GEMM2 with the first GEMM1."""
    g1 = [n for n in names if "gemm1" in n]
    g2 = [n for n in names if "gemm2" in n]
    return [(n, g2[0]) for n in g1] + [(g1[0], n) for n in g2[1:]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("model")
    ap.add_argument("--activations", default=None)
    ap.add_argument("--tokens", default="1,37,300,2048,4100")
    args = ap.parse_args()

    from moegen.runtime import load
    from moegen.testing import random_inputs, random_weights

    spec = load_spec(args.model, args.activations)
    la, lb = load(args.a, spec=spec), load(args.b, spec=spec)
    na, nb = [k.name for k in la.kernels], [k.name for k in lb.kernels]
    seed = random.SystemRandom().randrange(2**31)
    print(f"seed {seed}")
    w = random_weights(spec, "cuda", seed, layout=la.weight_layout)
    bad = 0
    for t in (int(x) for x in args.tokens.split(",")):
        for skew in (False, True):
            x = random_inputs(spec, t, "cuda", seed + 7 * t + skew, skew=skew)
            for n1, n2 in kernel_pairs([n for n in na if n in nb]):
                ya = la(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(na.index(n1), na.index(n2)), poison=True)
                yb = lb(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(nb.index(n1), nb.index(n2)), poison=True)
                same = torch.equal(ya.out, yb.out) and not torch.isnan(ya.out.float()).any()
                same = same and torch.equal(ya.topk_ids, yb.topk_ids) and torch.equal(ya.topk_weights, yb.topk_weights)
                bad += not same
                print(f"T={t} skew={int(skew)} {n1} + {n2}: {'equal' if same else 'DIFFERENT'}")
    torch.cuda.synchronize()
    print(f"{'all equal' if not bad else f'{bad} different'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
