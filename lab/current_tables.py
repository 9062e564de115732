"""docs/benchmarks.md's current tables from one `moegen bench --json` run of a default (W4A16) build with
its W4A8 build compared (lab/round_20261205_y.sh B MODEL): the default build's row against the floor
and issue 20's bars, and W4A8 against W4A16 (issue 21's bars).

  python3 lab/current_tables.py bench-MODEL.json
"""
import json
import sys

TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384]
# issue 20: DeepSeek-V4-Flash's bars as multiples of its run's floor; gpt-oss-120b's best peer (µs)
DSV4_BARS = dict(zip(TOKENS, [1.48, 1.34, 1.35, 1.30, 1.30, 1.49, 1.34, 1.35]))
GPT_OSS_120B_PEERS = dict(zip(TOKENS, [57.0, 108.2, 260.4, 527.7, 675.8, 1010, 2420, 7132]))


def main(path):
    data = json.load(open(path))
    by = {}
    for r in data["rows"]:
        by.setdefault(r["tokens"], {})[r["library"]] = r
    ts = [t for t in TOKENS if t in by]
    print(data["model"], data["environment"], data["ceilings"], sep="\n")
    print("| T | " + " | ".join(map(str, ts)) + " |\n|---|" + "---|" * len(ts))
    row = lambda name, f: print(f"| {name} | " + " | ".join(f(t) for t in ts) + " |")
    row("floor µs", lambda t: f"{by[t]['default']['floor_us']:.1f}")
    row("moegen µs", lambda t: f"{by[t]['default']['time_us']:.1f}")
    row("× floor", lambda t: f"{by[t]['default']['time_over_floor']:.2f}")
    if data["model"] == "deepseek-v4-flash":
        row("issue 20's bar (× floor)", lambda t: f"{DSV4_BARS[t]:.2f}")
    if data["model"] == "gpt-oss-120b":
        row("best peer / moegen (bar 1.3)", lambda t: f"{GPT_OSS_120B_PEERS[t] / by[t]['default']['time_us']:.2f}")
    row("mJ", lambda t: f"{1e3 * by[t]['default']['joules_per_call']:.1f}")
    row("SM MHz (min-median)", lambda t: f"{by[t]['default']['sm_mhz_min']:.0f}-{by[t]['default']['sm_mhz_median']:.0f}")
    row("power W, capped share", lambda t: f"{by[t]['default']['power_w_median']:.0f}, "
        f"{100 * by[t]['default']['power_capped_share']:.0f} %")
    row("kernels", lambda t: by[t]["default"]["kernels"].replace("moegen_sm90_", ""))
    if all("w4a8" in by[t] for t in ts):
        print("\n| T | w4a16 µs | w4a8 µs | w4a16 / w4a8 | issue 21's bar | w4a8 × floor | w4a16 mJ | w4a8 mJ | w4a8 kernels |")
        print("|---|---|---|---|---|---|---|---|---|")
        for t in ts:
            a, b = by[t]["default"], by[t]["w4a8"]
            bar = "≥ 1.6" if t >= 1024 else "≥ 1.0" if t <= 64 else "-"
            print(f"| {t} | {a['time_us']:.1f} | {b['time_us']:.1f} | {a['time_us'] / b['time_us']:.2f} | {bar} | "
                  f"{b['time_over_floor']:.2f} | {1e3 * a['joules_per_call']:.1f} | {1e3 * b['joules_per_call']:.1f} | "
                  f"{b['kernels'].replace('moegen_sm90_', '')} |")


if __name__ == "__main__":
    main(sys.argv[1])
