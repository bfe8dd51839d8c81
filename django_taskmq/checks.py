"""System checks: a wrong ``TASKMQ`` value fails at start-up with the setting's name, and so does a
database engine the broker does not support; the keys of django-q2's ``Q_CLUSTER`` that are not
carried over, and django-q2's commands shadowing ours, warn."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from .brokers import database
from .compat import q_cluster
from .conf import Settings, get_settings, read
from .exceptions import ConfigError
from .runtime.binding import bind, path_signature
from .runtime.loading import DECLARED, is_task, resolve

# Every check of django_taskmq carries this tag: ``manage.py check --tag taskmq`` runs them alone,
# and so does qcluster at start-up.
TAG = "taskmq"
# The checks that ask the database server (its version, its settings): qcluster runs them at
# start-up once the database answers; ``manage.py check --database <alias>`` too.
SERVER_TAG = "taskmq_server"


def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    messages = check_q_cluster() + check_app_order()
    try:
        conf = read(settings)
    except ConfigError as exc:
        return messages + [checks.Error(str(exc), hint="See the settings page of the django_taskmq docs.",
                                        id="taskmq.E001")]
    if conf.database not in settings.DATABASES:
        return messages + [checks.Error(
            f"TASKMQ['database'] {conf.database!r} is not in DATABASES",
            hint=f"Use one of {sorted(settings.DATABASES)}.", id="taskmq.E002",
        )]
    problem = database.engine_problem(conf.database)
    if problem:
        # Without a dialect the broker's SQL would fail at every claim: refuse before anything runs.
        return messages + [checks.Error(problem, hint=database.ADVICE, id="taskmq.E006")]
    messages += check_listen_database(conf)
    if conf.error_reporter is not None:
        from .observability.reporting import reporter_problem

        problem = reporter_problem(conf.error_reporter)
        if problem:
            messages.append(checks.Error(f"TASKMQ['error_reporter'] {conf.error_reporter!r} {problem}",
                                         hint="Name a callable (exc, job), e.g. 'django_taskmq.contrib.sentry.report'.",
                                         id="taskmq.E004"))
    if conf.opentelemetry and importlib.util.find_spec("opentelemetry") is None:
        messages.append(checks.Error("TASKMQ['opentelemetry'] is True but opentelemetry-api is not installed",
                                     hint="pip install 'django-taskmq[otel]' (and the SDK and exporter you use).",
                                     id="taskmq.E005"))
    caches = getattr(settings, "CACHES", None) or {"default": None}
    if conf.cache not in caches:
        messages.append(checks.Error(
            f"TASKMQ['cache'] {conf.cache!r} is not in CACHES",
            hint=f"Cached results (the 'cached' option) need one of {sorted(caches)}.", id="taskmq.E003",
        ))
    return messages


def check_listen_database(conf) -> list[checks.CheckMessage]:
    """``TASKMQ['listen_database']`` must name a PostgreSQL alias of ``DATABASES``, beside a PostgreSQL broker."""
    alias = conf.listen_database
    if alias is None:
        return []
    if alias not in settings.DATABASES:
        return [checks.Error(f"TASKMQ['listen_database'] {alias!r} is not in DATABASES",
                             hint=f"Use one of {sorted(settings.DATABASES)}: an alias that connects to the broker's "
                                  "database directly, not through a pooler.", id="taskmq.E010")]
    engines = {name: settings.DATABASES[name].get("ENGINE", "") for name in (alias, conf.database)}
    if not all(engine.endswith("postgresql") for engine in engines.values()):
        return [checks.Error(
            f"TASKMQ['listen_database'] {alias!r} is only for a PostgreSQL broker: both it and "
            f"TASKMQ['database'] {conf.database!r} must be PostgreSQL databases",
            hint="Remove TASKMQ['listen_database'] (SQLite and MySQL wake idle clusters without LISTEN).", id="taskmq.E011")]
    return []


def check_q_cluster() -> list[checks.CheckMessage]:
    """Warn about every key of django-q2's Q_CLUSTER that is not carried over (when it is read)."""
    if getattr(settings, "TASKMQ", None) is not None or getattr(settings, q_cluster.SETTING, None) is None:
        return []
    try:
        _, notes = q_cluster.translate(getattr(settings, q_cluster.SETTING))
    except ConfigError:
        return []  # check_settings reports it as taskmq.E001
    return [checks.Warning(
        f"{where} is not carried over to django_taskmq: {reason}",
        hint="TASKMQ is read from Q_CLUSTER because TASKMQ is not set; 'manage.py qconfig --from-q-cluster' "
             "prints the equivalent TASKMQ.",
        id="taskmq.W002",
    ) for where, reason in notes]


