"""Turn raw results into tables; generate ``benchmarks/RESULTS.md`` and ``ARCHIVE.md`` from ``results/``.

Stdlib only::

    python3 benchmarks/report.py                       # regenerate benchmarks/RESULTS.md and ARCHIVE.md
    python3 benchmarks/report.py --check               # exit 1 if either is not what it generates
    python3 benchmarks/report.py benchmarks/results/2026-12-01-abc1234/   # one folder, to stdout
    python3 benchmarks/report.py --write-folder benchmarks/results/2026-12-01-abc1234/  # its report.md
    python3 benchmarks/report.py old-results.json [...]  # a results file of the older format

A results folder (``run.py`` writes it) holds ``session.json`` and ``runs/*.json``, one file
per workload run. RESULTS.md is one table of the current figures against each peer (``HEADLINE``:
for each kind of comparison, its newest run on each engine); ARCHIVE.md every other table and the
earlier rounds. Every figure in both is computed here from those files (and from the other raw
files in ``benchmarks/results/``); nothing in them is typed by hand.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import harness_report
import round3
from systems import (BASELINES, BENCH_DIR, DATABASE_ENGINES, DEFAULT_SYSTEMS, DEFAULT_WORKLOADS, PEERS, RESULTS_DIR,
                     SUBJECT, SYSTEMS)


@dataclass(frozen=True)
class Metric:
    workload: str
    key: str
    label: str
    unit: str
    better: str | None  # "higher", "lower", or None for information only


# The first rounds' metrics (results files of format 1, e.g. architecture-*.json).
METRICS = LEGACY_METRICS = (
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



# =========================================================================== results folders
# (format 2: run.py writes session.json and runs/*.json; the figures of issue 12)

ENGINE_LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB",
                 "redis": "Redis (Celery, Dramatiq)"}

# (workload, key, label, unit, better)
FOLDER_METRICS = {
    "Enqueue": (
        Metric("enqueue", "jobs_per_s", "Enqueue, one call at a time (N)", "jobs/s", "higher"),
        Metric("enqueue", "raw_commits_per_s", "Raw single-row INSERT + COMMIT on the same database, same run "
               "(Redis: one RPUSH)", "/s", "higher"),
        Metric("enqueue", "pct_of_raw", "Single enqueue as % of the raw commit rate", "%", "higher"),
        Metric("bulk", "jobs_per_s", "Bulk enqueue with the system's bulk API (one call)", "jobs/s", "higher"),
        Metric("bulk", "chunks_calls_per_s", "Celery `chunks` (100 calls per message), for information only",
               "calls/s", None),
    ),
    "Drain": (
        Metric("drain", "jobs_per_s", "Drain N, including start-up (exec to last result)", "jobs/s", "higher"),
        Metric("drain", "steady_jobs_per_s", "Drain N, after the first job", "jobs/s", "higher"),
        Metric("drain_large", "jobs_per_s", "Drain LARGE_N, including start-up", "jobs/s", "higher"),
        Metric("drain_large", "steady_jobs_per_s", "Drain LARGE_N, after the first job", "jobs/s", "higher"),
    ),
    "Latency on an idle cluster": (
        Metric("latency", "visible_p50_ms", "Enqueue call → result visible, p50", "ms", "lower"),
        Metric("latency", "visible_p99_ms", "Enqueue call → result visible, p99", "ms", "lower"),
        Metric("latency", "start_p50_ms", "Enqueue call → task start, p50", "ms", "lower"),
        Metric("latency", "start_after_commit_p50_ms", "Enqueue call's return (commit done) → task start, p50",
               "ms", "lower"),
        Metric("latency", "start_after_commit_p99_ms", "Enqueue call's return (commit done) → task start, p99",
               "ms", "lower"),
    ),
    "Start-up": (
        Metric("startup", "ready_ms", "Exec of the cluster/worker → start of a job queued before", "ms", "lower"),
        Metric("burst", "burst_s", "Burst of one job, exec to exit (`qcluster --burst`, `db_worker --batch`)",
               "s", "lower"),
    ),
    "CPU per 1000 jobs (all processes of the cluster, exited ones included)": (
        Metric("drain", "cpu_s_per_1000", "Drain N, exec to drained", "CPU s", "lower"),
        Metric("drain", "steady_cpu_s_per_1000", "Drain N, after the first job", "CPU s", "lower"),
        Metric("drain_large", "cpu_s_per_1000", "Drain LARGE_N, exec to drained", "CPU s", "lower"),
        Metric("drain_large", "steady_cpu_s_per_1000", "Drain LARGE_N, after the first job", "CPU s", "lower"),
    ),
    "SCALE_ROWS finished rows against an empty table (same run, `save_limit` 0 in both)": (
        Metric("scale", "empty_steady_jobs_per_s", "Empty table: drain N, after the first job", "jobs/s", "higher"),
        Metric("scale", "steady_jobs_per_s", "SCALE_ROWS finished rows: drain N, after the first job", "jobs/s",
               "higher"),
        Metric("scale", "steady_ratio", "Drain after the first job, SCALE_ROWS rows / empty (per run)", "×",
               "higher"),
        Metric("scale", "empty_jobs_per_s", "Empty table: drain N, including start-up", "jobs/s", "higher"),
        Metric("scale", "jobs_per_s", "SCALE_ROWS finished rows: drain N, including start-up", "jobs/s", "higher"),
        Metric("scale", "empty_visible_p50_ms", "Empty table: enqueue → result visible p50 (after the drain)",
               "ms", "lower"),
        Metric("scale", "visible_p50_ms", "SCALE_ROWS finished rows: enqueue → result visible p50 (after the "
               "drain)", "ms", "lower"),
        Metric("scale", "visible_p50_ratio", "Result visible p50, SCALE_ROWS rows / empty (per run)", "×", "lower"),
        Metric("scale", "empty_visible_p99_ms", "Empty table: enqueue → result visible p99", "ms", "lower"),
        Metric("scale", "visible_p99_ms", "SCALE_ROWS finished rows: enqueue → result visible p99", "ms", "lower"),
    ),
    "Memory after a drain of N jobs (every process of the cluster's tree)": (
        Metric("memory", "pss_2w_mb", "PSS summed over the tree, 2 workers (one thread each)", "MiB", "lower"),
        Metric("memory", "pss_16t_mb", "PSS summed over the tree, 16 threads", "MiB", "lower"),
        Metric("memory", "rss_2w_mb", "RSS summed over the tree (shared pages counted in every process), "
               "2 workers, for information", "MiB", None),
        Metric("memory", "rss_16t_mb", "RSS summed over the tree, 16 threads, for information", "MiB", None),
    ),
    "Older workloads (first round)": tuple(m for m in LEGACY_METRICS if m.workload in ("mixed", "idle_cpu", "rss")),
}


def load_folder(folder: Path) -> dict:
    """Return session.json of ``folder`` with its runs (``records``, in run order) and name."""
    folder = Path(folder)
    data = json.loads((folder / "session.json").read_text())
    records = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    data["records"] = sorted(records, key=lambda r: r.get("seq", 0))
    data["folder"] = folder
    return data


def _values(data: dict, engine: str, system: str, workload: str, key: str):
    """Return (stats over the ok runs, reason when the system reported n/a)."""
    values, reason = [], None
    for rec in data["records"]:
        if (rec.get("ok") and rec["engine"] == engine and rec["system"] == system
                and rec["workload"] == workload):
            value = (rec.get("metrics") or {}).get(key)
            if value is not None:
                values.append(value)
            elif (rec.get("details") or {}).get("na"):
                reason = rec["details"]["na"]
            elif workload == "memory":  # one configuration n/a: details[<config>]["na"]
                config = (rec.get("details") or {}).get(key.split("_")[1]) or {}
                reason = config.get("na") or reason
    return stats(values), reason


def folder_cell(data: dict, engine: str, system: str, m: Metric) -> str:
    engines = SYSTEMS[system].engines_for(data["engines"]) if system in SYSTEMS else data["engines"]
    if engine not in engines:
        return "—"
    if m.workload not in data["workloads"]:
        return "not run"
    s, reason = _values(data, engine, system, m.workload, m.key)
    if s is None and m.better is None:
        return "—"  # information only, measured for some systems
    if s is None:
        if reason:
            return f"n/a: {reason}"
        failed = [r for r in data["records"] if r["engine"] == engine and r["system"] == system
                  and r["workload"] == m.workload and not r.get("ok")]
        return "n/a: every run failed" if failed else "n/a"
    text = cell(s)
    rounds = data["options"].get("runs", 1)
    if s["runs"] < rounds:
        text += f" [{s['runs']} of {rounds} runs]"
    return text


def _engines_present(data: dict) -> list[str]:
    present = {r["engine"] for r in data["records"]}
    return [e for e in ENGINE_LABELS if e in present]


def _label(m: Metric, data: dict) -> str:
    o = data["options"]
    return (m.label.replace("LARGE_N", f"N={o.get('large_n')}").replace("(N)", f"(N={o.get('n')})")
            .replace("Drain N,", f"Drain N={o.get('n')},").replace("drain N,", f"drain N={o.get('n')},")
            .replace("SCALE_ROWS", f"{o.get('scale_rows', 0):,}"))


def metric_tables(data: dict, level: int = 2) -> list[str]:
    engines = _engines_present(data)
    systems = [s for s in data["systems"] if s in SYSTEMS]
    lines = []
    for group, metrics in FOLDER_METRICS.items():
        metrics = [m for m in metrics if m.workload in data["workloads"]]
        if not metrics:
            continue
        title = group.replace("SCALE_ROWS", f"{data['options'].get('scale_rows', 0):,}")
        lines += ["", f"{'#' * (level + 1)} {title}"]
        if group.startswith("SCALE_ROWS"):
            lines += ["", "Run for django_taskmq only: the fill is one INSERT ... SELECT written for its table."]
        for m in metrics:
            row_cells = {s: [folder_cell(data, e, s, m) for e in engines] for s in systems}
            if all(c in ("—", "not run") or c.startswith("n/a") for cs in row_cells.values() for c in cs) \
                    and m.better is None:
                continue
            arrow = {"higher": " (higher is better)", "lower": " (lower is better)"}.get(m.better, "")
            lines += ["", f"**{_label(m, data)}**, {m.unit}{arrow}", "",
                      "| system | " + " | ".join(ENGINE_LABELS[e] for e in engines) + " |",
                      "|---|" + "---|" * len(engines)]
            notes: list[str] = []
            for system in systems:
                if m.workload == "scale" and system != SUBJECT:
                    continue  # django_taskmq only (see the group's note)
                shown = []
                for c in row_cells[system]:
                    if c.startswith("n/a: "):
                        reason = c[len("n/a: "):]
                        if reason not in notes:
                            notes.append(reason)
                        c = f"n/a ({notes.index(reason) + 1})"
                    shown.append(c)
                lines.append(f"| {SYSTEMS[system].label} | " + " | ".join(shown) + " |")
            if notes:
                lines += [""] + [f"({i}) {reason}  " for i, reason in enumerate(notes, 1)]
    return lines


def _median(data, engine, system, workload, key):
    s, _ = _values(data, engine, system, workload, key)
    return s["median"] if s else None


def target_table(data: dict) -> list[str]:
    """Issue 12's targets against django_taskmq's medians (computed, never typed)."""
    if SUBJECT not in data["systems"]:
        return []
    engines = [e for e in ("sqlite", "postgresql") if e in data["engines"]]
    o = data["options"]

    def med(engine, workload, key, system=SUBJECT):
        return _median(data, engine, system, workload, key)

    def check(value, op, limit):
        if value is None:
            return None
        return value >= limit if op == ">=" else value <= limit

    rows = []  # (target, {engine: (value text, met)})

    def add(target, per_engine):
        rows.append((target, per_engine))

    def simple(target, workload, key, op, limits, unit, fmt_value=fmt):
        per = {}
        for e, limit in zip(("sqlite", "postgresql"), limits):
            if e in engines:
                v = med(e, workload, key)
                per[e] = (f"{fmt_value(v)} {unit}" if v is not None else "n/a", check(v, op, limit))
        add(target, per)

    n, large = o.get("n"), o.get("large_n")
    simple(f"Drain after the first job ≥ 10,000 / 6,000 jobs/s (N={n})", "drain", "steady_jobs_per_s",
           ">=", (10000, 6000), "jobs/s")
    simple(f"Drain after the first job ≥ 10,000 / 6,000 jobs/s (N={large})", "drain_large", "steady_jobs_per_s",
           ">=", (10000, 6000), "jobs/s")
    simple(f"Drain including start-up ≥ 7,000 / 4,500 jobs/s (N={large})", "drain_large", "jobs_per_s",
           ">=", (7000, 4500), "jobs/s")
    simple("Enqueue → result visible p50 ≤ 5 ms", "latency", "visible_p50_ms", "<=", (5, 5), "ms")
    celery = _median(data, "redis", "celery", "latency", "visible_p50_ms")
    per = {}
    for e in engines:
        v = med(e, "latency", "visible_p50_ms")
        per[e] = (f"{fmt(v)} vs Celery {fmt(celery)} ms" if v is not None and celery is not None else "n/a",
                  (v < celery) if v is not None and celery is not None else None)
    add("Enqueue → result visible p50 below Celery + Redis's", per)
    simple("Enqueue → result visible p99 ≤ 15 ms", "latency", "visible_p99_ms", "<=", (15, 15), "ms")
    simple("Task start within 2 ms of the commit (p50 of start − enqueue call's return)", "latency",
           "start_after_commit_p50_ms", "<=", (2, 2), "ms")
    simple("Single enqueue ≥ 85 % of the raw single-row commit rate", "enqueue", "pct_of_raw", ">=", (85, 85), "%")
    simple("`qcluster` ready to run its first job ≤ 250 ms after exec", "startup", "ready_ms", "<=", (250, 250), "ms")
    simple("`--burst` of one job end to end ≤ 0.6 s", "burst", "burst_s", "<=", (0.6, 0.6), "s")
    for workload in ("drain_large", "drain"):
        per = {}
        for e in engines:
            ours = med(e, workload, "steady_cpu_s_per_1000")
            peers = {s: _median(data, pe, s, workload, "steady_cpu_s_per_1000") for s in data["systems"]
                     if s != SUBJECT and s in SYSTEMS for pe in SYSTEMS[s].engines_for([e])}
            peers = {s: v for s, v in peers.items() if v is not None}
            if ours is None or not peers:
                per[e] = ("n/a", None)
                continue
            best = min(peers, key=peers.get)
            per[e] = (f"{fmt(ours)} s; lowest peer {best} {fmt(peers[best])} s", ours < peers[best])
        size = large if workload == "drain_large" else n
        add(f"CPU per 1000 jobs the lowest of all systems (drain N={size}, after the first job)", per)
    if "scale" in data["workloads"]:
        per_drain, per_lat = {}, {}
        for e in engines:
            full, empty = med(e, "scale", "steady_jobs_per_s"), med(e, "scale", "empty_steady_jobs_per_s")
            ratio_value = med(e, "scale", "steady_ratio")
            per_drain[e] = (f"{fmt(full)} vs {fmt(empty)} jobs/s: ratio {ratio_value:.2f}" if ratio_value else "n/a",
                            check(ratio_value, ">=", 0.9))
            full, empty = med(e, "scale", "visible_p50_ms"), med(e, "scale", "empty_visible_p50_ms")
            ratio_value = med(e, "scale", "visible_p50_ratio")
            per_lat[e] = (f"{fmt(full)} vs {fmt(empty)} ms: ratio {ratio_value:.2f}" if ratio_value else "n/a",
                          check(ratio_value, "<=", 1.1))
        rows_label = f"{o.get('scale_rows', 0):,} finished rows"
        add(f"{rows_label}: drain after the first job (N={n}) within 10 % of an empty table "
            f"(median of the per-run ratios)", per_drain)
        add(f"{rows_label}: result visible p50 within 10 % of an empty table (median of the per-run ratios)",
            per_lat)
    word = {True: "yes", False: "**no**", None: "n/a"}
    lines = ["", "| target | " + " | ".join(f"{ENGINE_LABELS[e]} (median)" for e in engines)
             + " | " + " | ".join(f"met on {ENGINE_LABELS[e]}?" for e in engines) + " |",
             "|---|" + "---|" * (2 * len(engines))]
    for target, per in rows:
        lines.append(f"| {target} | " + " | ".join(per.get(e, ("n/a", None))[0] for e in engines) + " | "
                     + " | ".join(word[per.get(e, ("n/a", None))[1]] for e in engines) + " |")
    return lines


# Issue 25 on MariaDB: each figure against django-q2 (10x for the drain) and the best peer on the
# same server in the same run: (workload, key, label, unit, better).
MARIADB_FIGURES = (
    ("enqueue", "jobs_per_s", "Enqueue, one call at a time (N)", "jobs/s", "higher"),
    ("drain", "steady_jobs_per_s", "Drain N, after the first job", "jobs/s", "higher"),
    ("drain", "jobs_per_s", "Drain N, including start-up", "jobs/s", "higher"),
    ("drain_large", "steady_jobs_per_s", "Drain LARGE_N, after the first job", "jobs/s", "higher"),
    ("drain_large", "jobs_per_s", "Drain LARGE_N, including start-up", "jobs/s", "higher"),
    ("latency", "visible_p50_ms", "Enqueue call → result visible, p50", "ms", "lower"),
    ("latency", "visible_p99_ms", "Enqueue call → result visible, p99", "ms", "lower"),
    ("latency", "start_after_commit_p50_ms", "Enqueue call's return → task start, p50", "ms", "lower"),
    ("startup", "ready_ms", "Exec → start of a job queued before", "ms", "lower"),
    ("drain", "cpu_s_per_1000", "CPU per 1000 jobs, drain N, exec to drained", "CPU s", "lower"),
    ("drain", "steady_cpu_s_per_1000", "CPU per 1000 jobs, drain N, after the first job", "CPU s", "lower"),
)
DJANGOQ2 = ("djangoq2", "djangoq2-tuned")


def mariadb_targets(data: dict) -> list[str]:
    """Issue 25's goals on MariaDB, computed from the medians of one results folder.

    The drain (after the first job, and with start-up) at least 10x django-q2's (the better of
    its two variants), and every figure the best of all systems on the same MariaDB.
    """
    engine = "mysql"
    if SUBJECT not in data["systems"] or engine not in _engines_present(data):
        return []
    peers = [s for s in data["systems"] if s != SUBJECT and s in SYSTEMS
             and engine in SYSTEMS[s].engines_for(data["engines"])]
    word = {True: "yes", False: "**no**", None: "n/a"}
    lines = ["", "| figure (MariaDB) | django_taskmq (median) | best peer on MariaDB (median) | django_taskmq / "
             "best peer | best of all? | django-q2's best (median) | django_taskmq / django-q2 | ≥ 10x "
             "django-q2? |", "|---|---|---|---|---|---|---|---|"]
    for workload, key, label, unit, better in MARIADB_FIGURES:
        if workload not in data["workloads"]:
            continue
        ours = _median(data, engine, SUBJECT, workload, key)
        values = {s: _median(data, engine, s, workload, key) for s in peers}
        values = {s: v for s, v in values.items() if v is not None}
        pick = max if better == "higher" else min
        best = pick(values, key=values.get) if values else None
        q2 = {s: values[s] for s in DJANGOQ2 if s in values}
        q2_best = pick(q2, key=q2.get) if q2 else None
        if ours is None:
            continue
        arrow = "↑" if better == "higher" else "↓"
        row = [f"{_label(Metric(workload, key, label, unit, better), data)}, {unit} {arrow}", fmt(ours)]
        if best is None:
            row += ["n/a", "n/a", "n/a"]
        else:
            met = ours > values[best] if better == "higher" else ours < values[best]
            row += [f"{best} {fmt(values[best])}", ratio({"median": ours}, {"median": values[best]}), word[met]]
        if q2_best is None:
            row += ["n/a", "n/a", "n/a"]
        else:
            factor = ours / q2[q2_best] if q2[q2_best] else None
            tenfold = (factor >= 10 if factor is not None else None) if better == "higher" \
                and workload in ("drain", "drain_large") else "—"
            row += [f"{q2_best} {fmt(q2[q2_best])}", ratio({"median": ours}, {"median": q2[q2_best]}),
                    tenfold if tenfold == "—" else word[tenfold]]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Ratios are django_taskmq's median / the other's (below 1 is better for ↓ figures: latency, "
              "start-up, CPU). The 10x goal is the drain's (jobs/s); \"—\": no factor is asked of that figure. "
              "django-q2's best is the better of `djangoq2` and `djangoq2-tuned`."]
    return lines


# Issue 30's memory goal: the cluster's PSS within this factor of the lowest of every peer.
MEMORY_GOAL = 1.5
MEMORY_CONFIGS = (("2w", "2 workers (one thread each)"), ("16t", "16 threads"))


def _memory_processes(data: dict, engine: str, system: str, config: str) -> list[tuple[str, dict]]:
    """Per process of the tree (by role, in start order): stats of its PSS over the runs."""
    per_role: dict[str, list[float]] = {}
    for rec in data["records"]:
        if (rec.get("ok") and rec["engine"] == engine and rec["system"] == system
                and rec["workload"] == "memory"):
            processes = (rec.get("details") or {}).get(config, {}).get("processes", [])
            total = {r: sum(1 for p in processes if p["role"] == r) for r in {p["role"] for p in processes}}
            counts: dict[str, int] = {}
            for p in processes:
                counts[p["role"]] = counts.get(p["role"], 0) + 1
                role = p["role"] if total[p["role"]] == 1 else f"{p['role']} {counts[p['role']]}"
                per_role.setdefault(role, []).append(p["pss_mb"])
    return [(role, stats(values)) for role, values in per_role.items()]


# Peers whose whole cluster is one asyncio process (their concurrency inside it), against the
# others' separate worker processes; the goal line names the lowest of the others as well.
ONE_PROCESS = ("procrastinate", "oban")


def _short(system: str) -> str:
    """The system's label without its parenthesis, and its name where two labels would clash."""
    short = SYSTEMS[system].label.split(" (")[0]
    clash = [s for s in SYSTEMS if SYSTEMS[s].label.split(" (")[0] == short]
    return f"{short} (`{system}`)" if len(clash) > 1 else short


