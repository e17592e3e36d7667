#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Merge repeated runs of `ovl-bench delta` / `delta-sweep` CSVs into one.

    bench/delta_summary.py CSV... [-o MERGED.csv]

Each CSV is one invocation (one run). The merged CSV has the same columns,
so bench/plot.py draws it; per row:
  time_ms_med   median over the runs of the run's median time
  time_ms_min   smallest run median, time_ms_max the largest
  speedup       median over the runs of the run's speedup over blocking MPI
                (time ratio within a run: the variants ran interleaved)
Prints Markdown tables (docs/PERFORMANCE.md) with the spread of the per-run
speedups, and the issue-3 targets with whether the medians meet them.
"""
import argparse
import csv
import statistics
import sys

KERNEL_ORDER = ["pair", "cascade", "ring", "reduce", "wavefront", "rowreduce", "stencil"]
VARIANTS = ["mpi", "part", "ovl-os", "ovl-explicit"]


def fnum(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return float("nan")


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def size_label(b):
    b = int(b)
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MB"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10} KB"
    return f"{b} B"


def load(paths):
    runs = []
    for p in paths:
        with open(p, newline="") as f:
            rows = list(csv.DictReader(f))
        if rows:
            runs.append(rows)
    if not runs:
        sys.exit("delta_summary.py: no rows")
    return runs


def merge_delta(runs, out):
    keys = []
    groups = {}
    for rows in runs:
        for r in rows:
            k = (r["kernel"], r["variant"])
            if k not in groups:
                keys.append(k)
                groups[k] = []
            groups[k].append(r)
    fields = list(runs[0][0].keys())
    merged = []
    for k in keys:
        g = groups[k]
        m = dict(g[0])
        for col in ("compute_ms", "transfer_ms", "deltas_per_rep", "faults_per_rep",
                    "bound_ms", "bound_inf_ms", "bound_frac", "delta_bytes"):
            m[col] = f"{med([fnum(r[col]) for r in g]):.6g}"
        meds = [fnum(r["time_ms_med"]) for r in g]
        m["time_ms_med"] = f"{med(meds):.6g}"
        m["time_ms_min"] = f"{min(meds):.6g}"
        m["time_ms_max"] = f"{max(meds):.6g}"
        m["speedup"] = f"{med([fnum(r['speedup']) for r in g]):.4f}"
        m["reps"] = str(sum(int(r["reps"]) for r in g))
        merged.append((m, [fnum(r["speedup"]) for r in g]))
    if out:
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for m, _ in merged:
                w.writerow(m)
    r0 = merged[0][0]
    print(f"{len(runs)} runs; {r0['ranks']} ranks on {r0['hosts']} hosts, {r0['cores']} cores, "
          f"{size_label(r0['bytes'])} messages, work {r0['work']}\n")
    print("| kernel | C ms | T ms | " + " | ".join(VARIANTS) + " | bound reached (part / os / explicit) |")
    print("|---|---|---|" + "---|" * len(VARIANTS) + "---|")
    byk = {}
    for m, sps in merged:
        byk.setdefault(m["kernel"], {})[m["variant"]] = (m, sps)
    for k in KERNEL_ORDER:
        if k not in byk:
            continue
        v = byk[k]
        any_row = next(iter(v.values()))[0]
        cells = []
        for var in VARIANTS:
            if var not in v:
                cells.append("–")
                continue
            m, sps = v[var]
            if var == "mpi":
                cells.append(f"{fnum(m['time_ms_med']):.1f} ms")
            else:
                cells.append(f"**{fnum(m['speedup']):.2f}×** ({min(sps):.2f}–{max(sps):.2f})")
        bf = []
        for var in ("part", "ovl-os", "ovl-explicit"):
            if var in v and fnum(v[var][0]["bound_frac"]) > 0:
                bf.append(f"{100 * fnum(v[var][0]['bound_frac']):.0f} %")
        print(f"| {k} | {fnum(any_row['compute_ms']):.2f} | {fnum(any_row['transfer_ms']):.2f} | "
              + " | ".join(cells) + f" | {' / '.join(bf) if bf else '–'} |")
    print("\nTargets (medians over runs):")

    def sp(k, var):
        return fnum(byk[k][var][0]["speedup"]) if k in byk and var in byk[k] else float("nan")

    for k, var, t in (("pair", "ovl-os", 1.5), ("pair", "ovl-explicit", 1.7),
                      ("cascade", "ovl-os", 2.5), ("cascade", "ovl-explicit", 2.5)):
        s = sp(k, var)
        print(f"  {k} {var} >= {t}x: {s:.2f}x {'met' if s >= t else 'NOT met'}")
    slower = []
    for k in KERNEL_ORDER:
        for var in ("ovl-os", "ovl-explicit"):
            if k in byk and var in byk[k] and "part" in byk[k]:
                if fnum(byk[k][var][0]["time_ms_med"]) > fnum(byk[k]["part"][0]["time_ms_med"]):
                    slower.append(f"{k}/{var}")
    print(f"  ovl never slower than part: {'met' if not slower else 'NOT met: ' + ', '.join(slower)}")


def merge_sweep(runs, out):
    groups = {}
    keys = []
    for rows in runs:
        for r in rows:
            k = (r["monitor"], r["delta_cfg"], r["msg_bytes"])
            if k not in groups:
                keys.append(k)
                groups[k] = []
            groups[k].append(r)
    fields = list(runs[0][0].keys())
    merged = {}
    for k in keys:
        g = groups[k]
        m = dict(g[0])
        meds = [fnum(r["time_ms_med"]) for r in g]
        m["time_ms_med"] = f"{med(meds):.6g}"
        m["time_ms_min"] = f"{min(meds):.6g}"
        m["time_ms_max"] = f"{max(meds):.6g}"
        m["mpi_ms_med"] = f"{med([fnum(r['mpi_ms_med']) for r in g]):.6g}"
        m["speedup"] = f"{med([fnum(r['speedup']) for r in g]):.4f}"
        used = sorted((r["delta_used"] for r in g if r["delta_used"]), key=int)
        m["delta_used"] = used[len(used) // 2] if used else ""
        m["reps"] = str(sum(int(r["reps"]) for r in g))
        merged[k] = m
    if out:
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for k in keys:
                w.writerow(merged[k])
    sizes = sorted({int(k[2]) for k in keys})
    cfgs = sorted({int(k[1]) for k in keys if k[0] != "mpi"}, key=lambda d: (d == 0, d))
    print(f"{len(runs)} runs; pair kernel, work {runs[0][0]['work']}\n")
    worst = {}
    for mon in ("ovl-os", "ovl-explicit"):
        print(f"{mon}: speedup over blocking MPI (median of the runs' speedups)\n")
        head = ["message", "mpi ms"] + [size_label(d) if d else "auto" for d in cfgs]
        if 0 in cfgs:
            head += ["auto chose", "auto / best"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for s in sizes:
            mk = ("mpi", "", str(s))
            mpi = fnum(merged[mk]["time_ms_med"]) if mk in merged else float("nan")
            cells = [size_label(s), f"{mpi:.2f}"]
            best = 0.0
            autos = float("nan")
            chose = ""
            for d in cfgs:
                m = merged.get((mon, str(d), str(s)))
                v = fnum(m["speedup"]) if m else float("nan")
                if d and v == v:
                    best = max(best, v)
                if not d and m:
                    autos = v
                    chose = size_label(m["delta_used"]) if m["delta_used"] else "?"
                cells.append(f"{v:.2f}")
            if 0 in cfgs:
                ratio = autos / best if best > 0 else float("nan")
                worst[(mon, s)] = ratio
                cells += [chose, f"{100 * ratio:.0f} %"]
            print("| " + " | ".join(cells) + " |")
        print()
    if worst:
        bad = [f"{m} {size_label(s)} ({100 * r:.0f} %)" for (m, s), r in worst.items()
               if not r >= 0.95]
        print("Target auto >= 95 % of best fixed in every cell: "
              + ("met" if not bad else f"NOT met in {len(bad)} of {len(worst)} cells: "
                 + ", ".join(bad)))


def merge_overview(runs, out):
    groups = {}
    keys = []
    for rows in runs:
        for r in rows:
            if r["sub"] not in ("pair", "cascade"):
                continue
            k = (r["sub"], r["variant"])
            if k not in groups:
                keys.append(k)
                groups[k] = []
            groups[k].append(r)
    print(f"{len(runs)} runs (overview kernels)\n")
    print("| kernel | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---|" * len(VARIANTS))
    for sub in ("pair", "cascade"):
        cells = []
        for var in VARIANTS:
            g = groups.get((sub, var))
            if not g:
                cells.append("–")
            elif var == "mpi":
                cells.append(f"{med([fnum(r['time_ms']) for r in g]):.1f} ms")
            else:
                cells.append(f"{med([fnum(r['speedup']) for r in g]):.2f}×")
        print(f"| {sub} | " + " | ".join(cells) + " |")
    if out:
        fields = list(runs[0][0].keys())
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for k in keys:
                g = groups[k]
                m = dict(g[0])
                m["time_ms"] = f"{med([fnum(r['time_ms']) for r in g]):.6g}"
                m["speedup"] = f"{med([fnum(r['speedup']) for r in g]):.4f}"
                w.writerow(m)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("-o", "--output", help="merged CSV to write")
    a = ap.parse_args(argv)
    runs = load(a.csv)
    kind = runs[0][0].get("bench")
    if kind == "delta":
        merge_delta(runs, a.output)
    elif kind == "delta-sweep":
        merge_sweep(runs, a.output)
    elif kind == "overview":
        merge_overview(runs, a.output)
    else:
        sys.exit(f"delta_summary.py: unknown bench kind {kind!r}")


if __name__ == "__main__":
    main()
