"""Bar chart of drain throughput by system and engine (runs in the ``tools`` venv).

Usage: ``.work/venv-tools/bin/python benchmarks/plot.py results.json [more.json ...] out.png``
(several results files are merged, e.g. one per engine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a server
import matplotlib.pyplot as plt  # noqa: E402

from report import aggregate, merge  # noqa: E402
from systems import SYSTEMS  # noqa: E402


def plot(results: dict, out: Path) -> None:
    agg = aggregate(results["records"])
    engines = results["engines"]
    systems = [s for s in results["systems"] if s in SYSTEMS]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    highest, lowest = 0.0, float("inf")
    for i, system in enumerate(systems):
        medians, errors = [], [[], []]
        for engine in engines:
            s = agg.get((engine, system, "drain", "jobs_per_s"))
            median = s["median"] if s else 0.0
            medians.append(median)
            errors[0].append(median - s["min"] if s else 0)
            errors[1].append(s["max"] - median if s else 0)
            if s:
                highest, lowest = max(highest, s["max"]), min(lowest, s["min"])
        xs = [e + (i - (len(systems) - 1) / 2) * width for e in range(len(engines))]
        bars = ax.bar(xs, medians, width, yerr=errors, capsize=3, label=SYSTEMS[system].label)
        ax.bar_label(bars, labels=[f"{m:.0f}" if m else "" for m in medians], fontsize=8, padding=2)
    # A tenfold gap is the point of the chart: switch to a log axis when bars differ that much.
    if highest and lowest < float("inf") and highest / max(lowest, 1e-9) > 20:
        ax.set_yscale("log")
    ax.set_xticks(range(len(engines)), engines)
    ax.set_ylabel("jobs/s (median, min–max)")
    n = results["options"]["n"]
    ax.set_title(f"Drain {n} queued no-op jobs, 2 workers (incl. start-up)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    *inputs, output = sys.argv[1:]
    plot(merge([json.loads(Path(p).read_text()) for p in inputs]), Path(output))