def memory_goal(data: dict) -> list[str]:
    """Issue 30: cluster PSS against the lowest of every peer (ratio, goal met or not), and
    django_taskmq's per process. Computed from the memory workload's runs."""
    if "memory" not in data["workloads"]:
        return []
    systems = [s for s in data["systems"] if s in SYSTEMS]
    lines = ["", f"Goal: django_taskmq's cluster PSS within {MEMORY_GOAL:g}x of the lowest peer's, after a drain "
                 f"of N={data['options'].get('n')} jobs. Every (system, engine) cell, lowest first; the ratio is "
                 "the cell's median over the lowest median of the configuration."]
    for config, title in MEMORY_CONFIGS:
        cells = []
        for system in systems:
            for engine in SYSTEMS[system].engines_for(data["engines"]):
                s, _ = _values(data, engine, system, "memory", f"pss_{config}_mb")
                if s is not None:
                    cells.append((s["median"], system, engine, s))
        if not cells:
            continue
        cells.sort(key=lambda c: c[0])
        lowest = cells[0][0]
        lines += ["", f"**PSS at {title}**, MiB (lower is better)", "",
                  "| system | engine | PSS | × lowest |", "|---|---|---|---|"]
        for median, system, engine, s in cells:
            lines.append(f"| {_short(system)} | {ENGINE_LABELS[engine]} | {cell(s)} | {median / lowest:.2f}× |")
        forked = [c for c in cells if c[1] not in ONE_PROCESS and c[1] != SUBJECT]
        ours = [c for c in cells if c[1] == SUBJECT]
        for median, _, engine, _ in ours:
            ratio_ = median / lowest
            verdict = "met" if ratio_ <= MEMORY_GOAL else "not met"
            line = (f"* {title}, {ENGINE_LABELS[engine]}: django_taskmq {fmt(median)} MiB = {ratio_:.2f}× the "
                    f"lowest ({_short(cells[0][1])}, {ENGINE_LABELS[cells[0][2]]}, {fmt(lowest)} MiB): goal ≤ "
                    f"{MEMORY_GOAL:g}× **{verdict}**")
            if forked and cells[0][1] in ONE_PROCESS:
                f_median, f_system, f_engine, _ = forked[0]
                line += (f"; against the lowest peer that runs separate worker processes as ours does "
                         f"({_short(f_system)}, {ENGINE_LABELS[f_engine]}, {fmt(f_median)} MiB): "
                         f"{median / f_median:.2f}×")
            lines.append(line + ".")
    if SUBJECT in systems:
        lines += ["", "**django_taskmq per process** (PSS, MiB, median (min–max) over the runs; roles by spawn "
                      "order under the sentinel)", "",
                  "| engine | configuration | " + "processes |", "|---|---|---|"]
        for engine in SYSTEMS[SUBJECT].engines_for(data["engines"]):
            for config, title in MEMORY_CONFIGS:
                procs = _memory_processes(data, engine, SUBJECT, config)
                if procs:
                    lines.append(f"| {ENGINE_LABELS[engine]} | {title} | "
                                 + "; ".join(f"{role}: {cell(s)}" for role, s in procs) + " |")
    return lines


