"""Carrying django-q2's schedules, queued tasks and (optionally) finished tasks over: ``qimport_djangoq``.

django-q2 need not be installed: its tables are read with plain SQL and its packages are opened
with Django's own signing, as django-q2 signs them (``TimestampSigner``, key ``SECRET_KEY`` (and
its fallbacks), salt the django-q2 cluster name, pickle, optionally zlib). Only a package whose
signature verifies is unpickled; one that does not open is reported and left where it is.

* ``django_q_schedule`` -> :class:`~django_taskmq.models.Schedule`: every schedule still active
  (``repeats != 0``) whose function the allow-list accepts; the old one is then disabled
  (``repeats = 0``) so the two schedulers never both fire it.
* ``django_q_ormq`` -> queued jobs, re-signed with ``TASKMQ['name']``; the row is then deleted,
  so django-q2's cluster cannot run it too. A row that a django-q2 cluster holds (``lock`` in the
  future) is reported and left for a later run.
* ``django_q_task`` (``history``) -> finished jobs, without their results or arguments: django-q2
  stores those pickled and unsigned, and nothing unsigned is unpickled here. A failure's error
  text is kept when its pickle is a lone string, read with :mod:`pickletools` (not unpickled).

Every carried row is recorded in :class:`~django_taskmq.models.Imported`, so a second run imports
nothing twice. A dry run does everything in a transaction it rolls back, and touches no
django-q2 table.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import datetime
import os
import pickletools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core import signing
from django.db import connections
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..brokers import Broker
from ..workflows import run_links
from ..conf import Settings
from ..envelope import PickleSerializer
from ..exceptions import ConfigError
from ..models import Imported, Schedule, State
from ..options import JobTemplate, OPTIONS
from ..policy.storable import clip_head, clip_tail
from ..scheduler import save_schedule
from .django_q import _ours, _split, chained_call

SCHEDULES, QUEUED, HISTORY = "django_q_schedule", "django_q_ormq", "django_q_task"
KINDS = {SCHEDULES: "schedules", QUEUED: "queued tasks", HISTORY: "finished tasks"}
BATCH = 500


@dataclass
class Counts:
    imported: int = 0
    already: int = 0
    refused: int = 0
    held: int = 0


@dataclass
class Report:
    """What an import did (or would do): counts per table, and one line per row not imported."""

    counts: dict[str, Counts] = field(default_factory=lambda: {table: Counts() for table in KINDS})
    problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def refuse(self, table: str, what: str, reason: str) -> None:
        self.counts[table].refused += 1
        self.problems.append(f"{what}: not imported: {reason}")

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would import" if dry_run else "imported"
        out = []
        for table, label in KINDS.items():
            if table in self.missing:
                out.append(f"{label}: table {table} not found")
                continue
            c = self.counts[table]
            held = f", {c.held} held by a running django-q2 cluster" if table == QUEUED else ""
            out.append(f"{label}: {c.imported} {verb}, {c.already} already imported, {c.refused} refused{held}")
        return out + self.problems


class _Rollback(Exception):
    """Ends a dry run: everything written in its transaction is rolled back."""


def _aware(value: Any) -> datetime.datetime | None:
    """Return a datetime read with plain SQL as an aware one (SQLite gives naive UTC, or text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_datetime(value)
        if value is None:
            return None
    if isinstance(value, datetime.datetime) and timezone.is_naive(value):
        return value.replace(tzinfo=datetime.UTC) if django_settings.USE_TZ else timezone.make_aware(value)
    return value


def open_package(payload: str, name: str) -> dict[str, Any]:
    """Verify and open one django-q2 package (signed with salt ``name``); raise ValueError saying why."""
    try:
        task = signing.TimestampSigner(key=django_settings.SECRET_KEY, salt=name).unsign_object(
            payload, serializer=PickleSerializer)
    except signing.BadSignature:
        raise ValueError(f"bad signature (signed with another SECRET_KEY or cluster name than {name!r})") from None
    except Exception as exc:  # verified, but does not unpickle: a module or class that is gone
        raise ValueError(f"cannot unpickle: {type(exc).__name__}: {exc}") from None
    if not isinstance(task, dict) or "func" not in task:
        raise ValueError(f"not a django-q2 task but a {type(task).__name__}")
    return task


def plain_text(stored: Any) -> str | None:
    """Return the string a django-q2 ``PickledObjectField`` holds when its pickle is a lone string.

    Read opcode by opcode with :mod:`pickletools`: nothing is unpickled. Anything else: None.
    """
    try:
        data = base64.b64decode(stored)
        texts = []
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                texts.append(arg)
            elif opcode.name not in ("PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT", "STOP"):
                return None
    except Exception:
        return None
    return texts[0] if len(texts) == 1 and isinstance(texts[0], str) else None


def literal_args(text: str | None) -> tuple:
    """django-q2's schedule ``args`` text ("1, 'a'") as a tuple, read as its scheduler reads it."""
    if not text:
        return ()
    value = ast.literal_eval(text)
    return value if isinstance(value, tuple) else (value,)


def literal_kwargs(text: str | None) -> dict[str, Any]:
    """django-q2's schedule ``kwargs`` text ("{'x': 1}" or "x=1, y=2") as a dict, read as its scheduler reads it."""
    if not text:
        return {}
    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        call = ast.parse(f"f({text})").body[0]
        keywords = call.value.keywords if isinstance(call, ast.Expr) and isinstance(call.value, ast.Call) else []
        return {k.arg: ast.literal_eval(k.value) for k in keywords if k.arg}
    if not isinstance(value, dict):
        raise ValueError(f"kwargs {text!r} is not a dict")
    return value


def _history_id(started: datetime.datetime | None) -> str:
    """A job id that sorts by the old task's start, as ids made at that time would."""
    micros = int((started or timezone.now()).timestamp() * 1_000_000)
    return f"{micros:014x}{os.urandom(5).hex()}"


class Importer:
    """Reads django-q2's tables on the database ``source`` and stores what they hold with ``broker``."""

    def __init__(self, broker: Broker, settings: Settings, *, source: str = "default", name: str = "default",
                 history: bool = False, dry_run: bool = False) -> None:
        self.broker = broker
        self.settings = settings
        self.source = source
        self.name = name  # django-q2's cluster name: the salt of its packages
        self.history = history
        self.dry_run = dry_run
        self.report = Report()
        # Changes to django-q2's tables wait for the commit of what replaces them, unless they are
        # in the broker's own database (then they commit together).
        self.together = source == settings.database

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def connection(self) -> Any:
        return connections[self.source]

    def _columns(self, table: str) -> list[str] | None:
        with self.connection.cursor() as cursor:
            if table not in self.connection.introspection.table_names(cursor):
                return None
            return [c.name for c in self.connection.introspection.get_table_description(cursor, table)]

    def _rows(self, table: str, wanted: Sequence[str], columns: Sequence[str], where: str = "") -> Iterator[list[dict]]:
        """Yield the rows of ``table`` in batches, by id, as dicts of the ``wanted`` columns that exist."""
        names = [c for c in wanted if c in columns]
        quote = self.connection.ops.quote_name
        last: Any = None
        while True:
            after = "" if last is None else "id > %s"
            condition = " AND ".join(c for c in (where, after) if c)
            with self.connection.cursor() as cursor:
                cursor.execute(f"SELECT {', '.join(quote(n) for n in names)} FROM {quote(table)}"
                               f"{' WHERE ' + condition if condition else ''} ORDER BY id LIMIT {BATCH}",
                               [] if last is None else [last])
                rows = [dict(zip(names, row)) for row in cursor.fetchall()]
            if not rows:
                return
            last = rows[-1]["id"]
            yield rows

    def _imported(self, table: str, ids: Sequence[str]) -> set[str]:
        return set(Imported.objects.using(self.settings.database).filter(source=table, source_id__in=list(ids))
                   .values_list("source_id", flat=True))

    def _mark(self, table: str, pairs: Sequence[tuple[str, str]]) -> None:
        Imported.objects.using(self.settings.database).bulk_create(
            [Imported(source=table, source_id=old, target=new) for old, new in pairs])

    def _queue(self, cluster: Any) -> str | None:
        """Return the queue of a django-q2 cluster name (None: the default queue); raise ConfigError."""
        if cluster in (None, "", self.name):
            return None
        if cluster not in self.settings.queues:
            raise ConfigError(f"its cluster {cluster!r} is a queue here, and it is not in TASKMQ['queues'] "
                              f"{sorted(self.settings.queues)}: add it there and run the import again")
        return cluster

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> Report:
        """Import everything once; return the report."""
        outer = self.broker.atomic(write=True) if self.dry_run else contextlib.nullcontext()
        try:
            with outer:
                self._schedules()
                self._queued()
                if self.history:
                    self._finished()
                if self.dry_run:
                    raise _Rollback
        except _Rollback:
            pass
        return self.report

    def _after(self, sql: str, ids: Sequence[Any]) -> Any:
        """Run a change of django-q2's table now (same database) or return it for after the commit."""
        if self.together:
            self._change(sql, ids)
            return None
        return sql, ids

    def _change(self, sql: str, ids: Sequence[Any]) -> None:
        if self.dry_run or not ids:
            return
        with self.connection.cursor() as cursor:
            cursor.execute(sql.replace("%IDS%", ", ".join(["%s"] * len(ids))), list(ids))

    # -- schedules ----------------------------------------------------------------------------------
    def _schedules(self) -> None:
        columns = self._columns(SCHEDULES)
        if columns is None:
            self.report.missing.append(SCHEDULES)
            return
        wanted = ("id", "name", "func", "hook", "args", "kwargs", "schedule_type", "minutes", "repeats", "next_run",
                  "cron", "cluster", "intended_date_kwarg")
        table = self.connection.ops.quote_name(SCHEDULES)
        for rows in self._rows(SCHEDULES, wanted, columns, where="repeats <> 0"):
            done = self._imported(SCHEDULES, [str(r["id"]) for r in rows])
            self.report.counts[SCHEDULES].already += sum(1 for r in rows if str(r["id"]) in done)
            for row in rows:
                if str(row["id"]) in done:
                    continue
                what = f"schedule {row['id']} ({row.get('name') or row['func']})"
                try:
                    with self.broker.atomic(write=True):
                        new = self._schedule(row)
                        self._mark(SCHEDULES, [(str(row["id"]), str(new.pk))])
                        later = self._after(f"UPDATE {table} SET repeats = 0 WHERE id IN (%IDS%)", [row["id"]])
                except (ConfigError, ValueError, SyntaxError, TypeError) as exc:
                    self.report.refuse(SCHEDULES, what, str(exc))
                    continue
                if later:
                    self._change(*later)
                self.report.counts[SCHEDULES].imported += 1

    def _schedule(self, row: dict[str, Any]) -> Schedule:
        args = literal_args(row.get("args"))
        kwargs = literal_kwargs(row.get("kwargs"))
        options, rest, kwargs = _split({"q_options": kwargs.pop("q_options", None) or {}, **kwargs})
        options.pop("sync", None)
        if options.get("chain"):
            raise ConfigError("a schedule with a chain is not carried over: schedule a function that queues "
                              "the chain (django_taskmq.async_chain) instead")
        for key in [k for k in rest if k not in OPTIONS]:
            rest.pop(key)  # broker_name and the like: no meaning here
        cluster = row.get("cluster") or options.pop("cluster", None)
        ours = _ours({k: v for k, v in options.items() if k not in ("cluster", "broker")}, rest, self.settings)
        ours.pop("task_name", None)
        hook = row.get("hook") or ours.pop("hook", None)
        ours.pop("hook", None)
        name = row.get("name") or f"django_q-{row['id']}"
        ours.setdefault("group", name)  # django-q2 groups a schedule's tasks under its name (or id)
        if Schedule.objects.using(self.settings.database).filter(name=name).exists():
            name = f"{name[:70]} (django-q2 #{row['id']})"
        schedule_type = row.get("schedule_type") or Schedule.ONCE
        minutes = row.get("minutes")
        if schedule_type == Schedule.MINUTES and not minutes:
            minutes = 1  # what django-q2 uses
        repeats = row["repeats"] if row["repeats"] >= -1 else -1  # django-q2 reads < -1 as -1
        return save_schedule(row["func"], list(args), kwargs, name=name, schedule_type=schedule_type, minutes=minutes,
                             cron=row.get("cron"), repeats=repeats, next_run=_aware(row.get("next_run")),
                             queue=self._queue(cluster), hook=hook or None,
                             intended_date_kwarg=row.get("intended_date_kwarg") or None, q_options=ours,
                             replace=False)

    # -- queued tasks ---------------------------------------------------------------------------------
    def _queued(self) -> None:
        columns = self._columns(QUEUED)
        if columns is None:
            self.report.missing.append(QUEUED)
            return
        counts = self.report.counts[QUEUED]
        table = self.connection.ops.quote_name(QUEUED)
        now = timezone.now()
        for rows in self._rows(QUEUED, ("id", "key", "payload", "lock"), columns):
            opened: list[tuple[dict, dict]] = []
            for row in rows:
                lock = _aware(row.get("lock"))
                if lock is not None and lock > now:
                    counts.held += 1
                    self.report.problems.append(f"queued task row {row['id']}: held by a django-q2 cluster until "
                                                f"{lock:%Y-%m-%d %H:%M:%S}; run the import again once it is done")
                    continue
                try:
                    opened.append((row, open_package(row["payload"], self.name)))
                except ValueError as exc:
                    self.report.refuse(QUEUED, f"queued task row {row['id']}", str(exc))
            done = self._imported(QUEUED, [str(task.get("id")) for _, task in opened])
            counts.already += sum(1 for _, task in opened if str(task.get("id")) in done)
            stale = [row["id"] for row, task in opened if str(task.get("id")) in done]  # moved, not yet deleted
            built = []
            for row, task in opened:
                if str(task.get("id")) in done:
                    continue
                try:
                    built.append((row, task, self._job(row, task) if not task.get("chain") else self._chain(row, task)))
                except (ConfigError, ValueError, TypeError) as exc:
                    self.report.refuse(QUEUED, f"queued task {task.get('id')} ({task.get('name')})", str(exc))
            delete = f"DELETE FROM {table} WHERE id IN (%IDS%)"
            with self.broker.atomic(write=True):
                if self.together:
                    # Take each row from django-q2 first, in this transaction, and only if no
                    # django-q2 cluster took it since it was read (its dequeue moves the lock into
                    # the future): a task is never in both queues, even with its cluster running.
                    built = [item for item in built if self._take(table, item[0]["id"])]
                    self._change(delete, stale)
                plain = [job for _, _, job in built if isinstance(job, dict)]
                if plain:
                    self.broker.enqueue_many(plain)
                # A task with a chain: it and its chain, one workflow queued now (see compat async_task).
                ids = [job["id"] if isinstance(job, dict) else run_links(job, sync=False) for _, _, job in built]
                if built:
                    self._mark(QUEUED, [(str(task.get("id")), job_id) for (_, task, _), job_id in zip(built, ids)])
            if not self.together:
                self._change(delete, [row["id"] for row, _, _ in built] + stale)
            counts.imported += len(built)

    def _take(self, table: str, row_id: Any) -> bool:
        """Delete one django-q2 row unless a django-q2 cluster holds it now; return True if it was deleted."""
        if self.dry_run:
            return True
        with self.connection.cursor() as cursor:
            lock = self.connection.ops.quote_name("lock")
            cursor.execute(f"DELETE FROM {table} WHERE id = %s AND ({lock} IS NULL OR {lock} <= %s)",
                           [row_id, self.connection.ops.adapt_datetimefield_value(timezone.now())])
            taken = cursor.rowcount == 1
        if not taken:
            self.report.counts[QUEUED].held += 1
            self.report.problems.append(f"queued task row {row_id}: taken by a django-q2 cluster while importing; "
                                        f"not imported")
        return taken

    def _options(self, row: dict[str, Any], task: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """django-q2's options of a queued ``task`` and ours for it."""
        options = {key: task[key] for key in ("hook", "group", "save", "cached", "ack_failure", "timeout")
                   if task.get(key) is not None}
        if task.get("name"):
            options["task_name"] = str(task["name"])[:100]
        ours = _ours(options, {}, self.settings)
        queue = self._queue(row.get("key"))
        if queue is not None:
            ours["queue"] = queue
        return options, ours

    def _chain(self, row: dict[str, Any], task: dict[str, Any]) -> list:
        """The links of a queued ``task`` with a chain: the task, then its chain (queued when it is imported)."""
        options, ours = self._options(row, task)
        return chained_call(task["func"], tuple(task.get("args") or ()), dict(task.get("kwargs") or {}), ours,
                            task["chain"], options, self.settings)

    def _job(self, row: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
        options, ours = self._options(row, task)
        # Carried over as queued: a call that does not fit its function is dead-lettered by the worker.
        template = JobTemplate(task["func"], ours, self.settings, check_calls=False)
        values = template.values(tuple(task.get("args") or ()), dict(task.get("kwargs") or {}))
        started = task.get("started")
        if isinstance(started, datetime.datetime):
            values["enqueued_at"] = started if timezone.is_aware(started) else timezone.make_aware(started)
        return values

    # -- finished tasks --------------------------------------------------------------------------------
    def _finished(self) -> None:
        columns = self._columns(HISTORY)
        if columns is None:
            self.report.missing.append(HISTORY)
            return
        counts = self.report.counts[HISTORY]
        wanted = ("id", "name", "func", "group", "cluster", "started", "stopped", "success", "attempt_count", "result")
        for rows in self._rows(HISTORY, wanted, columns):
            done = self._imported(HISTORY, [str(r["id"]) for r in rows])
            counts.already += sum(1 for r in rows if str(r["id"]) in done)
            fresh = [r for r in rows if str(r["id"]) not in done]
            values = [self._finished_job(r) for r in fresh]
            if values:
                with self.broker.atomic(write=True):
                    self.broker.enqueue_many(values)
                    self._mark(HISTORY, [(str(r["id"]), v["id"]) for r, v in zip(fresh, values)])
            counts.imported += len(values)

    def _finished_job(self, row: dict[str, Any]) -> dict[str, Any]:
        started, stopped = _aware(row.get("started")), _aware(row.get("stopped"))
        success = bool(row.get("success"))
        error = traceback = ""
        if not success:
            text = plain_text(row.get("result"))
            if text is None:
                error = "imported from django-q2: its error was not a plain text and is not carried over"
            else:
                error, _, rest = text.partition(" : Traceback")
                traceback = f"Traceback{rest}" if rest else ""
        attempts = row.get("attempt_count") or 1
        cluster = row.get("cluster")
        return dict(
            id=_history_id(started), func=str(row.get("func") or "")[:255], task_name=str(row.get("name") or "")[:255],
            payload="",  # arguments are not carried over: a retry of this job dead-letters as a bad package
            queue=cluster if cluster in self.settings.queues else self.settings.default_queue,
            state=State.SUCCEEDED if success else State.FAILED, attempt=attempts, deliveries=attempts,
            visible_at=(started or timezone.now()).timestamp(), enqueued_at=started or stopped or timezone.now(),
            started_at=started,
            finished_at=stopped, error=clip_head(error), traceback=clip_tail(traceback), group=row.get("group"),
            cluster=cluster,
        )
