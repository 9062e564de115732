"""A tuned table against what ran before, from round s's two bench orders (order a: the tuned table is
`default`, the old side the compared library; order b: the reverse), and the table to ship.

  python3 lab/bench_verdict.py A.json B.json                      per-T change, new against old, both orders
  python3 lab/bench_verdict.py A.json B.json --merge TUNED OUT    TUNED (a copy of a shipped table plus new
      buckets) less the new buckets that both orders do not confirm (>= 1 % faster, or the same pair): their
      T then run the next bucket's pair, as before.  OLD_BUCKETS: the buckets the shipped table held.
  python3 lab/bench_verdict.py A.json B.json --override TUNED OUT  a table with no predecessor: a bucket
      both orders measured >= 1 % slower than the heuristic takes the heuristic's pair, with the tuner's
      own timing of that pair at that T (refused when the tuner did not time it).
"""
import json
import sys


def rows(path):
    by = {}
    for r in json.load(open(path))["rows"]:
        by.setdefault(r["tokens"], {})["new" if r["library"] == "default" else "old"] = r
    return by


def changes(a_path, b_path):
    """{T: (change in order a, change in order b, same pair, old pair)}; b's labels are swapped."""
    a, b = rows(a_path), rows(b_path)
    out = {}
    for t in sorted(a.keys() & b.keys()):
        new_a, old_a, old_b, new_b = a[t]["new"], a[t]["old"], b[t]["new"], b[t]["old"]
        out[t] = (new_a["median_us"] / old_a["median_us"] - 1, new_b["median_us"] / old_b["median_us"] - 1,
                  new_a["kernels"] == old_a["kernels"], tuple(old_a["kernels"].split(",")))
    return out


def confirmed(ca, cb, same):
    return same or (ca <= -0.01 and cb <= -0.01)


if __name__ == "__main__":
    verdict = changes(sys.argv[1], sys.argv[2])
    for t, (ca, cb, same, _) in verdict.items():
        print(f"T={t:6d}  {ca * 100:+6.1f} %  {cb * 100:+6.1f} %  mean {(ca + cb) * 50:+6.1f} %"
              + ("  same pair" if same else "  confirmed" if confirmed(ca, cb, same) else ""))
    if len(sys.argv) > 3:
        mode, tuned_path, out_path = sys.argv[3:6]
        table = json.load(open(tuned_path))
        if mode == "--merge":
            old = {int(t) for t in sys.argv[6].split(",")}
            drop = {t for t, (ca, cb, same, _) in verdict.items() if t not in old and not confirmed(ca, cb, same)}
            table["buckets"] = [b for b in table["buckets"] if b["tokens"] not in drop]
            table["measurements"] = [m for m in table["measurements"] if m[0] not in drop]
            print("left out:", sorted(drop))
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
            sys.exit(f"unknown mode {mode}")
        open(out_path, "w").write(json.dumps(table, indent=1) + "\n")
