#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Turn an ovl-bench CSV into a PNG.

    bench/plot.py CSV [-o PNG] [--title TEXT]

The kind of plot follows the CSV's `bench` column:
  latency-hiding    useful CPU utilisation vs payload, one line per variant
                    (send- and receive-triggered panels, plus comm time ratio),
                    and the bound the machine allows when the CSV has it
  callback-latency  added callback delay (p50/p90/p99) vs poll interval, with
                    the CPU the progress thread costs on a second axis
  overview          speedup over MPI blocking and utilisation per payload (and the
                    pair/cascade kernels when present)
  delta             speedup over blocking MPI per kernel, one bar per variant
  delta-sweep       heat maps of the pair speedup over delta size x message size,
                    one per monitor, with the automatic delta size as last column
Plots are made only from the CSV, never by hand (docs/PERFORMANCE.md).
"""
import argparse
import csv
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover - depends on the machine
    sys.stderr.write(
        "plot.py: matplotlib is missing (pip install matplotlib, or apt-get install "
        "python3-matplotlib and run with /usr/bin/python3)\n"
    )
    sys.exit(1)

UTIL_TARGET = {"plain": 0.90, "marshal": 0.75}
CALLBACK_TARGET_US = 50.0


def fnum(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return float("nan")


def size_label(b):
    b = int(b)
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20}M"
    if b >= 1024 and b % 1024 == 0:
        return f"{b >> 10}k"
    return str(b)


def size_axis(ax, sizes, label, rotation=0):
    """A log2 x axis with one tick, labelled KB/MB, per size in @sizes."""
    ticks = sorted(set(sizes))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], rotation=rotation)
    ax.set_xlabel(label)


def by_variant(rows):
    """Rows per variant; an A/B file's `build` column (before/after a change)
    splits each variant in two."""
    out = {}
    for r in rows:
        name = r["variant"] + (f" ({r['build']})" if r.get("build") else "")
        out.setdefault(name, []).append(r)
    for v in out.values():
        v.sort(key=lambda r: int(r["payload_bytes"]))
    return out


OTHER_COLORS = ["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray", "tab:olive",
                "tab:cyan", "tab:pink"]
_assigned = {}


def style(name):
    """ovl variants in blue/orange, every other variant its own colour."""
    before = name.endswith("(before)")
    if name.startswith("ovl-marshal"):
        return dict(color="tab:orange", marker="s", lw=2.2, ls=":" if before else "-")
    if name.startswith("ovl"):
        return dict(color="tab:blue", marker="o", lw=2.5, ls=":" if before else "-")
    if name not in _assigned:
        _assigned[name] = OTHER_COLORS[len(_assigned) % len(OTHER_COLORS)]
    ls = ":" if "marshal" in name else "--"
    return dict(color=_assigned[name], marker="x" if "marshal" in name else ".", ls=ls, lw=1.2)


def bound_line(rows):
    """The useful-CPU bound per payload (column `bound`, newer CSVs), in %."""
    per = {}
    for r in rows:
        v = fnum(r.get("bound"))
        if v == v:
            per.setdefault(int(r["payload_bytes"]), []).append(v)
    xs = sorted(per)
    return xs, [100 * sorted(per[x])[len(per[x]) // 2] for x in xs]


def plot_latency_hiding(rows, out, title):
    hosts = rows[0].get("hosts", "?")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    vs = by_variant(rows)
    top = max([110.0] + [100 * fnum(r[k]) * 1.05 for r in rows for k in ("util_send", "util_recv")
                         if fnum(r[k]) == fnum(r[k])])
    # util below 0 (fixed-work variants slower than blocking MPI) shows down to -100 %
    bottom = max(-100.0, min([0.0] + [100 * fnum(r[k]) * 1.05 for r in rows
                                      for k in ("util_send", "util_recv")
                                      if fnum(r[k]) == fnum(r[k])]))
    for ax, key, what in ((axes[0], "util_send", "send"), (axes[1], "util_recv", "receive")):
        for name, rs in vs.items():
            x = [int(r["payload_bytes"]) for r in rs]
            y = [100 * fnum(r[key]) for r in rs]
            ax.plot(x, y, label=name, **style(name))
        bx, by = bound_line(rows)
        if bx:
            ax.plot(bx, by, color="k", lw=1.5, ls=(0, (4, 2)), marker="_", ms=14,
                    label="bound (nothing polls)")
        ax.axhline(100 * UTIL_TARGET["plain"], color="tab:blue", lw=0.8, ls="-.")
        ax.axhline(100 * UTIL_TARGET["marshal"], color="tab:orange", lw=0.8, ls="-.")
        ax.set_title(f"loop stopped by the {what}")
        ax.set_ylabel("useful CPU utilisation [%]")
        ax.set_ylim(bottom, min(top, 250))
    for name, rs in vs.items():
        x = [int(r["payload_bytes"]) for r in rs]
        y = [fnum(r["comm_send_ms_med"]) / fnum(r["transfer_ms_med"]) for r in rs]
        axes[2].plot(x, y, label=name, **style(name))
    axes[2].axhline(1.0, color="k", lw=0.8)
    axes[2].set_title("communication time: overlapped / alone (send-stopped)")
    axes[2].set_ylabel("ratio")
    axes[2].set_yscale("log")
    for ax in axes:
        size_axis(ax, [int(r["payload_bytes"]) for r in rows], "payload per message [bytes]", 45)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title or f"latency hiding, 2 ranks on {hosts} host(s) "
                 f"(dash-dot: targets 90 % plain, 75 % marshal)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_callback_latency(rows, out, title):
    ovl = sorted((r for r in rows if r["mode"] == "ovl-thread"),
                 key=lambda r: fnum(r["lateness_us"]))
    if not ovl:
        sys.exit("plot.py: no ovl-thread rows in the CSV")
    fig, ax = plt.subplots(figsize=(8, 5))
    x = [fnum(r["lateness_us"]) for r in ovl]
    for q, m in (("p50", "o"), ("p90", "s"), ("p99", "^")):
        ax.plot(x, [fnum(r[f"added_{q}_us"]) for r in ovl], marker=m, label=f"added delay {q}")
    ax.axhline(CALLBACK_TARGET_US, color="r", ls="-.", lw=0.8, label="target 50 us")
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{int(v)}" for v in x])
    ax.set_yscale("symlog", linthresh=100)
    ax.set_xlabel("lateness budget of a continuation, lateness_us (OVL_LATENESS_US)")
    ax.set_ylabel("callback delay after completion [us]")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(x, [100 * fnum(r["cpu_cost"]) for r in ovl], color="k", ls="--", marker="x",
             label="CPU cost (right)")
    spin = [r for r in rows if r["mode"] == "spin-thread"]
    if spin:
        ax2.axhline(100 * fnum(spin[0]["cpu_cost"]), color="gray", ls=":",
                    label=f"spin-thread CPU cost ({100 * fnum(spin[0]['cpu_cost']):.0f} %)")
    ax2.set_ylabel("CPU taken from the main thread's daxpy [%]")
    ax2.set_ylim(bottom=min(0, *[100 * fnum(r["cpu_cost"]) for r in ovl]) - 2)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    hosts = rows[0].get("hosts", "?")
    ax.set_title(title or f"callback delay vs poll interval, 2 ranks on {hosts} host(s)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_overview(rows, out, title):
    ce = [r for r in rows if r["sub"] == "compute+exchange"]
    uc = [r for r in rows if r["sub"] == "useful-cpu"]
    kern = [r for r in rows if r["sub"] in ("pair", "cascade")]
    panels = [p for p in ((ce, "speedup", "speedup over MPI blocking"),
                          (uc, "util_send", "useful CPU (send-stopped) [%]")) if p[0]]
    fig, axes = plt.subplots(1, len(panels) + (1 if kern else 0),
                             figsize=(6.5 * (len(panels) + (1 if kern else 0)), 4.8),
                             squeeze=False)
    axes = list(axes[0])
    if kern:
        kax = axes.pop()
        subs = sorted({r["sub"] for r in kern}, key=["pair", "cascade"].index)
        vs = []
        for r in kern:
            if r["variant"] not in vs:
                vs.append(r["variant"])
        w = 0.8 / max(1, len(vs))
        for i, v in enumerate(vs):
            val = {r["sub"]: fnum(r["speedup"]) for r in kern if r["variant"] == v}
            kax.bar([j + i * w for j in range(len(subs))], [val.get(sb, float("nan")) for sb in subs],
                    w, label=v, color=VARIANT_COLORS.get(v, "tab:gray"))
        kax.set_xticks([j + w * (len(vs) - 1) / 2 for j in range(len(subs))])
        kax.set_xticklabels(subs)
        kax.axhline(1.0, color="k", lw=0.8)
        kax.set_ylabel("speedup over blocking MPI")
        kax.set_title("delta send/receive kernels (400 KB)")
        kax.grid(axis="y", alpha=0.3)
        kax.legend(fontsize=8)
    for ax, (sub, key, ylabel) in zip(axes, panels):
        vs = by_variant(sub)
        sizes = sorted({int(r["payload_bytes"]) for r in sub})
        w = 0.8 / max(1, len(vs))
        for i, (name, rs) in enumerate(vs.items()):
            val = {int(r["payload_bytes"]): fnum(r[key]) for r in rs}
            y = [val.get(s, float("nan")) * (100 if key.startswith("util") else 1)
                 for s in sizes]
            ax.bar([j + i * w for j in range(len(sizes))], y, w, label=name,
                   color=style(name)["color"])
        ax.set_xticks([j + w * (len(vs) - 1) / 2 for j in range(len(sizes))])
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("payload per message")
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    if ce:
        axes[0].axhline(2.0, color="k", ls="-.", lw=0.8)
    fig.suptitle(title or "ovl-bench overview")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


VARIANT_COLORS = {"mpi": "tab:gray", "part": "tab:green", "ovl-os": "tab:blue",
                  "ovl-explicit": "tab:orange"}
KERNEL_ORDER = ["pair", "cascade", "ring", "reduce", "wavefront", "rowreduce", "stencil"]
# the delta send/receive targets (docs/PERFORMANCE.md, issue 3)
DELTA_TARGETS = {("pair", "ovl-os"): 1.5, ("pair", "ovl-explicit"): 1.7,
                 ("cascade", "ovl-os"): 2.5, ("cascade", "ovl-explicit"): 2.5}


def plot_delta(rows, out, title):
    kernels = [k for k in KERNEL_ORDER if any(r["kernel"] == k for r in rows)]
    variants = [v for v in VARIANT_COLORS if any(r["variant"] == v for r in rows)]
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(kernels) + 2), 5))
    w = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        val = {r["kernel"]: r for r in rows if r["variant"] == v}
        xs = [j + i * w for j in range(len(kernels))]
        ys = [fnum(val[k]["speedup"]) if k in val else float("nan") for k in kernels]
        ax.bar(xs, ys, w, label=v, color=VARIANT_COLORS[v])
        for x, k in zip(xs, kernels):
            if k in val and fnum(val[k].get("bound_frac")) > 0:
                ax.annotate(f"{100 * fnum(val[k]['bound_frac']):.0f}%", (x, 0.02),
                            ha="center", va="bottom", fontsize=6, rotation=90, color="white")
    for (k, v), t in DELTA_TARGETS.items():
        if k in kernels and v in variants:
            j = kernels.index(k)
            x = j + variants.index(v) * w
            ax.plot([x - w / 2, x + w / 2], [t, t], color="r", lw=1.5)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + w * (len(variants) - 1) / 2 for j in range(len(kernels))])
    ax.set_xticklabels(kernels)
    ax.set_ylabel("speedup over blocking MPI (median times)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    r0 = rows[0]
    ax.set_title(title or f"delta send/receive kernels: {r0['ranks']} ranks on {r0['hosts']} "
                 f"host(s), {r0['cores']} cores, {size_label(r0['bytes'])} messages\n"
                 f"red: targets; white: share of the ideal pipeline bound reached",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_delta_sweep(rows, out, title):
    mons = [m for m in ("ovl-os", "ovl-explicit") if any(r["monitor"] == m for r in rows)]
    sizes = sorted({int(r["msg_bytes"]) for r in rows if r["monitor"] in mons})
    cfgs = sorted({int(r["delta_cfg"]) for r in rows if r["monitor"] in mons},
                  key=lambda d: (d == 0, d))
    fig, axes = plt.subplots(1, len(mons), figsize=(7 * len(mons), 5.2), squeeze=False)
    vmax = max([fnum(r["speedup"]) for r in rows if r["monitor"] in mons] + [1.0])
    im = None
    for ax, m in zip(axes[0], mons):
        grid = [[float("nan")] * len(cfgs) for _ in sizes]
        for r in rows:
            if r["monitor"] != m:
                continue
            grid[sizes.index(int(r["msg_bytes"]))][cfgs.index(int(r["delta_cfg"]))] = \
                fnum(r["speedup"])
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=vmax)
        for i in range(len(sizes)):
            for j in range(len(cfgs)):
                v = grid[i][j]
                if v == v:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if v < 0.6 * vmax else "black")
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels([size_label(d) if d else "auto" for d in cfgs], rotation=45)
        ax.set_yticks(range(len(sizes)))
        ax.set_yticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("delta size")
        ax.set_ylabel("message size")
        ax.set_title(f"pair, {m}: speedup over blocking MPI")
    fig.colorbar(im, ax=list(axes[0]), shrink=0.9)
    if title:
        fig.suptitle(title)
    fig.savefig(out, dpi=110, bbox_inches="tight")


def plot_wire_cost(rows, out, title):
    """Machine CPU per MB moved, per message size; one line per `build`."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    groups = {}
    for r in rows:
        groups.setdefault(r.get("build") or "run", []).append(r)
    for i, (name, rs) in enumerate(sorted(groups.items())):
        rs.sort(key=lambda r: int(r["msg_bytes"]))
        x = [int(r["msg_bytes"]) for r in rs]
        c = OTHER_COLORS[i % len(OTHER_COLORS)]
        axes[0].plot(x, [fnum(r["machine_cores_med"]) for r in rs], marker="o", color=c,
                     label=name)
        axes[1].plot(x, [fnum(r["mbs_med"]) for r in rs], marker="o", color=c, label=name)
    axes[0].set_ylabel("machine busy during the transfer [cores]")
    axes[1].set_ylabel("rate [MB/s]")
    for ax in axes:
        size_axis(ax, [int(r["msg_bytes"]) for r in rows], "message size")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "what the link costs the CPUs (plain MPI, ovl-bench wire-cost)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


KINDS = {
    "wire-cost": plot_wire_cost,
    "latency-hiding": plot_latency_hiding,
    "callback-latency": plot_callback_latency,
    "overview": plot_overview,
    "delta": plot_delta,
    "delta-sweep": plot_delta_sweep,
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="CSV written by ovl-bench --csv")
    ap.add_argument("-o", "--output", help="PNG to write (default: CSV name with .png)")
    ap.add_argument("--title", help="plot title")
    a = ap.parse_args(argv)
    try:
        with open(a.csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot.py: {e}")
    if not rows or "bench" not in rows[0]:
        sys.exit(f"plot.py: {a.csv}: not an ovl-bench CSV (no 'bench' column or no rows)")
    kind = rows[0]["bench"]
    if kind not in KINDS:
        sys.exit(f"plot.py: {a.csv}: unknown benchmark kind '{kind}'")
    out = a.output or os.path.splitext(a.csv)[0] + ".png"
    KINDS[kind](rows, out, a.title)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