def run_lists(data: dict, level: int = 2) -> list[str]:
    """Failed and retried runs; the foreign CPU load of every run."""
    records = data["records"]
    lines = ["", f"{'#' * (level + 1)} Runs, failures and foreign load", ""]
    failed = [r for r in records if not r.get("ok")]
    retried = [r for r in records if r.get("failed_attempts")]
    skipped = [r for r in records if r.get("ok") and not r.get("load") and (r.get("details") or {}).get("na")]
    lines.append(f"{len(records)} (round, engine, system, workload) cells: {len(skipped)} n/a without running "
                 f"anything (reasons in the tables above), {len(records) - len(skipped)} runs; {len(failed)} "
                 f"failed (after retries), {len(retried)} needed a retry.")
    if failed:
        lines += ["", "Failed runs (not in the numbers):", ""]
        lines += [f"- #{r.get('seq')} {r['engine']} {r['system']} {r['workload']} round {r['run']}: "
                  f"{(r.get('error') or '?').splitlines()[0][:300]}" for r in failed]
    if retried:
        lines += ["", "Runs retried (the failed attempts are not in the numbers):", ""]
        lines += [f"- #{r.get('seq')} {r['engine']} {r['system']} {r['workload']} round {r['run']}: "
                  + "; ".join(a["error"][:200] for a in r["failed_attempts"]) for r in retried]
    loads = [r["load"]["foreign_cores"] for r in records if (r.get("load") or {}).get("foreign_cores") is not None]
    cores = next((r["load"]["cores"] for r in records if r.get("load")), None)
    if loads:
        heavy = sum(1 for x in loads if x >= 0.5)
        lines += ["", f"Foreign CPU load during the runs (machine busy time from /proc/stat minus the "
                      f"benchmark's own processes and the database servers' sampled work for it, in cores "
                      f"of {cores}): median {fmt(statistics.median(loads))}, max {fmt(max(loads))}; "
                      f"{heavy} of {len(loads)} runs had ≥ 0.5 core of foreign load. The table below "
                      f"lists every run in the order it ran.", ""]
    lines += ["<details><summary>Every run (n/a cells left out): order, duration, CPU load (cores)</summary>", "",
              "| # | round | engine | system | workload | ok | wall s | busy | own | db servers | foreign |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        load = r.get("load") or {}
        if r in skipped:
            continue
        lines.append(f"| {r.get('seq')} | {r['run']} | {r['engine']} | {r['system']} | {r['workload']} | "
                     f"{'yes' if r.get('ok') else 'FAILED'}{' (retried)' if r.get('failed_attempts') else ''} | "
                     f"{fmt(load.get('wall_s'))} | {fmt(load.get('busy_cores'))} | {fmt(load.get('own_cores'))} | "
                     f"{fmt(load.get('server_cores'))} | {fmt(load.get('foreign_cores'))} |")
    lines += ["", "</details>"]
    return lines


def _link(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(base).resolve()))
    except ValueError:
        import os

        return os.path.relpath(Path(path).resolve(), Path(base).resolve())