def check_app_order() -> list[checks.CheckMessage]:
    """Warn when django-q2 comes before django_taskmq in INSTALLED_APPS: its commands would win."""
    names = [config.name for config in apps.get_app_configs()]
    if "django_q" in names and names.index("django_q") < names.index("django_taskmq"):
        return [checks.Warning(
            "django_q is listed before django_taskmq in INSTALLED_APPS: 'manage.py qcluster', 'qinfo' and "
            "'qmonitor' run django-q2's commands, not django_taskmq's",
            hint="Put 'django_taskmq' before 'django_q' in INSTALLED_APPS. The 'Coming from django-q2' page of the "
                 "docs says how to run django-q2's cluster beside it while its queue drains.",
            id="taskmq.W003",
        )]
    return []


def connections_needed(workers: int, threads: int) -> int:
    """The database connections one cluster opens: one per worker thread, plus the sentinel's,
    the pusher's and the monitor's."""
    return workers * threads + 3


def connection_budget_problem(alias: str, workers: int, threads: int) -> str | None:
    """Say why one cluster of ``workers`` x ``threads`` may exhaust the connections the database
    ``alias`` allows (PostgreSQL's ``max_connections``); None when it fits or the engine has no limit."""
    found = database.connection_limit(alias)
    if found is None:
        return None
    limit, how, engine = found
    needed = connections_needed(workers, threads)
    if needed <= limit:
        return None
    return (f"one cluster of {workers} workers x {threads} threads opens up to {needed} database connections "
            f"(workers x threads + 3), more than the {limit} {engine} allows ({how})")


def check_database(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    try:
        conf = read(settings)
    except ConfigError:
        return messages
    if databases and conf.database in databases:
        try:
            problem = connection_budget_problem(conf.database, conf.workers, conf.threads)
        except Exception:  # the database does not answer: qcluster's start-up check says so
            problem = None
        if problem:
            messages.append(checks.Warning(
                problem, hint="Lower TASKMQ['workers'] or TASKMQ['threads'], raise max_connections, or put a "
                              "connection pooler (PgBouncer) in front; see the Concurrency page of the docs.",
                id="taskmq.W004"))
    # No warning on SQLite without transaction_mode IMMEDIATE (taskmq.W001 until 0.2.0): the cluster
    # sets it on its own connections and our enqueue transactions take the write lock first.
    return messages


def check_database_server(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """The server behind ``TASKMQ['database']`` must suit the broker (MySQL: version, InnoDB,
    isolation level); each reason is an error naming what to change. Queries the server."""
    try:
        conf = read(settings)
    except ConfigError:
        return []
    if not databases or conf.database not in databases:
        return []
    try:
        problems = database.server_problems(conf.database)  # none for a refused engine: taskmq.E006
    except Exception:  # the database does not answer: qcluster's start-up check says so
        return []
    return [checks.Error(problem, hint=hint, id=check_id) for check_id, problem, hint in problems]


# What manage.py qconfig checks beyond the system checks (was django_taskmq.config_check): the
# database, migrations, the tasks module of every installed app, and each schedule's call.


APP = "django_taskmq"


def problems() -> Iterator[str]:
    """Yield one line per problem found; nothing when the configuration is good."""
    try:
        settings = get_settings()
    except ConfigError as exc:
        yield f"settings: {exc}"
        return

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
    if database.file_missing(settings.database):
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
