"""``qmonitor`` lays itself out for the terminal: at 80 columns every line fits, no header is cut
(``cl… ho… st…`` was the old way), the columns that go are the least telling ones, and the frame is
the one in ``tests/api/snapshots/qmonitor-80.txt`` (regenerate it with ``TASKMQ_SNAPSHOTS=update``
and read the diff)."""

from __future__ import annotations

import datetime
import io
import os
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from rich.console import Console

from django_taskmq.observability import terminal
from django_taskmq.observability.statistics import ClusterInfo, QueueStats, Snapshot, Throughput, WorkerTask

SNAPSHOT = Path(__file__).parent.parent / "api" / "snapshots" / "qmonitor-80.txt"
AT = datetime.datetime(2026, 12, 4, 21, 30, tzinfo=datetime.UTC)


def snapshot() -> Snapshot:
    cluster = ClusterInfo(
        id="ops-demo:web-1:4242:abcd1234", name="ops-demo", host="web-1.example.internal", pid=4242, state="running",
        workers=2, queues=["default", "emails", "reports"], started_at=AT - datetime.timedelta(hours=3),
        heartbeat_age=1.2, counts={"succeeded": 15234, "failed": 12, "timeouts": 1, "crashes": 0, "uptime": 10800.0,
                                   "clock_skew": 0.004},
        tasks=[WorkerTask(0, "0661d56e69d7e472ce447de3", "emails", 12.5, "billing.send_invoice",
                          {"done": 3, "total": 10, "message": "pages", "updated_at": AT})])
    queues = [QueueStats("default", {5: 3, 0: 120}, delayed=4, retrying=1, running=1, reserved=4, dead_letters=2,
                         oldest_ready_age=75.0),
              QueueStats("emails", {0: 7}, running=1, reserved=0, oldest_ready_age=3.0, paused=True)]
    per_minute = [(AT - datetime.timedelta(minutes=59 - i), 10 + i, i % 3) for i in range(60)]
    return Snapshot(taken_at=AT, queues=queues, clusters=[cluster],
                    throughput=Throughput(70, 2, 2400, 60, per_minute))


def render(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, highlight=False)
    counts = {("default", "FAILED"): 3, ("default", "DEAD"): 2}
    console.print(terminal.frame(snapshot(), counts, "'default' (postgresql taskmq at 127.0.0.1:5432)", AT, hint="",
                                 width=width))
    return out.getvalue()


def headers(text: str) -> list[list[str]]:
    """The header cells of each table (the line after its top border)."""
    lines = text.splitlines()
    return [[cell.strip() for cell in lines[i + 1].strip("┃ ").split("┃")]
            for i, line in enumerate(lines) if line.startswith("┏")]


@pytest.mark.parametrize("width", [80, 100, 140, 200])
def test_every_line_fits_and_no_header_is_cut(width):
    text = render(width)
    assert max(len(line) for line in text.splitlines()) <= width, text
    found = headers(text)
    assert len(found) == 3, text  # clusters, workers, queues
    for cells in found:
        assert all("…" not in cell for cell in cells), cells
    clusters, workers, queues = found
    # What always stays: who, in what state, how busy; what runs; what waits, runs and is held.
    assert {"cluster", "state", "workers", "busy"} <= set(clusters)
    assert {"task", "for"} <= set(workers)
    assert {"queue", "ready", "running", "reserved", "dead letters"} <= set(queues)


def test_wide_terminals_show_every_column():
    clusters, workers, queues = headers(render(200))
    assert [c.header for c in terminal.CLUSTER_COLUMNS] == clusters
    assert [c.header for c in terminal.QUEUE_COLUMNS] == queues


def test_the_80_column_frame_is_the_snapshot():
    text = render(80)
    if os.environ.get("TASKMQ_SNAPSHOTS") == "update":
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text()


@given(st.lists(st.tuples(st.text("abcxyz", min_size=1, max_size=40), st.integers(0, 5)), min_size=1, max_size=12),
       st.integers(20, 200))
def test_fitted_keeps_rank_0_and_drops_the_highest_ranks_first(spec, width):
    columns = [terminal.Column(f"h{i}", rank) for i, (_, rank) in enumerate(spec)]
    rows = [[cell for cell, _ in spec]]
    kept = terminal.fitted(columns, rows, width)
    assert {i for i, c in enumerate(columns) if c.rank == 0} <= set(kept)
    dropped = [i for i in range(len(columns)) if i not in kept]
    if dropped:  # nothing of a lower rank went while one of a higher rank stayed
        assert min(columns[i].rank for i in dropped) >= max((columns[i].rank for i in kept), default=0)