def folder_markdown(data: dict, link_base: Path = BENCH_DIR, level: int = 2) -> str:
    """The markdown of one results folder; links relative to ``link_base``."""
    folder = Path(data["folder"])
    rel = _link(folder, link_base)
    tree = data.get("working_tree") or {}
    o = data["options"]
    head = "#" * level
    lines = [f"{head} Issue 12 benchmark: [`{rel}/`]({rel}/)", ""]
    changed = tree.get("uncommitted") or []
    code = f"commit `{tree.get('head', '?')[:12]}`"
    if tree.get("exported"):
        code += (f" (\"{tree['exported'].get('subject', '')}\"), exported with `git archive` and installed in "
                 f"its own venv: uncommitted edits of the working tree were not measured")
    elif changed:
        code += f", with {len(changed)} uncommitted file(s) of django_taskmq in the working tree: " + \
                ", ".join(f"`{c}`" for c in changed)
    else:
        code += " (the working tree, with no uncommitted change to django_taskmq)"
    lines += [
        f"* **Results folder:** [`{rel}/`]({rel}/) (`session.json` and one JSON file per run in `runs/`); "
        f"every figure below is computed from it by `python3 benchmarks/report.py`.",
        f"* **Code measured (`taskmq`):** {code}.",
        f"* **Command:** `{data['command']}` ({data.get('mode', '?')} mode), "
        f"{data['started']} to {data.get('finished', '(unfinished)')} (machine time, UTC).",
        f"* **Rounds:** {o.get('runs')}; each round runs every (engine, system, workload) once, in an order "
        f"shuffled with seed {data.get('seed')} (the order is in `session.json`). Cells are median (min–max) "
        f"over the successful runs; \"[k of n runs]\" marks a cell with fewer.",
        f"* **Sizes:** N={o.get('n')} (enqueue, drain, scale), LARGE_N={o.get('large_n')}, bulk "
        f"{o.get('bulk_n')}, latency up to {o.get('latency_jobs')} jobs {o.get('latency_gap_ms'):g} ms apart "
        f"and for at most {o.get('latency_max_seconds'):g} s, {o.get('startup_repeats')} cluster starts per "
        f"start-up and burst run (their median is the run's value), {o.get('scale_rows', 0):,} finished rows "
        f"for scale.",
        "* **Machine:** " + ", ".join(f"{k} {v}" for k, v in data["machine"].items()) + ".",
    ]
    if o.get("large_skip"):
        lines.append(f"* **Reduced:** drain at N={o.get('large_n')} was not run for {o['large_skip']}: "
                     f"{o.get('large_skip_reason') or 'no reason given'}.")
    for venv, per_engine in data.get("versions", {}).items():
        merged: dict = {}
        for info in per_engine.values():
            merged.update(info)
        merged.pop("django_taskmq path", None)
        lines.append(f"* **venv-{venv}:** " + ", ".join(f"{k} {v}" for k, v in merged.items()) + ".")
    lines += ["* **Systems:** " + "; ".join(f"`{s}` = {SYSTEMS[s].label}" for s in data["systems"]
                                            if s in SYSTEMS) + ". Settings: `benchmarks/projects/`."]
    if any(e in _engines_present(data) for e in ("sqlite", "postgresql")):
        lines += ["", f"{head}# Targets of issue 12 (django_taskmq)"] + target_table(data)
    if "mysql" in _engines_present(data):
        lines += ["", f"{head}# Issue 25 on MariaDB: against django-q2 and the best peer"] + mariadb_targets(data)
    if "memory" in data["workloads"]:
        lines += ["", f"{head}# Memory against every peer (issue 30)"] + memory_goal(data)
    lines += metric_tables(data, level)
    plots = sorted(folder.glob("*.png"))
    if plots:
        lines += ["", f"{head}# Plots", ""]
        lines += [f"![{p.stem}]({_link(p, link_base)})" for p in plots]
    lines += run_lists(data, level)
    return "\n".join(lines) + "\n"


def text_summary(data: dict) -> str:
    """A short plain-text table for the terminal: the medians of every metric."""
    out = []
    engines = _engines_present(data)
    systems = [s for s in data["systems"] if s in SYSTEMS]
    for group, metrics in FOLDER_METRICS.items():
        for m in metrics:
            if m.workload not in data["workloads"]:
                continue
            cells = []
            for s in systems:
                for e in engines:
                    if e in SYSTEMS[s].engines_for(data["engines"]):
                        med_value = _median(data, e, s, m.workload, m.key)
                        if med_value is not None:
                            cells.append(f"{s}/{e[:2]} {fmt(med_value)}")
            if cells:
                out.append(f"{_label(m, data)[:60]:<60} {m.unit:>7}: " + ", ".join(cells))
    return "\n".join(out)


# --------------------------------------------------------------------------- RESULTS.md

ROUND_ONE = "results/round-1-report.md"
COMMENTARY = "results/architecture-flow-notes.md"


def result_folders() -> list[Path]:
    return sorted(p.parent for p in RESULTS_DIR.glob("*/session.json"))


ROUND3_TITLES = {
    "latency": "Idle latency at equal durability: Celery on a Redis that fsyncs every write",
    "enqueue": "Single enqueue against the Django ORM's create of the same row, and the peers' single enqueue",
    "ready": "Ready time of the cluster against a bare django.setup() and one query",
}


def _round3_sections() -> list[str]:
    """Issue 30's comparisons (``round3.py``): one section per raw file, goals computed."""
    # round3-<part>.json, then the labelled runs of the part (round3.py --label: round3-<part>-<label>.json).
    found = [(part, path) for part in ROUND3_TITLES
             for path in sorted(RESULTS_DIR.glob(f"round3-{part}*.json"), key=lambda p: (len(p.name), p.name))]
    if not found:
        return []
    lines = ["Measured with `python3 benchmarks/round3.py` (how: its docstring); each table is "
             "`python3 benchmarks/round3.py --report benchmarks/results/<file>`. Cells: median (min–max) over the "
             "interleaved rounds."]
    for part, path in found:
        raw = json.loads(path.read_text())
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            round3.report(raw)
        label = path.stem[len(f"round3-{part}"):].lstrip("-")
        lines += ["", f"### {ROUND3_TITLES[part]}{f' ({label})' if label else ''}", "",
                  f"Raw results: [`results/{path.name}`](results/{path.name}).", "", buffer.getvalue().rstrip()]
    return lines


