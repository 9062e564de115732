"""W4A8 at T = 1 or 2 (one-block routing, which quantizes the hidden rows itself) against the same tokens
inside T = 5 (many-block routing, quantizer blocks of their own): the two must agree bit for bit, and
each against the float64 reference of the same quantization.  Diagnoses `moegen tune`'s T = 1
verification failure on DeepSeek-V3 W4A8 (2.81e-2 > 2e-2, every GEMM1 candidate, seed 0): the
reference's scale on CUDA, fixed in 1392fc0 (1.92e-3 since).

  python3 lab/diag_w4a8_small_t.py BUILD_DIR MODEL [--seeds 0,1,2,3] [--small 2]
"""
import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--small", type=int, default=1, help="the small batch: 1 or 2 tokens (one-block routing)")
    ap.add_argument("--per-expert", action="store_true",
                    help="T = 1 only: each routed expert alone (experts-only entry point, one-hot weights) against "
                         "its float64 output, and where its h row's largest elements sit on the e4m3 grid")
    ap.add_argument("--exact-hidden", action="store_true",
                    help="with --per-expert: each token's row replaced by its e4m3 values times a power of two, "
                         "which the kernel's and the reference's quantizers both reproduce exactly")
    args = ap.parse_args()
    from moegen.runtime import load
    from moegen.spec import load_model
    from moegen.testing import Inputs, random_inputs, random_weights, reference_output, relative_l2

    spec = load_model(args.model).with_activations("fp8")
    layer = load(args.build, spec=spec)
    w = random_weights(spec, "cuda", 0, layer.weight_layout)
    k = layer.choose_kernels(args.small)
    n = args.small
    if args.per_expert:
        per_expert(layer, spec, w, [int(x) for x in args.seeds.split(",")], args.exact_hidden)
        return
    for seed in (int(s) for s in args.seeds.split(",")):
        xs = random_inputs(spec, n, "cuda", 100 * n + seed)  # the tuner's T = n inputs for rotation `seed`
        x5 = random_inputs(spec, 5, "cuda", 7777 + seed)
        x5 = Inputs(torch.cat([xs.hidden, x5.hidden[n:]]), torch.cat([xs.logits, x5.logits[n:]]), xs.score_bias)
        rs = layer(xs.hidden, xs.logits, w.prepared, xs.score_bias, kernels=k, poison=True)
        r5 = layer(x5.hidden, x5.logits, w.prepared, x5.score_bias, kernels=k, poison=True)
        torch.cuda.synchronize()
        refs = reference_output(spec, w, xs, rs.topk_ids, "fp8")
        ref5 = reference_output(spec, w, x5, r5.topk_ids, "fp8")
        ids_same = torch.equal(rs.topk_ids, r5.topk_ids[:n])
        same = [torch.equal(rs.out[i], r5.out[i]) for i in range(n)]
        amax = [round(v, 3) for v in xs.hidden.float().abs().amax(dim=1).tolist()]
        per_row = [f"{relative_l2(rs.out[i:i + 1], refs[i:i + 1]):.2e}" for i in range(n)]
        per_row5 = [f"{relative_l2(r5.out[i:i + 1], ref5[i:i + 1]):.2e}" for i in range(n)]
        print(f"seed {seed}: T={n} rows {per_row}, the same rows in T=5 {per_row5}, T=5 {relative_l2(r5.out, ref5):.2e}; "
              f"ids equal {ids_same}, bits equal per row {same}; hidden amax per row {amax}", flush=True)


def per_expert(layer, spec, w, seeds, exact_hidden: bool = False) -> None:
    from moegen import reference
    from moegen.fp8 import quantize_per_token
    from moegen.testing import random_inputs, relative_l2
    W13, W2 = reference.FoldedMXFP4Experts(w.w13, w.s13), reference.FoldedMXFP4Experts(w.w2, w.s2)
    I = spec.local_intermediate
    for seed in seeds:
        x = random_inputs(spec, 1, "cuda", 100 + seed)
        if exact_hidden:  # q * 2^k is exact in bf16; its amax is 448 * 2^k, so its scale is 2^k exactly
            q, scale = quantize_per_token(x.hidden)
            k = torch.round(torch.log2(scale)).unsqueeze(-1)
            x = type(x)((q.float() * torch.exp2(k)).to(torch.bfloat16), x.logits, x.score_bias)
        ids = reference.route(spec, x.logits, x.score_bias).ids.to(torch.int32)
        from moegen.fp8 import round_trip_per_token
        xq = round_trip_per_token(x.hidden).double()
        line = []
        for s in range(spec.top_k):
            onehot = torch.zeros(1, spec.top_k, device="cuda")
            onehot[0, s] = 1.0
            got = layer.experts(x.hidden, ids, onehot, w.prepared, poison=True)
            e = int(ids[0, s])
            gu = xq[0] @ W13[e].T
            h = reference.activation(spec, gu[:I], gu[I:]).to(torch.bfloat16)
            q, scale = quantize_per_token(h.view(1, -1))
            want = (q.double() * scale.double()) @ W2[e].T
            # the largest |h|: its share of the row's norm, and its distance to the nearest e4m3
            # rounding boundary in units of the local e4m3 step (0.5 = on a boundary)
            hf = h.float()
            top = hf.abs().argmax().item()
            v = (hf[top] / scale).abs().item()
            step = 2.0 ** (int(torch.floor(torch.log2(torch.tensor(v)))) - 3)
            frac = (v / step) % 1.0
            line.append(f"e{e}: {relative_l2(got, want):.1e} (top {(hf.abs().max() / hf.norm()).item():.2f}, "
                        f"grid {frac:.3f})")
        print(f"seed {seed}: " + "; ".join(line), flush=True)


if __name__ == "__main__":
    main()
