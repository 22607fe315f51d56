"""Sums an ncu CSV (scripts/gpu-check.sh's profile-*.csv: --csv --page raw with the metric
gpu__time_duration.sum) by kernel: each kernel's share of the time, its calls and its mean.

    python3 tools/ncu_summary.py OUT/profile-big.csv [--from NAME] [--top 40]

--until NAME stops after the first kernel whose name starts with NAME (adamw_multi ends a
training step).
"""
import argparse
import collections
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--until", default="", help="stop after the first kernel whose name starts with this")
    ap.add_argument("--width", type=int, default=90, help="characters of a kernel's name kept")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    head, units, data = rows[start], rows[start + 1], rows[start + 2:]
    ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}[units[ti]]
    tot, cnt = collections.Counter(), collections.Counter()
    n = 0
    for r in data:
        name = r[ki][: args.width]
        tot[name] += float(r[ti].replace(",", "")) * scale
        cnt[name] += 1
        n += 1
        if args.until and r[ki].startswith(args.until):
            break
    total = sum(tot.values())
    print(f"{n} kernels, {total:.2f} ms of kernel time")
    for name, t in tot.most_common(args.top):
        print(f"{100 * t / total:5.1f}% {t:9.3f} ms {cnt[name]:6d} calls {1e3 * t / cnt[name]:9.1f} us/call  {name}")


if __name__ == "__main__":
    main()