def _older_sections() -> list[str]:
    """The other scripts' raw files in benchmarks/results/ and the earlier rounds, rendered or linked."""
    lines = [f"* **First performance round** (before the architecture issue): [`{ROUND_ONE}`]({ROUND_ONE}), "
             "**not re-derivable: raw results were not committed**. Kept verbatim as that round's record.",
             f"* The commentary written by hand beside the two sections below, when they were produced, "
             f"is kept verbatim in [`{COMMENTARY}`]({COMMENTARY}); the tables here are generated.", ""]
    arch = RESULTS_DIR / "architecture-before-after.json"
    if arch.exists():
        lines += ["### Hardening and architecture rounds against 356699f",
                  "", f"Raw results: [`results/{arch.name}`](results/{arch.name}); generated with "
                  f"`python3 benchmarks/report.py benchmarks/results/{arch.name}`.", ""]
        lines += _demote(markdown(json.loads(arch.read_text())), 4)
    rerun = RESULTS_DIR / "architecture-latency-rerun.json"
    if rerun.exists():
        lines += ["", f"SQLite latency rerun, raw results [`results/{rerun.name}`](results/{rerun.name}):", ""]
        lines += _demote(markdown(json.loads(rerun.read_text())), 4)
    flow_json = RESULTS_DIR / "flow.json"
    if flow_json.exists():
        import flow

        buffer = io.StringIO()
        rows = json.loads(flow_json.read_text())["rows"]
        with contextlib.redirect_stdout(buffer):
            flow.report(rows, sorted({r["engine"] for r in rows}, reverse=True))
        lines += ["", "### Flow control: its cost on the hot path, and rate-limit accuracy", "",
                  f"Raw results: [`results/{flow_json.name}`](results/{flow_json.name}); generated with "
                  f"`python3 benchmarks/flow.py --report benchmarks/results/{flow_json.name}` (measured with "
                  f"`.venv/bin/python benchmarks/flow.py --runs 3`). Cells: median (min-max).",
                  buffer.getvalue().rstrip()]
    # Scripts with a report(rows) of their own: (raw file, module, title, how it was measured).
    scripted = (
        ("threads.json", "threads", "Threads per worker: I/O-bound and no-op tasks, beside Celery's threads pool "
         "and Dramatiq", ".venv/bin/python benchmarks/threads.py --runs 3"),
        ("prefetch.json", "prefetch", "Prefetch on the hot path: no-op drain with prefetch 0 and 16",
         ".venv/bin/python benchmarks/prefetch.py --runs 3 (round two's version)"),
        ("prefetch-long.json", "prefetch", "Prefetch 4 (the default) against 0: the no-op drain, and short "
         "tasks queued behind a long one", ".venv/bin/python benchmarks/prefetch.py --runs 3"),
        ("pgbouncer_wakeup.json", "pgbouncer_wakeup", "Wake-up of an idle cluster on PostgreSQL: direct, and "
         "through PgBouncer (transaction mode) without and with listen_database",
         ".venv/bin/python benchmarks/pgbouncer_wakeup.py --runs 3 --samples 40"),
        ("wakeups.json", "wakeups", "One round trip back to back and after an idle gap: the steps an idle job's "
         "way is made of", ".venv/bin/python benchmarks/wakeups.py --runs 3 --samples 100"),
        ("memory-floor.json", "memory_floor", "The memory under any Django queue: one process at each step of "
         "becoming a Django program that spoke to its database, and one forked child",
         ".venv/bin/python benchmarks/memory_floor.py --runs 3"),
        ("held_keys.json", "held_keys", "A backlog held behind a busy concurrency key: a look and a claim, "
         "before and after the key's running jobs were counted by the key (295 running on 8 keys, 20,000 held)",
         ".venv/bin/python benchmarks/held_keys.py --runs 3 --ref b2d3f10"),
        ("durable-sleepers.json", "durable_sleepers", "Claims beside 1,000 to 100,000 sleeping durable jobs "
         "(PostgreSQL): none, SUSPENDED, and QUEUED for later, timed by the client and by the server",
         ".venv/bin/python benchmarks/durable_sleepers.py --sleeping 1000,10000,100000 --claims 100 --runs 3"),
        ("drift-postgresql.json", "drift", "Claim latency as the job table fills: the first and the last 30 s, "
         "autovacuum off and on (issue 50)",
         ".venv/bin/python benchmarks/drift.py --engines postgresql --autovacuum off,on --ref 5179cf4"),
        ("drift-sqlite-mysql.json", "drift", "Claim latency as the job table fills, SQLite and MariaDB (issue 50)",
         ".venv/bin/python benchmarks/drift.py --engines sqlite,mysql --seconds 90"),
        ("growth.json", "growth", "Cost as work grows: 1,000 queues with work in 10, and 100,000 delayed jobs "
         "not yet due, each against its small case (issue 50)",
         ".venv/bin/python benchmarks/growth.py --runs 2 --engines sqlite, then --engines postgresql,mysql"),
        ("clusters-postgresql.json", "clusters", "Several clusters of 2 workers draining one backlog on one "
         "PostgreSQL (issue 50)", ".venv/bin/python benchmarks/clusters.py --runs 1 --jobs 4000"))
    for name, module, title, measured in scripted:
        raw_path = RESULTS_DIR / name
        if raw_path.exists():
            script = importlib.import_module(module)
            raw = json.loads(raw_path.read_text())
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                script.report(raw["rows"])
            load = ("foreign load below" if any("foreign_cores" in r for r in raw["rows"])
                    else "foreign load was not recorded by these scripts")
            lines += ["", f"### {title}", "",
                      f"Raw results: [`results/{name}`](results/{name}) (commit {raw.get('commit', '?')}, "
                      f"{raw.get('date', '?')}, {raw.get('runs', '?')} interleaved runs); generated with "
                      f"`python3 benchmarks/{module}.py --report benchmarks/results/{name}` (measured with "
                      f"`{measured}`; {load}). Cells: median (min-max).",
                      "", buffer.getvalue().rstrip()]
    fan_in = RESULTS_DIR / "fan_in.json"
    if fan_in.exists():
        import fan_in as fan_in_script

        raw = json.loads(fan_in.read_text())
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            fan_in_script.report(raw)
        lines += ["", f"### Workflows: a {raw['n']}-step fan-in against Celery's chord, and a {raw['big_n']:,}-step "
                      "enqueue", "",
                  f"Raw results: [`results/{fan_in.name}`](results/{fan_in.name}); generated with "
                  f"`python3 benchmarks/fan_in.py --report benchmarks/results/{fan_in.name}` (measured with "
                  f"`python3 benchmarks/fan_in.py --runs {raw['runs']}`; how: the script's docstring). "
                  "Cells: median (min-max).", "", buffer.getvalue().rstrip()]
        profile = RESULTS_DIR / (raw.get("profile") or "")
        if raw.get("profile") and profile.exists():
            text = profile.read_text()
            lines += ["", f"Where django_taskmq's {raw['big_n']:,}-step enqueue spends its time: one more enqueue "
                          f"under cProfile ([`results/{profile.name}`](results/{profile.name}), top entries by "
                          "cumulative time):", "", "```", text.split("\n\n--- sorted by tottime")[0].rstrip(), "```"]
    for raw_path in sorted(RESULTS_DIR.glob("retention-claims-*.json")):
        raw = json.loads(raw_path.read_text())
        label = f", {raw['label']}" if raw.get("label") else ""
        lines += ["", f"### Claims beside {raw['finished_rows']:,} finished jobs, and retention deleting them "
                      f"({raw['engine']}{label})", "",
                  f"Raw results: [`results/{raw_path.name}`](results/{raw_path.name}) (commit {raw['commit']}, "
                  f"{raw['runs']} runs of {raw['claims_per_run']} claims each, an empty and a full database "
                  f"interleaved); measured with `.venv/bin/python benchmarks/retention_claims.py --engine "
                  f"{raw['engine']} --finished {raw['finished_rows']} --runs {raw['runs']}"
                  f"{' --reuse-fill --label ' + raw['label'] if raw.get('label') else ''}`. One claim is one "
                  "`reserve` of one job; cells: median (min-max) over the runs, ms.", "",
                  "| job table | claim p50 | claim p99 |", "|---|---|---|"]
        labels = {"empty": "empty", "finished": "with the finished rows",
                  "deleting": "with the finished rows, retention deleting them",
                  "empty_beside_deleting": "empty, beside the deleting database"}
        for name, label in labels.items():
            runs = raw["per_run"].get(name, [])
            lines.append(f"| {label} | {cell(stats([r['p50'] for r in runs]))} | "
                         f"{cell(stats([r['p99'] for r in runs]))} |")
        lines += ["", f"Retention deleted {cell(stats(raw['delete_rows_per_second']))} rows a second meanwhile "
                      "(one cluster, with the code of the commit named above)."]
    for raw_path in sorted(RESULTS_DIR.glob("scale-retention-*.json")):
        lines += _scale_retention_section(raw_path)
    memory = RESULTS_DIR / "result_memory.json"
    if memory.exists():
        raw = json.loads(memory.read_text())
        by_size: dict = {}
        for row in raw["rows"]:
            by_size.setdefault(row["size"], []).append(row)
        lines += ["", "### Peak memory of a cluster recording one large result", "",
                  f"Raw results: [`results/{memory.name}`](results/{memory.name}), measured with "
                  "`.venv/bin/python benchmarks/result_memory.py` (see `docs/settings.rst`). Peak RSS "
                  "(VmHWM) summed over the cluster's processes, and of its largest process; median (min-max) "
                  "of the runs.", "", "| result size (bytes) | state | runs | sum of peaks, MiB | largest process, MiB |",
                  "|---|---|---|---|---|"]
        for size, rows_ in sorted(by_size.items()):
            sums, maxes = stats([r["sum_mib"] for r in rows_]), stats([r["max_mib"] for r in rows_])
            lines.append(f"| {size} | {', '.join(sorted({r['state'] for r in rows_}))} | {len(rows_)} | "
                         f"{cell(sums)} | {cell(maxes)} |")
    where = RESULTS_DIR / "memory-latest.json"
    if where.exists():
        import memory as memory_script

        lines += ["", "### Where the memory goes: an idle cluster's PSS by process", ""]
        lines += memory_script.markdown(json.loads(where.read_text()))
    shown = {"architecture-before-after.json", "memory-latest.json", FLOOR_SHAPE, "architecture-latency-rerun.json", "flow.json", "threads.json",
             "fan_in.json", "fan_in-profile.txt",
             *(name for name, *_ in scripted),
             *(p.name for p in RESULTS_DIR.glob("retention-claims-*.json")),
             *(p.name for p in RESULTS_DIR.glob("scale-retention-*.json")),
             "result_memory.json", Path(ROUND_ONE).name, Path(COMMENTARY).name, "drain-sqlite.png",
             "drain-postgresql.png", *(p.name for p in RESULTS_DIR.glob("round3-*"))}
    dashboards = sorted(RESULTS_DIR.glob("dashboard-*.txt"))
    shown.update(p.name for p in dashboards)
    others = sorted(p for p in RESULTS_DIR.iterdir() if p.is_file() and p.name not in shown)
    if dashboards:
        lines += ["", "### Operator read queries and admin pages on large job tables", "",
                  "Raw output of `.venv/bin/python benchmarks/dashboard.py --engine <engine>`, as committed:", ""]
        for path in dashboards:
            lines += [f"* [`results/{path.name}`](results/{path.name}):", "", "```",
                      path.read_text().rstrip(), "```", ""]
    if others:
        lines += ["", "### Other raw results in `results/`", "",
                  "Committed by other benchmark scripts of `benchmarks/`; each script's docstring says how "
                  "it measured them and how to print their tables:", ""]
        lines += [f"* [`results/{p.name}`](results/{p.name})" for p in others]
    return lines


