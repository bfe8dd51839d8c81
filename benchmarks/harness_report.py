"""Tables of the third-party harness's runs (issue 50), from the raw files ``harness_adapter/run.py`` committed.

Stdlib only::

    python3 benchmarks/harness_report.py                 # the newest harness results folder, to stdout
    python3 benchmarks/harness_report.py FOLDER          # one folder

``report.py`` puts :func:`section` into RESULTS.md. A harness results folder holds
``harness_session.json`` and ``runs/<cell>-<system>/`` with the harness's ``summary.json``
and ``raw.csv.gz`` and our ``cell.json``. Every figure comes from those files:

* peak throughput: the highest median completion rate of a sweep cell's ``clean`` phase
  (the harness's ``median_throughput_per_s``) over the sweep's worker counts, and the median
  of the same phase's ``claim_p99_ms`` samples at that worker count;
* chaos: the harness's own ``jobs_lost`` and ``chaos_recovery_time_s`` of the recovery phase
  (``bench_harness/writers.py``: enqueued minus completed, integrated from the rate samples
  over the chaos and recovery phases; the time until the completion rate is back to 90 % of the
  baseline's median); recovered = that time exists;
* pressure: completed = the harness ran every phase to the end without a replica dying, within
  the phases' length plus 120 s; the backlog is the last ``queue_depth`` sample of the last phase.
"""

from __future__ import annotations

import csv
import gzip
import json
import statistics
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
SUBJECT = "django_taskmq"
PEER = "procrastinate"
CHAOS = ("chaos_crash_recovery", "chaos_repeated_kills", "chaos_pg_backend_kill", "chaos_pool_exhaustion")
PRESSURE = ("idle_in_tx", "sustained_high_load", "active_readers", "event_burst")


def folders() -> list[Path]:
    return sorted(p.parent for p in RESULTS_DIR.glob("*/harness_session.json"))


def load(folder: Path) -> dict:
    session = json.loads((folder / "harness_session.json").read_text())
    runs = {}
    for cell in session["cells"]:
        run = folder / "runs" / f"{cell['cell']}-{cell['system']}"
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
        phases = summary.get("systems", {}).get(cell["system"], {}).get("phases", {})
        runs[cell["cell"], cell["system"]] = {"cell": cell, "phases": phases, "dir": run}
    return {"folder": folder, "session": session, "runs": runs}


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def adapter_samples(run: dict) -> list[dict]:
    """The adapter's own samples (``subject_kind`` adapter) of the run's raw.csv, in order."""
    if "samples" not in run:
        path = run["dir"] / "raw.csv.gz"
        run["samples"] = []
        if path.exists():
            with gzip.open(path, "rt", newline="") as fh:
                run["samples"] = [row for row in csv.DictReader(fh) if row.get("subject_kind") == "adapter"]
    return run["samples"]


def last_depth(run: dict) -> float | None:
    """The last queue_depth sample the adapter printed (the end of the run's last phase)."""
    values = [float(r["value"]) for r in adapter_samples(run) if r["metric"] == "queue_depth"]
    return values[-1] if values else None


def phase_median(run: dict, phase: str, metric: str) -> float | None:
    values = [float(r["value"]) for r in adapter_samples(run) if r["metric"] == metric and r["phase_label"] == phase]
    return statistics.median(values) if values else None


def systems(data: dict) -> list[str]:
    found = {system for _, system in data["runs"]}
    return [s for s in (SUBJECT, PEER) if s in found] + sorted(found - {SUBJECT, PEER})


def sweep(data: dict) -> dict[str, list[tuple[int, float | None, float | None, float | None]]]:
    """{system: [(workers, throughput, claim p50, claim p99)]} of the sweep's clean phases."""
    out: dict[str, list] = {}
    for (cell, system), run in sorted(data["runs"].items()):
        if not cell.startswith("sweep_w") or not run["cell"].get("ok"):
            continue
        clean = run["phases"].get("clean", {})
        out.setdefault(system, []).append((run["cell"]["worker_count"], clean.get("median_throughput_per_s"),
                                           phase_median(run, "clean", "claim_p50_ms"),
                                           clean.get("median_claim_p99_ms")))
    for rows in out.values():
        rows.sort()
    return out


def peaks(data: dict) -> dict[str, tuple]:
    return {system: max(rows, key=lambda r: r[1] or 0.0) for system, rows in sweep(data).items() if rows}


