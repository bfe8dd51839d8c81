"""What TASKMQ['opentelemetry'] costs per job: the enqueue (producer span, context in the package)
and the execution (consumer span) with it off and on, in one process on SQLite.

    .venv/bin/python benchmarks/otel_cost.py                 # 2000 enqueues, 20000 executions, 5 rounds
    .venv/bin/python benchmarks/otel_cost.py --json benchmarks/results/otel-cost.json

"On" runs the OpenTelemetry SDK as a project would: a TracerProvider with a BatchSpanProcessor
and an exporter that drops the spans (the export itself is the exporter's cost, not ours). The
rounds interleave off and on; the median of each is printed, in microseconds per job. Needs the
repository's ``.venv`` (Django, opentelemetry-sdk). A development tool, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--enqueues", type=int, default=2000)
    parser.add_argument("--executions", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    folder = tempfile.mkdtemp(prefix="otel-cost-")
    os.environ["TASKMQ_DB_NAME"] = os.path.join(folder, "db.sqlite3")
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings_sqlite"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from django_taskmq import async_task
    from django_taskmq.runtime import execution
    from django_taskmq.brokers.base import Reservation
    from django_taskmq.conf import reset_settings
    from django_taskmq.envelope import Envelope

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    call_command("migrate", verbosity=0)

    def switch(on: bool) -> None:
        settings.TASKMQ = {**settings.TASKMQ, "opentelemetry": on, "sync": False}
        reset_settings()

    def enqueue_us() -> float:
        start = time.perf_counter()
        for i in range(args.enqueues):
            async_task("tests.tasks.noop", i)
        return (time.perf_counter() - start) / args.enqueues * 1e6

    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    message = execution.TaskMessage(Reservation("j" * 24, "default", 0, 1, 0, "t"),
                                    Envelope(func="tests.tasks.noop", options={"trace": carrier}))

    def execute_us() -> float:
        start = time.perf_counter()
        for _ in range(args.executions):
            execution.execute(message)
        return (time.perf_counter() - start) / args.executions * 1e6

    rows = []
    for round_ in range(args.rounds):
        for on in (False, True):
            switch(on)
            rows.append({"round": round_, "opentelemetry": on, "enqueue_us": enqueue_us(), "execute_us": execute_us()})
    provider.shutdown()
    for on in (False, True):
        mine = [r for r in rows if r["opentelemetry"] is on]
        print(f"opentelemetry {'on ' if on else 'off'}: enqueue {statistics.median(r['enqueue_us'] for r in mine):7.1f} us,"
              f" execute {statistics.median(r['execute_us'] for r in mine):6.1f} us  (median of {len(mine)} rounds)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
