"""What bounds the GEMMs, measured: the same kernels built four ways and timed per kernel in a graph
replay (tools/timeline.py).

  base     the tree's kernels, unmodified
  nowiden  the e2m1 -> bf16 widening replaced by register moves (the A fragment still needs four
           distinct registers per 8 values: ~3 moves instead of ~15 instructions)
  nomma    the wgmmas dropped (the widened fragments are kept alive by an empty asm)
  stream   both: what is left is the producer's streaming, the barriers and the epilogue
  notokens the producer copies no token rows (what the token gather adds)
  stagger  each weight-row tile starts its K loop at its own K tile (the CTAs of one expert read
           different token columns at a time)
Variants combine with '+': stream+notokens.

The ablated layers compute garbage; only their times mean anything.  The header is patched in a copy
of the tree (the templates stay as they are); each variant gets a dispatch table that picks the given
kernels per bucket.  Device machine, 16 cores:

    source tools/device_env.sh && python3 tools/ablation.py OUT [--tokens 64,256,1024,4096]
        [--variants base,stream] [--pick 1024:m256n64k64s6,m256n64k64s6] [--header other.cuh]

--pick replaces a bucket's kernels (gemm1,gemm2); --header builds every variant from another
version of sm90_mxfp4_grouped_gemm.cuh (an experiment kept out of the tree).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = Path("templates/include/moegen/sm90_mxfp4_grouped_gemm.cuh")
MODEL = "deepseek-v4-flash"
# The tuner's picks on the H200 (docs/benchmarks.md, 571c3a1).
DEFAULT_PICKS = {
    64: ("m64n16k128s4", "m64n8k128s6"),
    256: ("m128n32k64s6", "m64n32k128s4"),
    1024: ("m128n64k64s6", "m128n64k64s6"),
    4096: ("m256n128k64s6", "m256n128k64s6"),
}

WIDEN = """if (kk < 2) e2m1x8_to_bf16x8<false>(w4[kk], pair_g, pair_g8, out);
        else e2m1x8_to_bf16x8<true>(w4[kk], pair_g, pair_g8, out);"""
NO_WIDEN = "out[0] = w4[kk]; out[1] = w4[kk]; out[2] = w4[kk]; out[3] = w4[kk]; (void)pair_g; (void)pair_g8;"
MMA = """wgmma_rs<Op>(reinterpret_cast<const uint32_t*>(raw_pointer_cast(frag[r].data())) + kb * 4, desc,
                     raw_pointer_cast(accum[r].data()), std::make_index_sequence<kAccRegs>{});"""
# An empty asm would not keep the widening: ptxas drops code whose results no instruction reads.
# A store behind a condition that never holds (no expert is negative) does, for one instruction.
NO_MMA = """{ const uint32_t* a_ = reinterpret_cast<const uint32_t*>(raw_pointer_cast(frag[r].data())) + kb * 4;
          if (expert < 0) *reinterpret_cast<uint4*>(&ss.a[0][0][0][uint32_t(desc) & 1023]) =
              make_uint4(a_[0], a_[1], a_[2], a_[3]); }"""
# The producer copies no token rows (the slot completes on its weights alone): what the token
# gather adds to the streaming.
TOKENS = "if (row_src[i]) cp_async_16("
NO_TOKENS = "if (row_src[i] && t.expert < 0) cp_async_16("
# Each weight-row tile starts its K loop at its own K tile (m_tile * kKTiles / kMTiles, wrapping):
# the CTAs of one expert, which run together, then read different token columns at a time.
PRODUCER_TILE = "const WorkTile t = load_tile(tile);\n      const size_t atom0"
STAGGERED_TILE = """const WorkTile t = load_tile(tile);
      auto kperm = [&](int kt) { const int k = kt + t.m_tile * kKTiles / G::kMTiles; return k >= kKTiles ? k - kKTiles : k; };
      const size_t atom0"""
WEIGHT_K = "size_t(c) * kAtomsKTotal + size_t(kt) * kAtomsK;"
STAGGERED_WEIGHT_K = "size_t(c) * kAtomsKTotal + size_t(kperm(kt)) * kAtomsK;"
TOKEN_K = "const int k0 = kt * BK;"
STAGGERED_TOKEN_K = "const int k0 = kperm(kt) * BK;"
VARIANTS = {"base": [], "nowiden": [(WIDEN, NO_WIDEN)], "nomma": [(MMA, NO_MMA)],
            "stream": [(WIDEN, NO_WIDEN), (MMA, NO_MMA)], "notokens": [(TOKENS, NO_TOKENS)],
            "stagger": [(PRODUCER_TILE, STAGGERED_TILE), (WEIGHT_K, STAGGERED_WEIGHT_K), (TOKEN_K, STAGGERED_TOKEN_K)]}


def variant_edits(name: str) -> list[tuple[str, str]]:
    """A variant, or several joined by '+' (e.g. stream+notokens): their edits together."""
    parts = name.split("+")
    unknown = [v for v in parts if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant {unknown[0]!r}: expected {', '.join(VARIANTS)} or several joined by '+'")
    return [e for v in parts for e in VARIANTS[v]]


def make_tree(dst: Path, edits: list[tuple[str, str]], header_source: Path | None = None) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for name in ("moegen", "templates", "configs", "pyproject.toml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / name)
    header = dst / HEADER
    text = (header_source or header).read_text()
    for old, new in edits:
        if text.count(old) != 1:
            sys.exit(f"{HEADER}: expected exactly one {old[:50]!r}; update tools/ablation.py")
        text = text.replace(old, new)
    header.write_text(text)


def build(tree: Path, names: list[str], jobs: int, log: Path) -> None:
    cmd = [sys.executable, "-m", "moegen", "build", "--model", MODEL, "--arch", "sm90", "--kernels",
           ",".join(names), "-j", str(jobs), "--out", str(tree / "generated")]
    env = dict(os.environ, PYTHONPATH=f"{tree}:{os.environ.get('PYTHONPATH', '')}")
    with open(log, "w") as f:
        if subprocess.run(cmd, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT).returncode:
            sys.exit(f"build failed: {log}")


def write_table(build_dir: Path, picks: dict[int, tuple[str, str]]) -> None:
    """A dispatch table (moegen.tune's schema) that picks the given kernels; their times are not tuned (0)."""
    sys.path.insert(0, str(ROOT))
    from moegen.naming import parse_kernel_name
    from moegen.runtime import gpu_info
    from moegen.spec import load_model
    from moegen.tune import make_table, save_table
    manifest = json.loads((build_dir / "manifest.json").read_text())
    names = [k["name"] for k in manifest["kernels"]]
    choices = {t: (names.index(f"moegen_sm90_gemm1_{g1}"), names.index(f"moegen_sm90_gemm2_{g2}"), 0.0)
               for t, (g1, g2) in picks.items()}
    save_table(build_dir, make_table(load_model(MODEL), "sm90", manifest["fingerprint"], gpu_info(),
                                     [parse_kernel_name(n) for n in names], choices, []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokens", default=",".join(map(str, DEFAULT_PICKS)))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--pick", action="append", default=[], help="T:gemm1_tile,gemm2_tile, e.g. 1024:m128n64k64s6,m128n64k64s6")
    ap.add_argument("--header", type=Path, help="build from this sm90_mxfp4_grouped_gemm.cuh instead of the tree's")
    ap.add_argument("--work", type=Path, default=Path("/tmp/moegen-ablation"), help="where the trees are built")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    custom = {int(t): tuple(pair.split(",")) for t, pair in (p.split(":") for p in args.pick)}
    picks = {t: custom.get(t) or DEFAULT_PICKS[t] for t in tokens}
    names = sorted({f"moegen_sm90_gemm{i + 1}_{k}" for pair in picks.values() for i, k in enumerate(pair)})
    variants = args.variants.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work
    jobs = max(1, (os.cpu_count() or 2) // len(variants))
    for v in variants:
        make_tree(work / v, variant_edits(v), args.header.resolve() if args.header else None)
    t0 = time.time()
    with ThreadPoolExecutor(len(variants)) as pool:
        list(pool.map(lambda v: build(work / v, names, jobs, args.out / f"build_{v}.log"), variants))
    print(f"built {len(names)} kernels x {len(variants)} variants in {time.time() - t0:.0f} s", flush=True)
    for v in variants:
        build_dir = work / v / "generated" / MODEL / "sm90"
        write_table(build_dir, picks)
        with open(args.out / f"timeline_{v}.txt", "w") as f:
            subprocess.run([sys.executable, str(ROOT / "tools/timeline.py"), MODEL, args.tokens, str(build_dir)],
                           cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        print(f"== {v}\n" + (args.out / f"timeline_{v}.txt").read_text(), flush=True)


if __name__ == "__main__":
    main()