def chaos(data: dict, cell: str, system: str) -> dict | None:
    run = data["runs"].get((cell, system))
    if run is None:
        return None
    recovery = run["phases"].get("recovery", {})
    return {"ok": run["cell"].get("ok"), "error": run["cell"].get("error"), "lost": recovery.get("jobs_lost"),
            "enqueued": recovery.get("jobs_enqueued"), "completed": recovery.get("jobs_completed"),
            "recovery_s": recovery.get("chaos_recovery_time_s"), "db": run["cell"].get("db_states_after")}


def pressure(data: dict, cell: str, system: str) -> dict | None:
    run = data["runs"].get((cell, system))
    if run is None:
        return None
    c = run["cell"]
    stress = next((v for k, v in run["phases"].items() if k.startswith(("idle_", "pressure_", "readers_"))), {})
    return {"completed": bool(c.get("ok")) and bool(c.get("within_timeout")), "error": c.get("error"),
            "stress_rate": stress.get("median_throughput_per_s"), "stress_p99": stress.get("median_claim_p99_ms"),
            "offered": c["producer_rate"], "backlog": last_depth(run)}


def goals(data: dict) -> list[str]:
    peak = peaks(data)
    lines = []
    if SUBJECT in peak:
        best = max(peak, key=lambda s: peak[s][1] or 0.0)
        lines.append(f"* Highest clean peak throughput of those measured: **{'met' if best == SUBJECT else 'not met'}** "
                     f"({SUBJECT} {_num(peak[SUBJECT][1])} jobs/s, best {best} {_num(peak[best][1])}).")
        if PEER in peak:
            ours, theirs = peak[SUBJECT][3], peak[PEER][3]
            met = ours is not None and theirs is not None and ours <= theirs
            lines.append(f"* Claim p99 at peak at or below Procrastinate's: **{'met' if met else 'not met'}** "
                         f"({_num(ours)} ms against {_num(theirs)} ms).")
    results = [chaos(data, c, SUBJECT) for c in CHAOS]
    ran = [r for r in results if r is not None]
    if ran:
        clean = [r for r in ran if r["ok"] and r["recovery_s"] is not None and (r["lost"] or 0) < 0.5]
        in_flight = [c for c, r in zip(CHAOS, results) if r is not None and r not in clean and r["ok"]
                     and r["recovery_s"] is not None and r["db"] is not None
                     and not {k for k in r["db"] if k.lower() not in ("succeeded", "done")}]
        note = "".join(f"; {c}: {_num(r['lost'])} counted lost by the harness, none failed, dead-lettered or "
                       f"unfinished in the table after the run (jobs in flight at the last sample)"
                       for c, r in zip(CHAOS, results) if c in in_flight and r is not None)
        lines.append(f"* Every chaos scenario recovered with 0 jobs lost: **{'met' if len(clean) == len(CHAOS) else 'not met'}** "
                     f"by the harness's count ({len(clean)}/{len(CHAOS)}{note}; PostgreSQL restart not run here).")
    results = [pressure(data, c, SUBJECT) for c in PRESSURE]
    ran = [r for r in results if r is not None]
    if ran:
        done = [r for r in ran if r["completed"]]
        lines.append(f"* Every pressure scenario completed: **{'met' if len(done) == len(PRESSURE) else 'not met'}** "
                     f"({len(done)}/{len(PRESSURE)}).")
    return lines


def chaos_cell(r: dict) -> str:
    if not r["ok"]:
        return f"failed: {r['error'][:80]}"
    recovered = f"yes, {r['recovery_s']:.0f} s" if r["recovery_s"] is not None else "**no**"
    text = f"{recovered} / {_num(r['lost'])} lost ({_num(r['enqueued'])} in, {_num(r['completed'])} done)"
    if r.get("db") is not None:  # the table after the run, finished rows left out
        left = {k: v for k, v in r["db"].items() if k.lower() not in ("succeeded", "done")}
        text += "; table after: " + (", ".join(f"{v} {k}" for k, v in sorted(left.items())) or "nothing unfinished")
    return text


def pressure_cell(r: dict) -> str:
    if not r["completed"]:
        return f"**no**: {(r['error'] or 'over time')[:80]}"
    return f"yes / {_num(r['stress_rate'])} ({r['offered']}) / {_num(r['backlog'])}"


def scenario_table(title: str, cells: tuple, names: list[str], get, render, notes: list[str]) -> list[str]:
    """One row per scenario, one column per system; nothing if no scenario of the table ran."""
    rows = [(c, [get(c, s) for s in names]) for c in cells]
    if not any(r for _, results in rows for r in results):
        return []
    lines = [title, "", "| scenario | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {c} | " + " | ".join("not run" if r is None else render(r) for r in results) + " |"
              for c, results in rows]
    return lines + notes + [""]


