"""The plots of a results folder (runs in the ``tools`` venv, which has matplotlib).

Usage: ``.work/venv-tools/bin/python benchmarks/plot.py benchmarks/results/<folder>/``
(``run.py`` calls it at the end). Writes into the folder:

* ``throughput-vs-n.png``: drain throughput (including start-up, and after the first job)
  against the number of jobs, per system and engine; median and min–max of the runs;
* ``latency-cdf.png``: the distribution of enqueue call → result visible over every sample of
  every run, per system and engine;
* ``cpu-per-1000.png``: CPU seconds per 1000 jobs of the cluster's processes (drain after the
  first job, the largest N), median and min–max.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a server
import matplotlib.pyplot as plt  # noqa: E402

from report import ENGINE_LABELS, _engines_present, _values, load_folder  # noqa: E402
from systems import SYSTEMS  # noqa: E402

ENGINE_STYLE = {"sqlite": "-", "postgresql": "--", "mysql": "-.", "redis": ":"}
SHORT = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB", "redis": "Redis"}


def _series(data):
    for system in data["systems"]:
        if system not in SYSTEMS:
            continue
        for engine in SYSTEMS[system].engines_for(data["engines"]):
            if engine in _engines_present(data):
                yield system, engine


def _colors(data):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {s: cycle[i % len(cycle)] for i, s in enumerate(s for s in data["systems"] if s in SYSTEMS)}


def throughput(data, out: Path) -> None:
    sizes = {"drain": data["options"]["n"], "drain_large": data["options"]["large_n"]}
    colors = _colors(data)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    for ax, key, title in ((axes[0], "jobs_per_s", "including start-up"),
                           (axes[1], "steady_jobs_per_s", "after the first job")):
        for system, engine in _series(data):
            xs, ys, lo, hi = [], [], [], []
            for workload, n in sizes.items():
                s, _ = _values(data, engine, system, workload, key)
                if s:
                    xs.append(n)
                    ys.append(s["median"])
                    lo.append(s["median"] - s["min"])
                    hi.append(s["max"] - s["median"])
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=colors[system],
                            linestyle=ENGINE_STYLE[engine], label=f"{system} ({SHORT[engine]})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("jobs queued before the cluster starts (N)")
        ax.set_title(f"Drain, {title}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("jobs/s (median, min–max)")
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle("Throughput against N: no-op jobs, 2 workers", fontsize=11)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def latency_cdf(data, out: Path) -> None:
    colors = _colors(data)
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    plotted = False
    for system, engine in _series(data):
        samples = []
        for rec in data["records"]:
            if rec.get("ok") and rec["workload"] == "latency" and rec["system"] == system and rec["engine"] == engine:
                samples += (rec.get("details") or {}).get("visible_ms") or []
        if not samples:
            continue
        samples.sort()
        ys = [(i + 1) / len(samples) for i in range(len(samples))]
        ax.step(samples, ys, where="post", color=colors[system], linestyle=ENGINE_STYLE[engine],
                label=f"{system} ({SHORT[engine]}, {len(samples)} jobs)")
        plotted = True
    if plotted:
        ax.set_xscale("log")
    ax.set_xlabel("enqueue call → result visible (ms, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Latency distribution on an idle cluster (all runs pooled)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def cpu(data, out: Path) -> None:
    """Grouped bars: per system and engine, one bar per drain size that was measured."""
    sizes = [(w, data["options"]["n" if w == "drain" else "large_n"]) for w in ("drain", "drain_large")
             if w in data["workloads"]]
    colors = _colors(data)
    groups = []
    for system, engine in _series(data):
        bars = []
        for workload, n in sizes:
            s, _ = _values(data, engine, system, workload, "steady_cpu_s_per_1000")
            bars.append((n, s))
        if any(s for _, s in bars):
            groups.append((f"{system}\n{SHORT[engine]}", colors[system], bars))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(groups) + 2), 4.5), dpi=110)
    width = 0.8 / max(len(sizes), 1)
    hatches = ["", "//"]
    values = []
    for i, (label, color, bars) in enumerate(groups):
        for j, (n, s) in enumerate(bars):
            if not s:
                continue
            x = i + (j - (len(sizes) - 1) / 2) * width
            bar = ax.bar([x], [s["median"]], width, yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                         capsize=3, color=color, hatch=hatches[j % 2], edgecolor="black", linewidth=0.5)
            ax.bar_label(bar, labels=[f"{s['median']:.2f}"], fontsize=6, padding=2)
            values.append(s["median"])
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=7)
    ax.set_ylabel("CPU seconds per 1000 jobs (median, min–max)")
    legend = " / ".join(f"{'plain' if j % 2 == 0 else 'hatched'}: N={n}" for j, (_, n) in enumerate(sizes))
    ax.set_title(f"CPU of all the cluster's processes, drain after the first job ({legend})", fontsize=9)
    if values and max(values) / max(min(values), 1e-9) > 30:
        ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(folder: Path) -> None:
    data = load_folder(folder)
    throughput(data, folder / "throughput-vs-n.png")
    latency_cdf(data, folder / "latency-cdf.png")
    cpu(data, folder / "cpu-per-1000.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
