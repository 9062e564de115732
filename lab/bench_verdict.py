"""A tuned table against what ran before, from round s's two bench orders (order a: the tuned table is
`default` against the old side labelled `shipped`; order b: the old side is `default` against the tuned
table labelled `retuned`), and the table to ship.

  python3 lab/bench_verdict.py A.json B.json                      per-T change, new against old, both orders
  python3 lab/bench_verdict.py A.json B.json --merge TUNED OUT    OUT (a shipped table) gains TUNED's new
      buckets that both orders confirm (>= 1 % faster in both, or the same pair); the others, unbenched
      ones included, are left out, so their T run the next bucket's pair as before (where a new bucket
      between would change that pair, T keeps the one it ran in a bucket of its own).  A bucket OUT
      already has takes TUNED's pair only where both orders confirm it.
  python3 lab/bench_verdict.py A.json B.json --override TUNED OUT  a table with no predecessor: TUNED, but
      a bucket both orders measured >= 1 % slower than the heuristic takes the heuristic's pair, with the
      tuner's own timing of that pair at that T (refused when the tuner did not time it).  Within noise
      the tuner's pick stays: nothing measured says the heuristic's is better.
"""
import json
import math
import sys
from pathlib import Path
from statistics import median


def rows(path, old_label):
    by = {}
    for r in json.load(open(path))["rows"]:
        if r["library"] not in ("default", old_label):
            sys.exit(f"{path}: library {r['library']!r}, expected 'default' and {old_label!r} (orders swapped?)")
        by.setdefault(r["tokens"], {})[r["library"]] = r
    return by


def us(row):
    return row["time_us"] if "time_us" in row else row["median_us"]  # bench JSONs before the draws' mean


def changes(a_path, b_path):
    """{T: (change in order a, change in order b, same pair, the old side's pair)}, new against old."""
    a, b = rows(a_path, "shipped"), rows(b_path, "retuned")
    out = {}
    for t in sorted(a.keys() & b.keys()):
        new_a, old_a, old_b, new_b = a[t]["default"], a[t]["shipped"], b[t]["default"], b[t]["retuned"]
        out[t] = (us(new_a) / us(old_a) - 1, us(new_b) / us(old_b) - 1,
                  new_a["kernels"] == old_a["kernels"], tuple(old_a["kernels"].split(",")))
    return out


def confirmed(ca, cb, same):
    return same or (ca <= -0.01 and cb <= -0.01)


def dispatched(buckets, t):
    """The (gemm1, gemm2) a table runs at T: its smallest bucket at or above T (None above the last)."""
    above = [b for b in buckets if b["tokens"] >= t]
    if not above:
        return None
    b = min(above, key=lambda b: b["tokens"])
    return b["gemm1"], b["gemm2"]


def main(argv):
    verdict = changes(argv[0], argv[1])
    for t, (ca, cb, same, _) in verdict.items():
        print(f"T={t:6d}  {ca * 100:+6.1f} %  {cb * 100:+6.1f} %"
              + ("  same pair" if same else "  confirmed" if confirmed(ca, cb, same) else ""))
    if len(argv) == 2:
        return
    if len(argv) != 5:
        sys.exit(__doc__)
    mode, tuned_path, out_path = argv[2:]
    table = json.load(open(tuned_path))
    if mode == "--merge":
        old = {b["tokens"]: b for b in json.load(open(out_path))["buckets"]}
        tuned = {b["tokens"]: b for b in table["buckets"]}
        unconfirmed = {t for t in tuned if not (t in verdict and confirmed(*verdict[t][:3]))}
        # a retuned bucket the bench did not confirm keeps its shipped pair; a new one is left out
        pair = lambda b: (b["gemm1"], b["gemm2"])
        kept = {t for t in unconfirmed if t in old and pair(old[t]) != pair(tuned[t])}
        drop = unconfirmed - old.keys()
        timings = table["measurements"]
        table["buckets"] = [old[t] if t in kept else b for t, b in tuned.items() if t not in drop]
        table["measurements"] = [m for m in timings if m[0] not in drop]
        # A left-out T runs the next bucket's pair: where a new bucket between it and the old next one
        # changed that pair, T gets a bucket of its own with the pair it ran before.
        held = {t: old_pair for t in drop
                if (old_pair := dispatched(old.values(), t)) and dispatched(table["buckets"], t) != old_pair}
        for t, (g1, g2) in held.items():
            timed = [m[3] for m in timings
                     if (m[0], m[1], m[2]) == (t, g1, g2) and m[3] is not None and math.isfinite(m[3])]
            table["buckets"].append(dict(tokens=t, gemm1=g1, gemm2=g2, us=round(median(timed), 2) if timed else None))
        table["buckets"].sort(key=lambda b: b["tokens"])
        print("left out:", sorted(drop), "shipped pair kept:", sorted(kept), "the pair before held:", sorted(held))
    elif mode == "--override":
        for b in table["buckets"]:
            ca, cb, same, (g1, g2) = verdict.get(b["tokens"], (0, 0, True, (None, None)))
            if same or not (ca >= 0.01 and cb >= 0.01):
                continue
            timed = [m[3] for m in table["measurements"] if m[0] == b["tokens"] and (m[1], m[2]) == (g1, g2)]
            if not timed:
                sys.exit(f"T={b['tokens']}: the tuner never timed the heuristic's pair {g1} + {g2}")
            print(f"T={b['tokens']}: {b['gemm1'][12:]} + {b['gemm2'][12:]} ({b['us']} us) -> "
                  f"{g1[12:]} + {g2[12:]} ({min(timed)} us, tuner)")
            b.update(gemm1=g1, gemm2=g2, us=min(timed))
    else:
        sys.exit(f"unknown mode {mode}\n{__doc__}")
    Path(out_path).write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