#: Issue 30's goal: drain and visible p99 with the big table within this fraction of the empty one's.
SCALE_TOLERANCE = 0.10


def _pooled_p99(samples: list[float]) -> float | None:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else None


def _scale_retention_section(raw_path: Path) -> list[str]:
    """Issue 30: drain and visible latency beside millions of finished rows that retention is deleting,
    against an empty table (``scale_retention.py``), with the goal's met/not met computed per code
    (the working tree, and ``--ref``'s commit when it ran beside it)."""
    raw = json.loads(raw_path.read_text())
    label = f", {raw['label']}" if raw.get("label") else ""
    runs = raw["runs"]
    codes = {"worktree": f"{raw['commit']}{' + uncommitted changes' if raw.get('dirty') else ''}"}
    if raw.get("ref"):
        codes["ref"] = f"{raw['ref']} (`--ref`)"
    if raw.get("pruning_off"):
        codes["off"] = f"{raw['commit']} with pruning off (`--pruning-off`: {json.dumps(raw['pruning_off'])})"
    lines = ["", f"### Scale: {raw['finished_rows']:,} finished jobs with retention deleting them "
                 f"({raw['engine']}{label})", "",
             f"Raw results: [`results/{raw_path.name}`](results/{raw_path.name}) ({raw['date']}, "
             f"{raw['rounds']} rounds; in each, every size, table and code once, every other round in the "
             f"reverse order); measured with `.venv/bin/python benchmarks/"
             f"{raw['command'].split('benchmarks/', 1)[-1]}`. The clusters ran: "
             + ", ".join(f"{k} = {v}" for k, v in codes.items())
             + (f" (uncommitted: {', '.join(raw['dirty'])})" if raw.get("dirty") else "")
             + (". `VACUUM (ANALYZE)` of the job table before every run (autovacuum is off on this server)"
                if raw.get("vacuum") else "")
             + f". Settings {json.dumps(raw['settings'])}, retention the default, so the cluster's monitor "
             "deletes old rows all through every run on the full table. Drain: N queued jobs, from the "
             "cluster's exec to none pending, and after the first job; visible: "
             f"{raw['probe_jobs']} jobs one at a time in the same cluster, enqueue call to the row "
             "SUCCEEDED. Cells: median (min-max) over the rounds.", "",
             "| code | N | job table | drain jobs/s | after the first job, jobs/s | visible p50 ms | "
             "visible p99 ms | visible p99 ms, the rounds' samples pooled | rows pruned in the run | "
             "rows in the table | foreign load, cores of 2 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    names = {"empty": "empty", "full": f"filled with {raw['finished_rows']:,}"}
    by: dict[tuple, list] = {}
    for r in runs:
        by.setdefault((r.get("code", "worktree"), r["n"], r["database"]), []).append(r)
    goals = []
    for code in codes:
        for n in raw["sizes"]:
            for which in ("empty", "full"):
                rs = by.get((code, n, which), [])
                lines.append(f"| {code} | {n} | {names[which]} | " + " | ".join(
                    cell(stats([r[k] for r in rs])) for k in ("jobs_per_s", "steady_jobs_per_s", "visible_p50_ms",
                                                              "visible_p99_ms"))
                    + f" | {fmt(_pooled_p99([v for r in rs for v in r['visible_ms']]))} | "
                    + " | ".join(cell(stats([r[k] for r in rs])) for k in ("pruned_rows", "rows_before"))
                    + f" | {cell(stats([r['load']['foreign_cores'] for r in rs]))} |")
            empty, full = by.get((code, n, "empty"), []), by.get((code, n, "full"), [])
            for key, word, higher_better in (("jobs_per_s", "drain", True),
                                             ("steady_jobs_per_s", "drain after the first job", True),
                                             ("visible_p99_ms", "visible p99", False)):
                e, f = stats([r[key] for r in empty]), stats([r[key] for r in full])
                if not e or not f:
                    continue
                value = f["median"] / e["median"]
                met = value >= 1 - SCALE_TOLERANCE if higher_better else value <= 1 + SCALE_TOLERANCE
                rounds_e = {r["round"]: r[key] for r in empty}
                paired = stats([r[key] / rounds_e[r["round"]] for r in full if rounds_e.get(r["round"])])
                goals.append(f"| {code} | {n} | {word} | {value:.2f} | {cell(paired)} | "
                             f"{'>= 0.90' if higher_better else '<= 1.10'} | {'met' if met else 'not met'} |")
    lines += ["", "Issue 30's goal, full / empty (the ratio of the medians; beside it the same ratio round by "
                  "round, median (min-max)):", "", "| code | N | figure | full / empty | per round | goal | |",
              "|---|---|---|---|---|---|---|", *goals]
    if raw.get("note"):
        lines += ["", f"Note: {raw['note']}."]
    if raw.get("failed"):
        lines += ["", "Failed attempts (each retried once): " + "; ".join(
            f"round {f['round']} {f['code']} {f['database']} N={f['n']}: {f['error'][:120]}" for f in raw["failed"])]
    return lines


def _demote(text: str, level: int) -> list[str]:
    """Return markdown lines with headings pushed down to at least ``level``."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            line = "#" * max(hashes + level - 2, level) + line[hashes:]
        out.append(line)
    return out


# --------------------------------------------------------------------------- RESULTS.md: the headline
# One table of the current figures against each peer. "Current": for each kind of comparison, the
# newest run of that kind on each engine; every row comes from one run, so the systems in a row
# met the same machine, and its key says which run.

# The peers as the headline's columns, in PEERS' order, with short names.
HEADLINE_PEERS = {"djangoq2": "django-q2", "djangoq2-tuned": "django-q2, CONN_MAX_AGE=60", "dtdb": "django-tasks-db",
                  "celery": "Celery (Redis)", "celery-durable": "Celery, Redis fsync always",
                  "dramatiq": "Dramatiq (Redis)", "procrastinate": "Procrastinate", "oban": "oban-py",
                  "steady-queue": "Steady Queue"}

# kind: what ran, as the sources list names it.
KINDS = {"peers": "`run.py` with every Python peer (issue 30)",
         "default": "`run.py`'s full mode: the default systems and workloads (issue 12)",
         "round3-enqueue": "`round3.py`: every peer's single enqueue (issue 30)",
         "round3-latency": "`round3.py`: idle latency at equal durability (issue 30)"}

# (kind, figure): the rows, in order, one per engine the kind's newest runs measured. A round3.py part
# stands as the workload; {n}, {large_n}, {bulk_n} in a label are the run's sizes.
HEADLINE = (
    ("peers", Metric("enqueue", "jobs_per_s", "Single enqueue, {n} calls", "jobs/s", "higher")),
    ("round3-enqueue", Metric("enqueue", "jobs_per_s", "Single enqueue, {n} calls", "jobs/s", "higher")),
    ("peers", Metric("bulk", "jobs_per_s", "Bulk enqueue of {bulk_n} in one call", "jobs/s", "higher")),
    ("peers", Metric("drain", "steady_jobs_per_s", "Drain {n} queued, after the first job", "jobs/s", "higher")),
    ("peers", Metric("drain", "jobs_per_s", "Drain {n} queued, including start-up", "jobs/s", "higher")),
    ("default", Metric("drain_large", "steady_jobs_per_s", "Drain {large_n} queued, after the first job", "jobs/s",
                       "higher")),
    ("peers", Metric("drain", "steady_cpu_s_per_1000", "CPU per 1000 jobs, drain {n} after the first job", "CPU s",
                     "lower")),
    ("peers", Metric("latency", "visible_p50_ms", "Idle cluster: enqueue → result visible, p50", "ms", "lower")),
    ("round3-latency", Metric("latency", "visible_p50_ms", "Idle cluster: enqueue → result visible, p50", "ms",
                              "lower")),
    ("peers", Metric("latency", "visible_p99_ms", "Idle cluster: enqueue → result visible, p99", "ms", "lower")),
    ("round3-latency", Metric("latency", "visible_p99_ms", "Idle cluster: enqueue → result visible, p99", "ms",
                              "lower")),
    ("peers", Metric("startup", "ready_ms", "Exec of the cluster → a queued job starts", "ms", "lower")),
    ("peers", Metric("memory", "pss_2w_mb", "Cluster PSS after the drain, 2 workers", "MiB", "lower")),
)


@dataclass
class Source:
    """One run the headline takes rows from: a results folder or a round3.py file."""
    kind: str
    path: Path
    date: str
    commit: str
    runs: int
    sizes: dict
    stats: dict  # (engine, system, workload, key) -> stats over the ok runs (``aggregate``)
    systems: set
    engines: set  # database engines django_taskmq was measured on
    foreign: list  # foreign load of every run, cores


def _source(kind: str, path: Path, records: list[dict], **fields) -> Source:
    return Source(kind=kind, path=path, stats=aggregate(records), systems={r["system"] for r in records},
                  engines={r["engine"] for r in records if r["system"] == SUBJECT} & set(DATABASE_ENGINES),
                  foreign=[r["load"]["foreign_cores"] for r in records
                           if (r.get("load") or {}).get("foreign_cores") is not None], **fields)


def _folder_source(kind: str, folder: Path) -> Source:
    data = load_folder(folder)
    o = data["options"]
    return _source(kind, folder, data["records"], date=data["started"][:16] + " UTC",
                   commit=(data.get("working_tree") or {}).get("head", "?")[:7], runs=o.get("runs", 1),
                   sizes={"n": o.get("n"), "large_n": o.get("large_n"), "bulk_n": o.get("bulk_n")})


def _round3_source(path: Path) -> Source:
    raw = json.loads(path.read_text())
    # The paired runs (a variant) are the comparison with the ORM's create, not a peer's enqueue.
    records = [{**r, "workload": raw["part"]} for r in raw["rows"] if not r.get("variant")]
    return _source(f"round3-{raw['part']}", path, records, date=raw["date"], commit=raw["commit"],
                   runs=raw["runs"], sizes={"n": raw["options"]["n"]})


def _folder_kinds(session: dict) -> list[str]:
    """The kinds of comparison a results folder is: every peer in one run, the full mode's defaults."""
    systems, workloads = set(session.get("systems", ())), set(session.get("workloads", ()))
    kinds = ["peers"] if set(PEERS) <= systems else []
    if session.get("mode") == "full" and set(DEFAULT_SYSTEMS) <= systems and set(DEFAULT_WORKLOADS) <= workloads:
        kinds.append("default")
    return kinds


def _candidates() -> list[Source]:
    """Every run of a kind the headline shows, oldest first."""
    found = [_folder_source(kind, folder) for folder in result_folders()
             for kind in _folder_kinds(json.loads((folder / "session.json").read_text()))]
    for part in ("enqueue", "latency"):
        found += [_round3_source(p) for p in sorted(RESULTS_DIR.glob(f"round3-{part}*.json"))]
    return sorted(found, key=lambda s: (s.date, s.path.name))


def current_sources() -> dict[tuple[str, str], Source]:
    """{(kind, engine): the newest run of that kind that measured django_taskmq on that engine}."""
    newest = {}
    for source in _candidates():  # oldest first: a newer run replaces an older one
        for engine in source.engines:
            newest[source.kind, engine] = source
    return newest


def _peer_cell(source: Source, peer: str, engine: str, figure: Metric) -> tuple[str, float | None]:
    """(cell, median) of a peer in a row: blank when the peer was not in the run, "—" when it does not
    run on the row's engine; the Redis peers' figure is the same in every engine's row."""
    if peer not in source.systems:
        return "", None
    engines = SYSTEMS[peer].engines
    if engines is not None and engine not in engines:
        if "redis" not in engines:
            return "—", None
        engine = "redis"
    s = source.stats.get((engine, peer, figure.workload, figure.key))
    return (cell(s), s["median"]) if s else ("n/a", None)


def headline_rows(sources: dict[tuple[str, str], Source]) -> tuple[list[str], list[Source]]:
    """The table's rows, and the sources in the order the rows first use them."""
    used: list[Source] = []
    lines = []
    for kind, figure in HEADLINE:
        shown = None  # the label is written once per figure, again only where a run's sizes change it
        for engine in DATABASE_ENGINES:
            source = sources.get((kind, engine))
            ours = source.stats.get((engine, SUBJECT, figure.workload, figure.key)) if source else None
            if ours is None:
                continue
            if source not in used:
                used.append(source)
            peers = {p: _peer_cell(source, p, engine, figure) for p in HEADLINE_PEERS}
            medians = {p: m for p, (_, m) in peers.items() if m is not None}
            versus = ""
            if medians:
                best = (max if figure.better == "higher" else min)(medians, key=medians.get)
                versus = f"{HEADLINE_PEERS[best]}: {ratio(ours, {'median': medians[best]})}"
            arrow = "↑" if figure.better == "higher" else "↓"
            label = f"{figure.label.format(**source.sizes)}, {figure.unit} {arrow}"
            key = chr(ord("A") + used.index(source))
            lines.append(f"| {label if label != shown else ''} | {ENGINE_LABELS[engine]} | {key} | **{cell(ours)}** | "
                         + " | ".join(c for c, _ in peers.values()) + f" | {versus} |")
            shown = label
    return lines, used


def _source_line(key: str, source: Source) -> str:
    rel = source.path.relative_to(BENCH_DIR)
    target = f"{rel}/" if source.path.is_dir() else str(rel)
    engines = ", ".join(ENGINE_LABELS[e] for e in DATABASE_ENGINES if e in source.engines)
    load = "not recorded"
    if source.foreign:
        median = statistics.median(source.foreign)
        # As round3.py flags it: on a loaded machine absolute figures are pessimistic, the row still compares.
        load = (f"{fmt(median)} core (max {fmt(max(source.foreign))})"
                + (": **a loaded machine**, compare within the row" if median > round3.LOADED_CORES else ""))
    return (f"* **{key}**: [`{target}`]({target}): {KINDS[source.kind]}, {source.runs} interleaved rounds, "
            f"{source.date}, code {source.commit}; its rows: {engines}; foreign load median {load}.")


def _slug(title: str) -> str:
    """GitHub's anchor of a heading made of words and punctuation (no links or code)."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


#: The newest run of ``memory.py --floor`` (issue 50), shown in RESULTS.md.
FLOOR_SHAPE = "memory-floor-shape.json"


def _floor_section() -> list[str]:
    """RESULTS.md's section on the cluster's memory against the floor of its own shape."""
    raw_path = RESULTS_DIR / FLOOR_SHAPE
    if not raw_path.exists():
        return []
    import memory as memory_script

    return (["## Memory against the floor of the cluster's shape (issue 50)", ""]
            + memory_script.floor_markdown(json.loads(raw_path.read_text()), FLOOR_SHAPE) + [""])


def results_md(archive_sections: list[str]) -> str:
    rows, used = headline_rows(current_sources())
    head = ["figure", "engine", "run", SYSTEMS[SUBJECT].label, *HEADLINE_PEERS.values(), "django_taskmq / best peer"]
    lines = ["# Benchmark results", "",
             "<!-- Generated by `python3 benchmarks/report.py` from the files in benchmarks/results/: "
             "do not edit by hand; change report.py or run the benchmark again. -->", "",
             "The current figures of django_taskmq against each peer, on this shared 2-core machine: for each kind "
             "of comparison, its newest run on each engine. Each row comes from one run (its letter), so the "
             "systems in a row met the same machine load; compare across a row, not down the table. Cells: "
             "median (min–max) over the run's rounds, generated by `python3 benchmarks/report.py` from the raw "
             "results committed in [`results/`](results/); nothing here is typed by hand. The rows come from:", ""]
    lines += [_source_line(chr(ord("A") + i), source) for i, source in enumerate(used)]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows, "",
              "↑ higher is better, ↓ lower is better. The last column is django_taskmq's median over the best peer "
              "median of the row (of every peer in it, the Redis ones included). Empty: the peer was not in that "
              "row's run; —: it does not run on that engine (the Redis peers' one figure stands in every engine's "
              "row); n/a: it has no such figure or was not run for it (the archive's tables say why). How each "
              "figure is measured: [`README.md`](README.md).", "", *_autovacuum_note()]
    lines += _floor_section()
    lines += harness_report.section()  # the third-party harness's newest run (issue 50)
    lines += ["## Everything else: [`ARCHIVE.md`](ARCHIVE.md)", "",
              "Every table of the runs above, the comparisons not shown here and the earlier rounds, generated "
              "from the same raw results:", ""]
    lines += [f"* [{title}](ARCHIVE.md#{_slug(title)})" for title in archive_sections]
    return "\n".join(lines).rstrip() + "\n"


def _autovacuum_note() -> list[str]:
    """A paragraph on this machine's PostgreSQL, which runs with autovacuum off, and the one latency
    figure measured both ways (``results/drift-postgresql.json``); nothing when that file is absent."""
    path = RESULTS_DIR / "drift-postgresql.json"
    if not path.exists():
        return []
    rows = json.loads(path.read_text())["rows"]  # the first seconds of a new table: every code alike
    p50 = {a: statistics.median(r["first"]["p50"] for r in rows if r["autovacuum"] == a) for a in ("off", "on")
           if any(r["autovacuum"] == a for r in rows)}
    if len(p50) < 2:
        return []
    loads = sorted(r["foreign_cores"] for r in rows)
    return [f"PostgreSQL: this machine's server runs with **autovacuum off** (its CI configuration), which "
            "bears on every PostgreSQL latency figure above (dead rows stay in the job table and its indexes "
            f"until something vacuums them). One figure measured both ways in one run ([`results/{path.name}`]"
            f"(results/{path.name}), jobs sent at up to {rows[0]['rate']:g}/s into a new cluster, the first "
            f"{rows[0]['window']:g} s, median of {len(rows) // 2} runs each, foreign load {loads[0]:g} to "
            f"{loads[-1]:g} cores): enqueue → task start p50 {p50['off']:.1f} ms with autovacuum off, "
            f"{p50['on']:.1f} ms with it on.", ""]


# --------------------------------------------------------------------------- ARCHIVE.md

def archive_md() -> tuple[str, list[str]]:
    """The archive page, and the titles of its sections (RESULTS.md links them)."""
    folders = result_folders()
    lines = ["# Benchmark archive", "",
             "<!-- Generated by `python3 benchmarks/report.py` from the files in benchmarks/results/: "
             "do not edit by hand; change report.py or run the benchmark again. -->", "",
             "Every table behind [`RESULTS.md`](RESULTS.md)'s headline, the other comparisons and the earlier "
             "rounds, generated by `python3 benchmarks/report.py` from the raw results committed in "
             "[`results/`](results/): no figure here is typed by hand. `benchmarks/README.md` says how each "
             "figure is measured. Load on this shared 2-core machine moves figures between runs: compare "
             "systems inside one results folder, and see each folder's foreign-load list. Results folders that "
             "a newer run superseded and nothing rendered were removed from the tree; git keeps them: "
             "`git log --diff-filter=D --name-only --format= -- benchmarks/results | cut -d/ -f3 | sort -u` "
             "lists them, `git show <commit>^:benchmarks/results/<folder>/report.md` shows one."]
    sections: list[str] = []

    def section(title: str) -> list[str]:
        sections.append(title)
        return ["", f"## {title}", ""]

    # The newest complete run (the full mode with every default system and workload), then the newest
    # with every Python peer, then MariaDB's newest if neither had it.
    sessions = {f: json.loads((f / "session.json").read_text()) for f in folders}
    folders = sorted(folders, key=lambda f: sessions[f].get("started", ""))
    complete = [f for f in folders if "default" in _folder_kinds(sessions[f])]
    rendered = []
    if folders:
        latest = (complete or folders)[-1]
        rendered.append(latest)
        lines += section("The newest full-mode run (issue 12)")
        lines.append(folder_markdown(load_folder(latest), link_base=BENCH_DIR, level=3).rstrip())
        with_peers = [f for f in folders if "peers" in _folder_kinds(sessions[f])]
        if with_peers and with_peers[-1] != latest:
            rendered.append(with_peers[-1])
            lines += section("Every Python peer in one run (issue 30)")
            lines.append(folder_markdown(load_folder(with_peers[-1]), link_base=BENCH_DIR, level=3).rstrip())
        with_mysql = [f for f in folders if "mysql" in sessions[f].get("engines", ())]
        if with_mysql and not any("mysql" in sessions[f].get("engines", ()) for f in rendered):
            rendered.append(with_mysql[-1])
            lines += section("MariaDB: the newest results folder with it")
            lines.append(folder_markdown(load_folder(with_mysql[-1]), link_base=BENCH_DIR, level=3).rstrip())
        others = [f for f in reversed(folders) if f not in rendered]
        if others:
            lines += section("Other results folders")
            lines += [f"* [`results/{f.name}/`](results/{f.name}/): `python3 benchmarks/report.py "
                      f"benchmarks/results/{f.name}` renders it." for f in others]
    round_three = _round3_sections()
    if round_three:
        lines += section("Performance round three (issue 30)") + round_three
    lines += section("Other scripts' results and the earlier rounds") + _older_sections()
    return "\n".join(lines).rstrip() + "\n", sections


def pages() -> dict[Path, str]:
    """{path: text} of the two generated pages."""
    archive, sections = archive_md()
    return {BENCH_DIR / "RESULTS.md": results_md(sections), BENCH_DIR / "ARCHIVE.md": archive}


def write_pages() -> list[Path]:
    written = []
    for path, text in pages().items():
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if not argv:
        for path in write_pages():
            print(f"wrote {path}")
        return 0
    if argv == ["--check"]:
        stale = [path.name for path, text in pages().items() if not path.exists() or path.read_text() != text]
        if stale:
            print(f"benchmarks/{' and benchmarks/'.join(stale)} differ from what report.py generates", file=sys.stderr)
            return 1
        return 0
    if argv[0] == "--write-folder" and len(argv) == 2:  # rewrite <folder>/report.md
        folder = Path(argv[1])
        (folder / "report.md").write_text(folder_markdown(load_folder(folder), link_base=folder))
        print(f"wrote {folder / 'report.md'}")
        return 0
    paths = [Path(a) for a in argv]
    if len(paths) == 1 and paths[0].is_dir():
        print(folder_markdown(load_folder(paths[0]), link_base=Path.cwd()))
        return 0
    try:
        data = merge([json.loads(p.read_text()) for p in paths])
    except ValueError as exc:
        print(f"report.py: {exc}", file=sys.stderr)
        return 2
    print(text_table(data))
    print()
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
