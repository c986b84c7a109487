"""Chart of bench/results/runtimes.json (one column per runtime) or of the
older single-node latest.json: python chart.py runtimes.json runtimes.png

Top: for every operation and metric, how many times better this package is
than each alternative measured in the same run (median of per-repetition
ratios, whiskers = min–max), on a log scale centred on 1 (= same as the
package). Bottom: the lifecycle, with the controller's own Ready time
separated from the provider's share.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"client-node": "#4C72B0", "kubectl": "#DD8452", "floor": "#8C8C8C"}
ALTS = list(COLORS)


def advantage(fig, alt):
    """(median, lo, hi) of 'times better than alt'; None if not measured."""
    r = fig["ratios"].get(alt)
    if not r or not r.get("median"):
        return None
    inv = fig["better"] == "lower"
    med, lo, hi = r["median"], r["min"], r["max"]
    if inv:
        med, lo, hi = 1 / med, 1 / hi, 1 / lo
    return med, lo, hi


def fmt(x):
    return f"{x:.2g}×" if x < 10 else f"{x:.0f}×"


def value_text(f):
    v = (f["values"].get("package") or {}).get("median")
    if v is None:
        return ""
    unit = f["unit"].replace("ms delay", "ms").replace("ms CPU", "ms")
    v = max(v, 0)
    return f"  (package: {v:.0f} {unit})" if v >= 100 else f"  (package: {v:.3g} {unit})"


def ratio_panel(ax, figs):
    # One bold header row per operation, then one row per metric.
    rows = []
    for f in (f for f in figs if any(advantage(f, a) for a in ALTS)):
        if not rows or rows[-1][1]["group"] != f["group"]:
            rows.append(("header", f))
        rows.append(("metric", f))
    h = 0.8 / len(ALTS)
    for i, (kind, f) in enumerate(rows):
        y = len(rows) - 1 - i
        if kind == "header":
            if i:
                ax.axhline(y + 0.5, color="#cccccc", lw=0.8)
            continue
        for j, alt in enumerate(ALTS):
            a = advantage(f, alt)
            if not a:
                continue
            med, lo, hi = a
            yy = y + 0.4 - h * (j + 0.5)
            ax.barh(yy, abs(med - 1), left=min(1, med), height=h * 0.9, color=COLORS[alt])
            if hi > lo:
                ax.errorbar(med, yy, xerr=[[med - lo], [hi - med]], fmt="none", ecolor="black", lw=0.7, capsize=1.5)
            right = med >= 1
            ax.text(max(med, hi) * 1.05 if right else min(med, lo) / 1.05, yy, fmt(med), va="center",
                    ha="left" if right else "right", fontsize=7)
    ax.set_yticks(range(len(rows)))
    labels = [f["group"] if kind == "header" else f"{f['label']}{value_text(f)}" for kind, f in reversed(rows)]
    ax.set_yticklabels(labels, fontsize=8)
    for tick, (kind, _) in zip(ax.get_yticklabels(), reversed(rows)):
        if kind == "header":
            tick.set_fontweight("bold")
            tick.set_fontsize(9)
    ax.set_xscale("log")
    ax.axvline(1, color="black", lw=1)
    bounds = [b for f in figs for a in ALTS if (adv := advantage(f, a)) for b in adv[1:]]
    ax.set_xlim(min(bounds + [0.5]) / 2.5, max(bounds + [2]) * 2.5)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("× better than the alternative  (right of 1: this package is better;  left: worse)\n"
                  "time, memory, event-loop delay: alternative ÷ package;  throughput: package ÷ alternative\n"
                  "bar = median over repetitions of the per-repetition ratio, whiskers = min–max", fontsize=9)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=COLORS[a]) for a in ALTS],
              labels=["vs @kubernetes/client-node", "vs kubectl exec", "vs the floor (bare kube-rs exec)"],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=9, frameon=False)
    ax.grid(axis="x", which="both", color="#eeeeee", lw=0.6)
    ax.set_axisbelow(True)


def lifecycle_panel(ax, life):
    rows = []
    for name in ("sequential", "parallel"):
        part = life.get(name) or {}
        total, ctrl, over = part.get("total"), part.get("controller"), part.get("overhead")
        if total and ctrl and over:
            # Segments: p50 of the controller's time and p50 of the per-claim
            # overhead (claims with timestamps); the label gives the total's p50.
            rows.append((f"create+connect → first exec\n({name}, n={part['n']})", ctrl["p50"], over["p50"], total))
    for key, label in (("resumeToExec", "suspend, then connect (resume) → first exec"), ("suspend", "suspend"),
                       ("destroyGone", "destroy → nothing left (one at a time)"), ("destroyParallelGone", "destroy → nothing left (all at once)")):
        if life.get(key):
            rows.append((f"{label}\n(n={life[key]['n']})", None, life[key]["p50"], life[key]))
    for i, (label, ctrl, rest, total) in enumerate(rows):
        y = len(rows) - 1 - i
        left = 0
        if ctrl is not None:
            ax.barh(y, ctrl, color="#55A868", height=0.6)
            left = ctrl
        ax.barh(y, rest, left=left, color="#C44E52" if ctrl is not None else "#8172B3", height=0.6)
        split = f"  (controller {ctrl:.0f}, provider {rest:.0f})" if ctrl is not None else ""
        ax.text(left + rest, y, f"  p50 {total['p50']:.0f} ms, p99 {total['p99']:.0f}{split}", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("ms (p50)")
    ax.set_xlim(0, max(r[2] + (r[1] or 0) for r in rows) * 1.6 if rows else 1)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#55A868", "#C44E52", "#8172B3")],
              labels=["controller's own Ready time (claim annotations)", "provider's share (create, watch, connect, first exec)", "this package"],
              loc="upper right", fontsize=8)
    ax.set_title("Lifecycle (this package, warm pool)", fontsize=10, loc="left")


def runtimes_chart(data, dst):
    """results/runtimes.json: one column per runtime, ratios on top, lifecycle below."""
    meta, rts = data["meta"], data["runtimes"]
    names = list(rts)
    counts = []
    for name in names:
        measured = [f for f in rts[name]["figures"] if any(advantage(f, a) for a in ALTS)]
        counts.append(len(measured) + len({f["group"] for f in measured}))
    n = max(counts + [1])
    has_life = any(rts[r].get("lifecycle") and not rts[r]["lifecycle"].get("error") for r in names)
    cols = max(len(names), 1)
    fig, axes = plt.subplots(2 if has_life else 1, cols, figsize=(12 * cols, 0.42 * n + (5 if has_life else 2)),
                             gridspec_kw={"height_ratios": [n * 0.42, 3.4]} if has_life else None, squeeze=False)
    for j, name in enumerate(names):
        rt = rts[name]
        ratio_panel(axes[0][j], rt["figures"])
        p = rt.get("placement") or {}
        axes[0][j].set_title(f"{rt['title']}  (pod on {p.get('node')}, RuntimeClass {p.get('runtimeClassName') or 'none'})",
                             fontsize=11, fontweight="bold", pad=28)
        life = rt.get("lifecycle")
        if has_life:
            if life and not life.get("error"):
                lifecycle_panel(axes[1][j], life)
                axes[1][j].set_title(f"Lifecycle on {rt['title']} (this package, warm pool)", fontsize=10, loc="left")
            else:
                axes[1][j].axis("off")
    m, v = meta["machine"], meta["versions"]
    fig.suptitle(f"{v['package'].split(' (')[0]} vs the alternatives, per runtime, same cluster, same run\n"
                 f"{m['nproc']} × {m['cpu']}, {m['memGiB']} GiB · node {v['node']} · kube-apiserver {v['kube-apiserver']} · "
                 f"containerd {v.get('containerd')} · runc {v.get('runc')} · {meta['reps']} repetition(s)"
                 f"{' (quick)' if meta.get('quick') else ''} · {meta['date'][:16]}",
                 fontsize=10)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.9 / height))
    fig.savefig(dst, dpi=90 if cols > 1 else 110)


def main(src, dst):
    data = json.load(open(src))
    if "runtimes" in data:
        return runtimes_chart(data, dst)
    figs, life, meta = data["figures"], data.get("lifecycle"), data["meta"]
    measured = [f for f in figs if any(advantage(f, a) for a in ALTS)]
    n = len(measured) + len({f["group"] for f in measured})
    has_life = bool(life) and not life.get("error")
    fig, axes = plt.subplots(2 if has_life else 1, 1, figsize=(12, 0.42 * n + (5 if has_life else 2)),
                             gridspec_kw={"height_ratios": [max(n, 1) * 0.42, 3.4]} if has_life else None, squeeze=False)
    ratio_panel(axes[0][0], figs)
    m = meta["machine"]
    fig.suptitle(f"{meta['versions']['package'].split(' (')[0]} vs the alternatives, same cluster, same run\n"
                 f"{m['nproc']} × {m['cpu']}, {m['memGiB']} GiB · node {meta['versions']['node']} · "
                 f"kube-apiserver {meta['versions']['kube-apiserver']} · {meta['reps']} repetition(s) · {meta['date'][:16]}",
                 fontsize=10)
    if has_life:
        lifecycle_panel(axes[1][0], life)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.9 / height))  # room for the two-line title
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
