"""W4A8 at T = 1-2 (one-block routing, which quantizes the hidden rows itself) against the same tokens
inside T = 5 (many-block routing, quantizer blocks of their own): the two must agree bit for bit, and
each against the float64 reference of the same quantization.  Diagnoses `moegen tune`'s T = 1
verification failure on DeepSeek-V3 W4A8 (2.81e-2 > 2e-2, every GEMM1 candidate, seed 0).

  python3 lab/diag_w4a8_small_t.py BUILD_DIR MODEL [--seeds 0,1,2,3]
"""
import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    args = ap.parse_args()
    from moegen.runtime import load
    from moegen.spec import load_model
    from moegen.testing import Inputs, random_inputs, random_weights, reference_output, relative_l2

    spec = load_model(args.model).with_activations("fp8")
    layer = load(args.build, spec=spec)
    w = random_weights(spec, "cuda", 0, layer.weight_layout)
    k = layer.choose_kernels(1)
    for seed in (int(s) for s in args.seeds.split(",")):
        x1 = random_inputs(spec, 1, "cuda", 100 + seed)  # the tuner's T = 1 inputs for rotation `seed`
        x5 = random_inputs(spec, 5, "cuda", 7777 + seed)
        x5 = Inputs(torch.cat([x1.hidden, x5.hidden[1:]]), torch.cat([x1.logits, x5.logits[1:]]), x1.score_bias)
        r1 = layer(x1.hidden, x1.logits, w.prepared, x1.score_bias, kernels=k, poison=True)
        r5 = layer(x5.hidden, x5.logits, w.prepared, x5.score_bias, kernels=k, poison=True)
        torch.cuda.synchronize()
        ref1 = reference_output(spec, w, x1, r1.topk_ids, "fp8")
        ref5 = reference_output(spec, w, x5, r5.topk_ids, "fp8")
        ids_same = torch.equal(r1.topk_ids, r5.topk_ids[:1])
        same = torch.equal(r1.out, r5.out[:1])
        amax = x1.hidden.float().abs().max().item()
        print(f"seed {seed}: T=1 {relative_l2(r1.out, ref1):.2e}, row 0 of T=5 {relative_l2(r5.out[:1], ref5[:1]):.2e}, "
              f"T=5 {relative_l2(r5.out, ref5):.2e}; ids equal {ids_same}, bits equal {same}; hidden amax {amax:.3g}; "
              f"out max |diff| {(r1.out.double() - ref1).abs().max().item():.3g} of |ref| max {ref1.abs().max().item():.3g}")


if __name__ == "__main__":
    main()
