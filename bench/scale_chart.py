"""Chart of bench/results/scale.json: python scale_chart.py scale.json scale.png

One panel per figure that must not grow with the number of sandboxes N a
client serves, against N (log scale), one line per client (this commit, the
compared commit, each in warm-pool mode too with --pool, the minimal
client-node baseline); median over repetitions,
whiskers min-max.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [
    ("connect", "connPeak", "API connections, peak during connect-all"),
    ("idle", "connEnd", "API connections after 35 s idle"),
    ("exec", "watchesPeak", "watches open, peak during exec-all"),
    ("create", "lists", "LIST requests, create phase"),
    ("reconnect", "requestsPerCall", "requests per reconnect of a Ready sandbox"),
    ("reconnect", "rssPerSandboxKiB", "client RSS per sandbox, KiB"),
    ("create", "overheadP50Ms", "create+connect overhead over Ready, p50 ms"),
    ("reconnect", "latencyP50Ms", "reconnect latency p50, ms"),
    ("destroy", "wallS", "destroy-all wall time, s"),
]
STYLE = {
    "package": ("#C44E52", "o"),
    "compare": ("#4C72B0", "s"),
    "pool": ("#DD8452", "D"),
    "compare-pool": ("#55A868", "v"),
    "baseline": ("#8C8C8C", "^"),
}


def main(src, out):
    result = json.load(open(src))
    labels = {c["key"]: c["label"] for c in result["meta"]["clients"]}
    fig, axes = plt.subplots(3, 3, figsize=(15, 12))
    for ax, (phase, metric, title) in zip(axes.flat, PANELS):
        for client, by_n in result["figures"].items():
            pts = []
            for n, f in sorted(by_n.items(), key=lambda kv: int(kv[0])):
                s = f["phases"].get(phase, {}).get(metric)
                if s and s.get("median") is not None:
                    pts.append((int(n), s["median"], s["min"], s["max"]))
            if not pts:
                continue
            color, marker = STYLE.get(client, ("black", "x"))
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, capsize=3, label=labels.get(client, client))
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("N sandboxes on one client")
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    m = result["meta"]
    reps = ", ".join(f"N={n}: {r}" for n, r in m["reps"].items())
    fig.suptitle(f"Scale benchmark {m['date'][:10]}: repetitions {reps}; median (min-max)")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
