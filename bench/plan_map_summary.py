#!/usr/bin/env python3
"""Merge the CSVs of several `ovl-bench plan map` runs (--csv) into one
judgement: per cell each forced protocol's median over the runs, the best
of them, and the planner's pick (the protocol its automatic plan chose in
most runs); then how many cells the pick is within 5 % of the best, the
worst pick, and each fixed protocol's worst ratio to the best.

    bench/plan_map_summary.py run1.csv run2.csv run3.csv
"""
import csv
import statistics
import sys

PROTOCOLS = ("datatype", "runs", "bbox", "pack")


def main(files):
    cells = {}
    for f in files:
        with open(f, newline="") as fh:
            for r in csv.DictReader(fh):
                if r["kernel"] != "map":
                    continue
                c = cells.setdefault(r["case"], {"pick": []})
                c.setdefault(r["variant"], []).append(float(r["median_us"]))
                if r["variant"] == "auto":
                    c["pick"].append(r["protocol"])
    if not cells:
        sys.exit("plan_map_summary: no map rows in " + ", ".join(files))
    within, worst, fixed = 0, (0.0, ""), {}
    for case, c in cells.items():
        med = {p: statistics.median(c[p]) for p in PROTOCOLS if p in c}
        best = min(med.values())
        pick = max(set(c["pick"]), key=c["pick"].count)
        ratio = med[pick] / best
        within += ratio <= 1.05
        worst = max(worst, (ratio, case))
        for p, m in med.items():
            fixed[p] = max(fixed.get(p, (0.0, "")), (m / best, case))
    n = len(cells)
    print(f"{len(files)} runs, {n} cells: the pick within 5 % of the best in {within} "
          f"({100 * within / n:.0f} %); worst pick {worst[0]:.2f}x ({worst[1]})")
    for p, (r, case) in fixed.items():
        print(f"  {p:8s} forced everywhere: worst {r:.2f}x the best ({case})")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
