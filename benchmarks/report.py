"""Turn raw results into min/median/max per metric, ratios, a text and a markdown table.

Stdlib only. Re-render saved results (several files are merged, e.g. one per engine)::

    python3 benchmarks/report.py .work/results-A.json [.work/results-B.json ...] > table.md
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from systems import BASELINES, SUBJECT, SYSTEMS


@dataclass(frozen=True)
class Metric:
    workload: str
    key: str
    label: str
    unit: str
    better: str | None  # "higher", "lower", or None for information only


METRICS = (
    Metric("enqueue", "jobs_per_s", "enqueue one at a time", "jobs/s", "higher"),
    Metric("bulk", "jobs_per_s", "bulk enqueue", "jobs/s", "higher"),
    Metric("drain", "jobs_per_s", "drain N queued (incl. start-up)", "jobs/s", "higher"),
    Metric("drain", "steady_jobs_per_s", "drain N, after the first job", "jobs/s", "higher"),
    Metric("latency", "p50_ms", "idle pickup latency p50", "ms", "lower"),
    Metric("latency", "p95_ms", "idle pickup latency p95", "ms", "lower"),
    Metric("mixed", "critical_p95_ms", "mixed: CRITICAL wait p95", "ms", "lower"),
    Metric("mixed", "normal_p95_ms", "mixed: NORMAL wait p95", "ms", "lower"),
    Metric("mixed", "low_p95_ms", "mixed: LOW wait p95", "ms", "lower"),
    Metric("mixed", "queue_a_share", "mixed: queue a share (3:1 -> 0.75)", "", None),
    Metric("mixed", "jobs_per_s", "mixed: throughput", "jobs/s", "higher"),
    Metric("idle_cpu", "cpu_percent", "idle cluster CPU", "% core", "lower"),
    Metric("rss", "rss_mb", "cluster RSS after draining", "MiB", "lower"),
    Metric("rss", "pss_mb", "cluster PSS after draining", "MiB", "lower"),
)

# django-q2 has no bulk API: its bulk ratio is taken against its one-at-a-time enqueue,
# which is what a django-q2 user has to do to get N jobs in.
FALLBACKS = {("bulk", "jobs_per_s"): ("enqueue", "jobs_per_s")}
FALLBACK_NOTE = "† no bulk API: ratio against its one-at-a-time enqueue"


def stats(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "runs": len(values)}


def aggregate(records: list[dict]) -> dict:
    """Return {(engine, system, workload, key): stats} over the successful runs."""
    values: dict[tuple, list] = {}
    for rec in records:
        if not rec.get("ok"):
            continue
        for key, value in (rec.get("metrics") or {}).items():
            values.setdefault((rec["engine"], rec["system"], rec["workload"], key), []).append(value)
    return {k: stats(v) for k, v in values.items()}


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(s: dict | None) -> str:
    if s is None:
        return "n/a"
    if s["runs"] == 1:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def ratio(subject: dict | None, baseline: dict | None) -> str:
    if not subject or not baseline or not baseline["median"]:
        return "n/a"
    value = subject["median"] / baseline["median"]
    # Three significant digits keep tiny ratios (latency 0.00107x) readable.
    return f"{value:.1f}x" if value >= 10 else f"{value:.3g}x"


def rows(results: dict) -> dict[str, list[list[str]]]:
    """Return table rows per engine: metric, unit, one cell per system, ratios."""
    agg = aggregate(results["records"])
    systems = [s for s in results["systems"] if s in SYSTEMS]
    baselines = [b for b in BASELINES if b in systems and SUBJECT in systems]
    workloads = results["workloads"]
    tables: dict[str, list[list[str]]] = {}
    for engine in results["engines"]:
        table = []
        for m in METRICS:
            if m.workload not in workloads:
                continue
            line = [m.label, f"{m.unit} {'↑' if m.better == 'higher' else '↓' if m.better == 'lower' else ''}".strip()]
            for system in systems:
                line.append(cell(agg.get((engine, system, m.workload, m.key))))
            subject = agg.get((engine, SUBJECT, m.workload, m.key))
            for baseline in baselines:
                base = agg.get((engine, baseline, m.workload, m.key))
                mark = ""
                if base is None and (m.workload, m.key) in FALLBACKS:
                    base = agg.get((engine, baseline, *FALLBACKS[m.workload, m.key]))
                    mark = " †" if base else ""
                line.append(ratio(subject, base) + mark if m.better else "")
            if any(c != "n/a" for c in line[2:2 + len(systems)]):
                table.append(line)
        tables[engine] = table
    return tables


def header(results: dict) -> list[str]:
    systems = [s for s in results["systems"] if s in SYSTEMS]
    baselines = [b for b in BASELINES if b in systems and SUBJECT in systems]
    return ["metric", "unit"] + systems + [f"{SUBJECT}/{b}" for b in baselines]


def provenance(results: dict) -> list[str]:
    """Which code ``taskmq`` and ``taskmq-base`` ran: HEAD (+ uncommitted files), the baseline."""
    lines = []
    systems = results["systems"]
    tree = results.get("working_tree") or {}
    if SUBJECT in systems and tree.get("head"):
        changed = tree.get("uncommitted") or []
        state = "no uncommitted change"
        if changed:
            more = " ..." if len(changed) > 6 else ""
            state = f"{len(changed)} uncommitted: {', '.join(changed[:6])}{more}"
        lines.append(f"{SUBJECT}: working tree at {tree['head'][:12]} ({state})")
    base = results.get("baseline")
    if base and "taskmq-base" in systems:
        lines.append(f"taskmq-base: {base['ref']} = {base['sha'][:12]} \"{base['subject']}\"")
    return lines


def text_table(results: dict) -> str:
    head = header(results)
    out = []
    if "taskmq-base" in results["systems"]:
        out += ["", *provenance(results)]
    for engine, table in rows(results).items():
        widths = [max(len(r[i]) for r in [head] + table) for i in range(len(head))]
        out.append(f"\n== {engine} ==")
        for r in [head] + table:
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(out)


def markdown(results: dict) -> str:
    head = header(results)
    lines = [f"## Results {results['started']}", ""]
    for source in results.get("sources", [results]):
        options = source["options"]
        lines += [
            f"Command: `{source['command']}`  ",
            f"Runs: {options['runs']} interleaved per system; sizes: N={options['n']} (enqueue, "
            f"drain), bulk {options['bulk_n']}, mixed {options['mixed_n']}, RSS after "
            f"{options['rss_n']}, latency {options['latency_jobs']} jobs every "
            f"{options['latency_gap_ms']:.0f} ms, idle CPU over {options['idle_seconds']:.0f} s.  ",
        ]
    lines += [
        f"Cells are median (min–max); ratios are {SUBJECT} median / peer median "
        "(↑ higher is better, ↓ lower is better).",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in results["machine"].items()) + "  ",
    ]
    lines += [line + "  " for line in provenance(results)]
    for venv, per_engine in results.get("versions", {}).items():
        merged: dict = {}
        for info in per_engine.values():
            merged.update(info)
        lines.append(f"venv-{venv}: " + ", ".join(f"{k} {v}" for k, v in merged.items()) + "  ")
    for engine, table in rows(results).items():
        lines += ["", f"### {engine}", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in table]
    if any("†" in c for table in rows(results).values() for r in table for c in r):
        lines += ["", FALLBACK_NOTE]
    failures = [r for r in results["records"] if not r.get("ok")]
    if failures:
        lines += ["", "Failed runs:"]
        lines += [f"- {r['engine']} {r['system']} {r['workload']} run {r['run']}: "
                  f"{r.get('error', '?').splitlines()[0]}" for r in failures]
    retried = [r for r in results["records"] if r.get("failed_attempts")]
    if retried:
        lines += ["", "Passed on a retry (the failed attempt is not in the numbers):"]
        lines += [f"- {r['engine']} {r['system']} {r['workload']} run {r['run']}: "
                  f"{r['failed_attempts'][0]['error']}" for r in retried]
    return "\n".join(lines) + "\n"


def merge(all_results: list[dict]) -> dict:
    """Join results files (e.g. one run per engine) into one report.

    Only compare systems inside one file: numbers from different sessions are not
    comparable, which is why engines are merged but runs are not pooled across files.
    """
    baselines = {r["baseline"]["sha"] for r in all_results if r.get("baseline")}
    if len(baselines) > 1:
        raise ValueError(f"these files used different --baseline commits: {', '.join(sorted(baselines))}")
    merged = dict(all_results[0])
    merged["baseline"] = next((r["baseline"] for r in all_results if r.get("baseline")), None)
    merged["records"] = []
    for key in ("engines", "systems", "workloads"):
        merged[key] = list(dict.fromkeys(x for r in all_results for x in r[key]))
    merged["versions"] = {}
    for results in all_results:
        merged["records"] += results["records"]
        for venv, per_engine in results.get("versions", {}).items():
            merged["versions"].setdefault(venv, {}).update(per_engine)
    if len(all_results) > 1:
        merged["sources"] = [{"command": r["command"], "options": r["options"]} for r in all_results]
        merged["started"] = " / ".join(r["started"] for r in all_results)
    return merged


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python3 benchmarks/report.py results-A.json [results-B.json ...] "
                 "(several files: e.g. one per engine)")
    try:
        data = merge([json.loads(Path(p).read_text()) for p in sys.argv[1:]])
    except ValueError as exc:
        sys.exit(f"report.py: {exc}")
    print(text_table(data))
    print()
    print(markdown(data))
