"""One build under two settings of an environment switch, bit for bit: every kernel of the build
(lab/bitwise_ab.py's kernel_pairs) run in a child process per setting, on the same weights and
inputs (plain and skewed routing), outputs compared with torch.equal.  For a switch read once per process (e.g.
MOEGEN_QUANTIZE_ON_LOAD_MAX_ROWS, MOEGEN_GRID) whose two paths must give the same bits.

  python3 lab/bitwise_switch.py BUILD MODEL VAR=A VAR=B [--activations fp8] [--tokens 1,3,37]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import torch

from bitwise_ab import kernel_pairs, load_spec


def run(args, seed: int, path: str) -> None:
    from moegen.runtime import load
    from moegen.testing import random_inputs, random_weights

    spec = load_spec(args.model, args.activations)
    layer = load(args.build, spec=spec)
    names = [k.name for k in layer.kernels]
    w = random_weights(spec, "cuda", seed, layout=layer.weight_layout)
    outs = {}
    for t in (int(x) for x in args.tokens.split(",")):
        for skew in (False, True):
            x = random_inputs(spec, t, "cuda", seed + 7 * t + skew, skew=skew)
            for n1, n2 in kernel_pairs(names):
                y = layer(x.hidden, x.logits, w.prepared, x.score_bias, kernels=(names.index(n1), names.index(n2)),
                          poison=True)
                outs[(t, skew, n1, n2)] = y.out.cpu()
    torch.save(outs, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("a", help="VAR=VALUE for the first run")
    ap.add_argument("b", help="VAR=VALUE for the second run")
    ap.add_argument("--activations", default=None)
    ap.add_argument("--tokens", default="1,3,37")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run(args, args.seed, args.child)
        return 0
    seed = random.SystemRandom().randrange(2**31)
    print(f"seed {seed}")
    results = []
    with tempfile.TemporaryDirectory() as d:
        for i, setting in enumerate((args.a, args.b)):
            var, _, value = setting.partition("=")
            path = os.path.join(d, f"{i}.pt")
            cmd = [sys.executable, __file__, *sys.argv[1:], "--child", path, "--seed", str(seed)]
            subprocess.run(cmd, check=True, env={**os.environ, var: value})
            results.append(torch.load(path))
    bad = 0
    for key, ya in results[0].items():
        yb = results[1][key]
        same = torch.equal(ya, yb) and not torch.isnan(ya.float()).any()
        bad += not same
        t, skew, n1, n2 = key
        print(f"T={t} skew={int(skew)} {n1} + {n2}: {'equal' if same else 'DIFFERENT'}")
    print(f"{'all equal' if not bad else f'{bad} different'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