def section(folder: Path | None = None, level: int = 2) -> list[str]:
    """Markdown of one harness results folder (default: the newest), headed at ``level``."""
    if folder is None:
        found = folders()
        if not found:
            return []
        folder = found[-1]
    data = load(folder)
    session = data["session"]
    inv = session["invocations"][0]
    invocations = "; ".join(
        f"{i['started_at'][:16].replace('T', ' ')} UTC (django_taskmq at `{i['taskmq_commit'][:7]}`"
        f"{', uncommitted changes' if i.get('taskmq_uncommitted') else ''}"
        f"{', cells ' + i['only'] + ' again, replacing the earlier runs of those cells' if i.get('only') else ''})"
        for i in session["invocations"])
    names = systems(data)
    rel = folder.relative_to(BENCH_DIR) if folder.is_relative_to(BENCH_DIR) else folder
    loads = [c["load_before"][0] for c in session["cells"]] + [c["load_after"][0] for c in session["cells"]]
    h = "#" * level
    lines = [f"{h} A harness nobody here wrote: hardbyte/postgresql-job-queue-benchmarking (issue 50)", "",
             f"[`{rel}/`]({rel}/), run by `harness_adapter/run.py` (see [`harness_adapter/README.md`]"
             f"(harness_adapter/README.md)) on {invocations}: the harness at commit "
             f"`{inv['harness_commit'][:12]}`, run natively against this machine's PostgreSQL (no Docker; "
             f"autovacuum off on this server, which inflates every PostgreSQL latency), "
             f"its Procrastinate adapter with `procrastinate==3.8.1`. Each cell ran the systems one after the other "
             f"in a shuffled order (seed {inv['seed']}); `PRODUCER_BATCH_MAX` {inv.get('producer_batch_max', 128)} for "
             f"all; the harness's quick settings are the README's. Load average (1 min) around the runs: "
             f"{min(loads):.1f} to {max(loads):.1f} on 2 cores shared with other sessions: **a heavily loaded "
             f"machine**, compare across a row only.", ""]
    rows = sweep(data)
    peak = peaks(data)
    if rows:
        lines += [f"{h}# Peak throughput (depth-target 4000, `clean` phase medians)", "",
                  "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines.append("| clean peak, jobs/s ↑ | " + " | ".join(
            f"**{_num(peak[s][1])}** (W={peak[s][0]})" if s in peak else "n/a" for s in names) + " |")
        lines.append("| claim p99 at peak, ms ↓ | " + " | ".join(
            _num(peak[s][3]) if s in peak else "n/a" for s in names) + " |")
        lines.append("| claim p50 at peak, ms ↓ | " + " | ".join(
            _num(peak[s][2]) if s in peak else "n/a" for s in names) + " |")
        workers = sorted({w for r in rows.values() for w, *_ in r})
        for w in workers:
            cells = []
            for s in names:
                match = [r for r in rows.get(s, []) if r[0] == w]
                cells.append(f"{_num(match[0][1])} / {_num(match[0][3])}" if match else "n/a")
            lines.append(f"| W={w}: jobs/s / claim p99 ms | " + " | ".join(cells) + " |")
        lines += ["", "At a queue held 4000 deep the claim latency is mostly the wait behind the backlog "
                  "(4000 / throughput): the faster system has the lower figure.", ""]
    lines += scenario_table(f"{h}# Chaos: recovered (time to 90 % of the baseline completion rate) / jobs_lost",
                            CHAOS, names, lambda c, s: chaos(data, c, s), chaos_cell, [
        "| chaos_postgres_restart | " + " | ".join("not run: shared server" for _ in names) + " |", "",
        "`jobs_lost` is the harness's estimate, enqueued minus completed from the rate samples of the "
        "chaos and recovery phases: the samples a killed replica had not printed yet are missing from "
        "both sides, and the jobs still queued or running at the end count as lost. \"Table after\": the "
        "jobs of each state other than succeeded in the system's table once its replicas stopped (a "
        "stopping cluster gives its unstarted reservations back to the queue)."])
    lines += scenario_table(f"{h}# Pressure: completed / jobs/s under pressure (offered) / backlog at the end",
                            PRESSURE, names, lambda c, s: pressure(data, c, s), pressure_cell, [
        "", "The offered rate is the base rate; `sustained_high_load` and `event_burst` offer 1.5x of it "
        "during their pressure phase."])
    goal_lines = goals(data)
    if goal_lines:
        lines += [f"{h}# Issue 50's goals for this harness", "", *goal_lines, ""]
    return lines


def main(argv: list[str]) -> int:
    folder = Path(argv[0]).resolve() if argv else None
    text = "\n".join(section(folder)).rstrip()
    print(text or "no harness results folder (results/*/harness_session.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
