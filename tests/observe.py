"""Observability of test processes, switched on by the environment (read by ``tests.settings_sqlite``):

* ``TASKMQ_TEST_SENTRY_FILE``: ``sentry_sdk.init`` with a transport that appends each event to that
  file as one JSON line (no network; the DSN names no real host);
* ``TASKMQ_TEST_JSON_LOGS``: the documented JSON logging configuration (``example/json_logging.py``);
* ``TASKMQ_TEST_SPANS_FILE``: the OpenTelemetry SDK, exporting each span as it ends to that file
  as one JSON line (:func:`export_spans_to`; the pytest process calls it itself);
* reporters for ``TASKMQ['error_reporter']`` that log to the run log and then raise or hang.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

SENTRY_FILE = "TASKMQ_TEST_SENTRY_FILE"
JSON_LOGS = "TASKMQ_TEST_JSON_LOGS"
SPANS_FILE = "TASKMQ_TEST_SPANS_FILE"


def configure(settings: dict[str, Any]) -> None:
    """Set up what the environment asks for, from a settings module's globals."""
    if os.environ.get(SENTRY_FILE):
        init_sentry(os.environ[SENTRY_FILE])
    if os.environ.get(SPANS_FILE):
        export_spans_to(os.environ[SPANS_FILE])
    if os.environ.get(JSON_LOGS):
        from example.json_logging import LOGGING

        # As the configuration's comment says, DEBUG for django_taskmq.jobs: a record per success too.
        loggers = {**LOGGING["loggers"], "django_taskmq.jobs": {"level": "DEBUG"}}
        settings["LOGGING"] = {**LOGGING, "loggers": loggers}


def init_sentry(path: str) -> None:
    import sentry_sdk
    from sentry_sdk.transport import Transport

    class FileTransport(Transport):
        """Append each event of an envelope to ``path`` as a JSON line (one write per line)."""

        def capture_envelope(self, envelope: Any) -> None:
            for item in envelope.items:
                event = item.get_event()
                if event is not None:
                    line = json.dumps(event, default=str) + "\n"
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, line.encode())
                    finally:
                        os.close(fd)

    sentry_sdk.init(dsn="http://public@sentry.invalid/1", transport=FileTransport, default_integrations=True,
                    include_local_variables=True)


def read_events(path: str) -> list[dict[str, Any]]:
    """The events :func:`init_sentry`'s transport wrote, in order."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def raising_reporter(exc: BaseException, job: Any) -> None:
    """Log ``reported:<attempt>:<state>`` for the job, then raise."""
    from tests.cluster.tasks_cluster import log

    log(f"reported:{job.attempt}:{job.state}", job.id)
    raise RuntimeError("the reporter itself fails")


def hanging_reporter(exc: BaseException, job: Any) -> None:
    """Log ``reported:<attempt>:<state>`` for the job, then hang for a minute."""
    from tests.cluster.tasks_cluster import log

    log(f"reported:{job.attempt}:{job.state}", job.id)
    time.sleep(60)


class Failed(Exception):
    """Raised by :func:`failing`."""


def failing(tag: str, *private: Any) -> None:
    """Raise :class:`Failed` with ``tag``; ``private`` stands for arguments a report must not carry."""
    raise Failed(tag)


def logs_a_line(text: str) -> str:
    """Log ``text`` on this module's logger at WARNING (the task's own record)."""
    import logging

    logging.getLogger(__name__).warning("task says %s", text)
    return text


def reports_then_waits(gate: str, cap: float = 60.0) -> str:
    """Report 5 of 10 ("halfway"), then wait until the file ``gate`` exists (at most ``cap`` seconds)."""
    from django_taskmq import current_job

    current_job().set_progress(5, 10, "halfway")
    deadline = time.monotonic() + cap
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "done"


def reports_often(calls: int) -> dict[str, float]:
    """Report progress ``calls`` times in a loop, wait until the last report is written; return
    how many writes this job's reports made and over how many seconds."""
    from django_taskmq import current_job
    from django_taskmq.runtime import progress

    job = current_job()
    writer = progress.writer()
    before = writer.writes
    started = time.monotonic()
    for done in range(1, calls + 1):
        job.set_progress(done, calls, "looping")
    deadline = time.monotonic() + 30
    while not writer.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"writes": writer.writes - before, "seconds": time.monotonic() - started}


_spans_path: list[str] = []  # where this process's spans go (the SDK's provider can be set only once)


def export_spans_to(path: str) -> None:
    """Export every span of this process to ``path`` (one JSON object a line) as it ends."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        def export(self, spans: Any) -> Any:
            for span in spans:
                line = json.dumps(json.loads(span.to_json())) + "\n"
                fd = os.open(_spans_path[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            return SpanExportResult.SUCCESS

    if not _spans_path:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
        trace.set_tracer_provider(provider)
    _spans_path.append(path)


def read_spans(path: str) -> list[dict[str, Any]]:
    """The spans :func:`export_spans_to` wrote, in order."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def logs_in(user: str, password: str = "", **options: Any) -> None:
    """Fail as a login would, with ``password`` among its arguments and local variables."""
    attempt = {"user": user, "password": password, "options": options}
    raise Failed(f"login refused for {attempt['user']}")
