"""How sensitive the W4A8 float64 reference is to GEMM1's accumulation error, per token: the
reference (hidden states and `h` quantized per token to e4m3, exact arithmetic), then the same with
GEMM1's outputs perturbed by a relative error of 1e-4 or 1e-3 (what FP8 wgmma's reduced-precision
partial sums leave after the per-128-K promotion), relative L2 between them.  If the perturbed
references differ from the reference by as much as the kernel does, the kernel's error is the
re-quantization of `h`, not a bug.  Also reports the `h` rows' largest elements relative to their
row's L2 norm (a dominant element flipping one e4m3 step moves the whole output).

  python3 lab/diag_w4a8_sensitivity.py MODEL [--seeds 0,1,2,3,4,5] [--device cuda]
"""
import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    from moegen import reference
    from moegen.fp8 import round_trip_per_token
    from moegen.spec import load_model
    from moegen.testing import random_inputs, random_weights, relative_l2

    dev = args.device
    spec = load_model(args.model).with_activations("fp8")
    w = random_weights(spec, dev, 0, "sm90_e2m1_atom64_e4m3")  # the tuner's weights (seed 0)
    W13, W2 = reference.FoldedMXFP4Experts(w.w13, w.s13), reference.FoldedMXFP4Experts(w.w2, w.s2)
    I = spec.local_intermediate
    gen = torch.Generator(device=dev).manual_seed(1234)
    for seed in (int(s) for s in args.seeds.split(",")):
        x = random_inputs(spec, 1, dev, 100 + seed)  # the tuner's T = 1 inputs for rotation `seed`
        ids = reference.route(spec, x.logits, x.score_bias).ids.long()
        weights = reference.route_weights(spec, x.logits, x.score_bias, ids).double()
        xq = round_trip_per_token(x.hidden).double()
        gus = [xq[0] @ W13[int(e)].T for e in ids[0]]

        def layer(noise: float) -> torch.Tensor:
            out = 0
            for s, e in enumerate(ids[0]):
                gu = gus[s] * (1 + noise * torch.randn(gus[s].shape, generator=gen, device=dev, dtype=torch.float64))
                h = reference.activation(spec, gu[:I], gu[I:])
                hq = round_trip_per_token(h.view(1, -1).to(torch.bfloat16)).double()[0]
                out = out + weights[0, s] * (hq @ W2[int(e)].T)
            return out

        ref = layer(0.0)
        errs = {n: [relative_l2(layer(n), ref) for _ in range(4)] for n in (1e-5, 1e-4, 1e-3)}
        peak = []
        for s in range(len(gus)):
            h = reference.activation(spec, gus[s][:I], gus[s][I:])
            peak.append((h.abs().max() / h.norm()).item())
        print(f"seed {seed}: perturbed GEMM1 by " + ", ".join(
            f"{n:.0e}: {min(v):.1e}-{max(v):.1e}" for n, v in errs.items()) +
            f"; h rows' max|h|/||h|| {min(peak):.3f}-{max(peak):.3f}", flush=True)


if __name__ == "__main__":
    main()
