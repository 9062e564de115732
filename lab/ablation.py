"""What bounds the GEMMs, measured: the same kernels built with parts of the mainloop removed, then
timed per kernel in a CUDA-graph replay (tools/timeline.py).  The ablated layers compute garbage;
only their times mean anything.

  base       the kernels as committed
  nowiden    the widening replaced by register moves (the word and scale loads stay; BF16: ~3
             moves instead of ~15 instructions per 8 weights; W4A8: 2 moves instead of a table load
             and 7 ALU instructions)
  nomma      the wgmmas dropped (the widened fragments are kept alive by a store that never runs)
  nopromote  W4A8 only: the FP32 adds that promote each K tile's partial sums dropped (the wait for
             the previous tile's wgmmas stays)
  stream     no widening, no wgmma, no promotion: what is left is the producer's streaming (weights
             and token rows), the barriers and the epilogue
  notokens   the producer copies no token rows
Not ablations, experiments in the same harness:
  persistent32  W4A8: the persistent grid's tile loop up to 32 K tiles (the template stops at 6)
  onewidth   every tile runs the full-width mainloop (one instantiation instead of up to four)
  opaquetid  the consumer's thread index opaque per tile (no hoisting out of the tile loop)
Variants combine with '+': nowiden+nopromote.

Two phases, so that the builds run here and only the timing needs the GPU:

    python3 lab/ablation.py build WORK --model deepseek-v4-flash --activations fp8 \
        --variants base,nowiden,nopromote --pick 16384:m128n128k128s4,m128n128k128s4
    python3 lab/ablation.py pack WORK DEST     (only plan.json, the manifests and libraries: a carry)
    python3 lab/ablation.py time DEST          (GPU machine; prints and writes DEST/timeline_*.txt)

`build` exports the committed tree (git HEAD) once per variant under WORK, patches its GEMM header
and builds only the picked kernels; WORK/plan.json carries the picks to `time`.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = Path("templates/include/moegen/sm90/grouped_gemm.cuh")

WIDEN_BF16 = """if (kk < 2) e2m1x8_to_bf16x8<false>(w4[kk], pair_g, pair_g8, out);
          else e2m1x8_to_bf16x8<true>(w4[kk], pair_g, pair_g8, out);"""
NO_WIDEN_BF16 = "out[0] = w4[kk]; out[1] = w4[kk] ^ pair_g; out[2] = w4[kk] ^ pair_g8; out[3] = ~w4[kk];"
WIDEN_FP8 = "e2m1x8_to_e4m3x8(w4[kk], table[(sw >> (8 * kk)) & 0xFFu], regs[reg], regs[reg + 2]);"
NO_WIDEN_FP8 = "regs[reg] = w4[kk]; regs[reg + 2] = w4[kk] ^ sw; (void)table;"
MMA = """if (G::kFp8 && kb == 0)
          wgmma_rs<Op, false>(a, desc, raw_pointer_cast(acc[r].data()), std::make_index_sequence<kAccRegs>{});
        else
          wgmma_rs<Op>(a, desc, raw_pointer_cast(acc[r].data()), std::make_index_sequence<kAccRegs>{});"""
# ptxas drops code whose results nothing reads; a store behind a condition that never holds (no
# expert is negative) keeps the fragments for one instruction.
NO_MMA = """if (expert < 0) *reinterpret_cast<uint4*>(&ss.a[0][0][0][uint32_t(desc) & 1023]) =
            make_uint4(a[0], a[1], a[2], a[3]);"""
PROMOTE = "for (int i = 0; i < size(accum[r]); ++i) accum[r](i) += part[r](i);"
# The wgmmas stay only while something reads their partial sums: one add behind a condition that never
# holds (without it nvcc drops the wgmmas and the widening too: that is `stream`).
NO_PROMOTE = "if (expert < 0) accum[r](0) += part[r](0);"
TOKENS = "if (row_src[i]) cp_async_16("
NO_TOKENS = "if (row_src[i] && t.expert < 0) cp_async_16("
VARIANTS = {"base": [], "nowiden": [(WIDEN_BF16, NO_WIDEN_BF16), (WIDEN_FP8, NO_WIDEN_FP8)],
            "nomma": [(MMA, NO_MMA)], "nopromote": [(PROMOTE, NO_PROMOTE)], "notokens": [(TOKENS, NO_TOKENS)]}
# W4A8 kernels keep the persistent grid's tile loop up to 32 K tiles (DeepSeek-V4-Flash's GEMM1), not 6.
PERSISTENT_FP8 = "static constexpr int kPersistentMaxKTilesFp8 = 6;"
VARIANTS["persistent32"] = [(PERSISTENT_FP8, PERSISTENT_FP8.replace("= 6", "= 32"))]
# threadIdx opaque per tile in the consumer, so that ptxas cannot hoist the shared-memory addresses of
# every N-width instantiation of the mainloop out of the tile loop (persistent32 spilled 460-492 B).
TID = "const int tid = threadIdx.x;\n  const int wg = tid / 128;"
VARIANTS["opaquetid"] = [(TID, 'int tid = threadIdx.x;\n  asm volatile("" : "+r"(tid));\n  const int wg = tid / 128;')]
# Every tile runs the full-width mainloop (one instantiation instead of up to four).
DISPATCH = "consume_dispatch<G, Epilogue, 1>(p, ss, (rows + G::kNStep - 1) / G::kNStep, t,"
VARIANTS["onewidth"] = [(DISPATCH, "consume_dispatch<G, Epilogue, 64>(p, ss, 64, t,")]
VARIANTS["stream"] = VARIANTS["nowiden"] + VARIANTS["nomma"] + ([(PROMOTE, "(void)part[r];")])


def variant_edits(name: str) -> list[tuple[str, str]]:
    parts = name.split("+")
    unknown = [v for v in parts if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant {unknown[0]!r}: expected {', '.join(VARIANTS)} or several joined by '+'")
    return [e for v in parts for e in VARIANTS[v]]


def make_tree(dst: Path, edits: list[tuple[str, str]]) -> None:
    subprocess.run(["rm", "-rf", str(dst)], check=True)
    dst.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD", "moegen", "templates", "configs", "pyproject.toml"],
                             cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(dst)], input=archive, check=True)
    header = dst / HEADER
    text = header.read_text()
    for old, new in edits:
        if text.count(old) != 1:
            sys.exit(f"{HEADER}: expected exactly one {old[:60]!r}; update lab/ablation.py")
        text = text.replace(old, new)
    header.write_text(text)


def build(tree: Path, model: str, activations: str, names: list[str], jobs: int, log: Path) -> None:
    cmd = [sys.executable, "-m", "moegen", "build", "--model", model, "--arch", "sm90", "--activations",
           activations, "--kernels", ",".join(names), "-j", str(jobs), "--out", str(tree / "generated")]
    with open(log, "w") as f:
        if subprocess.run(cmd, cwd=tree, stdout=f, stderr=subprocess.STDOUT).returncode:
            sys.exit(f"build failed: {log}")


def build_dir(work: Path, variant: str, plan: dict) -> Path:
    return work / variant / "generated" / plan["build_variant"] / "sm90"


def cmd_build(args) -> None:
    picks = {int(t): tuple(pair.split(",")) for t, pair in (p.split(":") for p in args.pick)}
    if not picks:
        sys.exit("--pick T:gemm1_tile,gemm2_tile is required (e.g. 16384:m128n128k128s4,m128n128k128s4)")
    fp8 = "_fp8" if args.activations == "fp8" else ""  # moegen.naming's suffix for e4m3 activations
    picks = {t: [f"{tile}{fp8}" for tile in pair] for t, pair in picks.items()}
    names = sorted({f"moegen_sm90_gemm{i + 1}_{k}" for pair in picks.values() for i, k in enumerate(pair)})
    variants = args.variants.split(",")
    for v in variants:
        variant_edits(v)
    args.work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    from moegen.spec import load_model
    plan = {"model": args.model, "activations": args.activations, "variants": variants, "picks": picks,
            "build_variant": load_model(args.model).with_activations(args.activations).variant}
    for v in variants:
        make_tree(args.work / v, variant_edits(v))
    t0 = time.time()
    # One variant at a time with every job: nvcc's memory, and a failure shows early.
    for v in variants:
        build(args.work / v, args.model, args.activations, names, args.jobs, args.work / f"build_{v}.log")
        print(f"{v}: built in {time.time() - t0:.0f} s", flush=True)
    (args.work / "plan.json").write_text(json.dumps(plan, indent=1))


def cmd_pack(args) -> None:
    plan = json.loads((args.work / "plan.json").read_text())
    subprocess.run(["rm", "-rf", str(args.dest)], check=True)
    args.dest.mkdir(parents=True)
    (args.dest / "plan.json").write_text(json.dumps(plan, indent=1))
    for v in plan["variants"]:
        src, dst = build_dir(args.work, v, plan), build_dir(args.dest, v, plan)
        dst.mkdir(parents=True)
        for f in [src / "manifest.json", *src.glob("libmoegen-*.so")]:
            (dst / f.name).write_bytes(f.read_bytes())


def cmd_time(args) -> None:
    plan = json.loads((args.work / "plan.json").read_text())
    tokens = ",".join(plan["picks"])
    picks = ",".join(f"{t}={g1}+{g2}" for t, (g1, g2) in plan["picks"].items())
    for v in plan["variants"]:
        out = args.work / f"timeline_{v}.txt"
        with open(out, "w") as f:
            subprocess.run([sys.executable, str(ROOT / "tools/timeline.py"), plan["build_variant"], tokens,
                            str(build_dir(args.work, v, plan)), picks], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        print(f"== {v}\n" + out.read_text(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="phase", required=True)
    b = sub.add_parser("build")
    b.add_argument("work", type=Path)
    b.add_argument("--model", default="deepseek-v4-flash")
    b.add_argument("--activations", choices=["bf16", "fp8"], default="bf16")
    b.add_argument("--variants", default="base,nowiden,nomma")
    b.add_argument("--pick", action="append", default=[], help="T:gemm1_tile,gemm2_tile")
    b.add_argument("-j", "--jobs", type=int, default=2)
    p = sub.add_parser("pack")
    p.add_argument("work", type=Path)
    p.add_argument("dest", type=Path)
    t = sub.add_parser("time")
    t.add_argument("work", type=Path)
    args = ap.parse_args()
    {"build": cmd_build, "pack": cmd_pack, "time": cmd_time}[args.phase](args)


if __name__ == "__main__":
    main()
