"""``manage.py qconfig --check``: everything a cluster would refuse at start-up or at run time,
found without starting one, as one line per problem (for CI before a deploy).

What is checked, in order (a later step needs the earlier ones): the ``TASKMQ`` settings;
django_taskmq's system checks; the database (it answers, the tables exist, no migration of
django_taskmq is unapplied); the ``tasks`` module of every installed app (it imports, and each
``@task`` it declares names a queue of ``TASKMQ['queues']``); every schedule that may still fire
(its function and hook exist and are allowed, its arguments bind to the function's signature, its
queue, cron, interval, time zone and options are valid).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

from django.apps import apps
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from .brokers.orm.dialect import dialect_named
from .conf import Settings, get_settings
from .exceptions import ConfigError
from .runtime.binding import bind, path_signature
from .runtime.loading import DECLARED, is_task, resolve

APP = "django_taskmq"


def problems() -> Iterator[str]:
    """Yield one line per problem found; nothing when the configuration is good."""
    try:
        settings = get_settings()
    except ConfigError as exc:
        yield f"settings: {exc}"
        return
    from .checks import TAG

    for message in checks.run_checks(tags=[TAG], include_deployment_checks=False):
        if message.level >= checks.ERROR:
            yield f"system check {message.id}: {message.msg}"
    database_ok = True
    for line in _database(settings):
        database_ok = False
        yield line
    yield from _task_modules(settings)
    if database_ok:
        yield from _schedules(settings)


def _database(settings: Settings) -> Iterator[str]:
    from .brokers import get_broker
    from .cluster import outage

    connection = connections[settings.database]
    dialect = dialect_named(connection.vendor)
    if dialect is not None and dialect.created_by_connecting(connection):
        yield f"database: {outage.check(settings.database, get_broker().describe())}"  # (not created by us)
        return
    try:
        executor = MigrationExecutor(connection)
        targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == APP]
        missing = [migration.name for migration, _ in executor.migration_plan(targets)
                   if migration.app_label == APP]
    except Exception:  # the database does not answer: the start-up check says how
        missing = []
    finally:
        outage.close_quietly(settings.database)
    if missing:  # (this also explains missing tables)
        yield (f"database: {len(missing)} migration(s) of {APP} not applied ({', '.join(missing)}): "
               f"run manage.py migrate")
        return
    problem = outage.check(settings.database, get_broker().describe())
    if problem:
        yield f"database: {problem}"


def _task_modules(settings: Settings) -> Iterator[str]:
    """Import each installed app's ``tasks`` module; check the queue of every ``@task`` declared."""
    for config in apps.get_app_configs():
        module = f"{config.name}.tasks"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module exists and imports something missing
                yield f"{module}: cannot be imported: {exc}"
        except Exception as exc:  # a @task with a wrong option raises ConfigError at import
            yield f"{module}: cannot be imported: {type(exc).__name__}: {exc}"
    for path in sorted(DECLARED):
        try:
            target = resolve(path)
        except ImportError:
            continue  # declared in a module that is not importable by that path (a test's local task)
        queue = getattr(target, "queue", None) if is_task(target) or isinstance(target, type) else None
        if queue is not None and queue not in settings.queues:
            yield f"@task {path}: queue {queue!r} is not in TASKMQ['queues'] {sorted(settings.queues)}"


def _schedules(settings: Settings) -> Iterator[str]:
    from .models import Schedule

    for item in Schedule.objects.using(settings.database).exclude(repeats=0).order_by("name"):
        try:
            item.clean()
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    yield f"schedule {item.name!r}: {field}: {error}"
            continue
        kwargs = dict(item.kwargs)
        if item.intended_date_kwarg:
            kwargs[item.intended_date_kwarg] = "2000-01-01T00:00:00+00:00"
        try:
            bind(path_signature(item.func), item.args, kwargs, item.func)
        except TypeError as exc:
            yield f"schedule {item.name!r}: its arguments do not fit {item.func}: {exc}"
