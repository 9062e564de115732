"""Lab: the batched entry point against the experts-only call on the same routed rows (one EP rank).
Both run the same build; per global batch T, random router logits pick the rows this rank owns, the
experts call gets the T tokens with their top-k choices, the batched call those rows grouped by local
expert ([E_local, M, H], M the tight bound and M = DeepEP-like padding).  Each is captured in a CUDA
graph and replayed in alternating windows; medians in µs.  Not a benchmark claim: a first look at what
the batched schedule and row store cost against the routing and weighted sum they replace.
  python3 lab/batched_vs_experts.py generated/_gputest/deepseek-v4-flash-ep1of8/sm90 8,64,512,2048"""
import statistics
import sys

import torch

from moegen import testing
from moegen.runtime import load


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def window_us(g, n=50):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        g.replay()
    b.record()
    b.synchronize()
    return 1000 * a.elapsed_time(b) / n


def main(build_dir: str, tokens: str, pad: int = 128) -> None:
    layer = load(build_dir)
    spec = layer.spec
    w = testing.random_weights(spec, "cuda", 1, layer.weight_layout)
    print(f"{spec.variant}: E_local {spec.local_experts}, top_k {spec.top_k}, H {spec.hidden_size}, "
          f"I_local {spec.local_intermediate}; {torch.cuda.get_device_name()}")
    print("| T global | rows here | M | experts µs | batched µs (tight M) | batched µs (M padded) |")
    print("|---|---|---|---|---|---|")
    for T in map(int, tokens.split(",")):
        x = testing.random_inputs(spec, T, "cuda", 100 + T)
        routed = layer(x.hidden, x.logits, w.prepared, x.score_bias)
        ids, weights = routed.topk_ids, routed.topk_weights
        rows = testing.batched_rows(spec, x.hidden, ids)
        counts, M = rows.counts, rows.hidden.shape[1]
        padded = torch.zeros((spec.local_experts, max(pad * 8, M), spec.hidden_size),
                             dtype=torch.bfloat16, device="cuda")
        padded[:, :M] = rows.hidden
        e_out = torch.empty_like(x.hidden)
        b_out = torch.empty_like(rows.hidden)
        p_out = torch.empty_like(padded)
        graphs = [graph_of(lambda: layer.experts(x.hidden, ids, weights, w.prepared, out=e_out)),
                  graph_of(lambda: layer.experts_batched(rows.hidden, counts, w.prepared, T, out=b_out)),
                  graph_of(lambda: layer.experts_batched(padded, counts, w.prepared, T, out=p_out))]
        times = [[], [], []]
        for r in range(6):
            order = range(3) if r % 2 == 0 else reversed(range(3))
            for i in order:
                times[i].append(window_us(graphs[i]))
        med = [statistics.median(t) for t in times]
        print(f"| {T} | {int(counts.sum())} | {M} / {padded.shape[1]} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "8,64,512,2048")
