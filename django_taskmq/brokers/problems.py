"""Why a database error happened, in one line an operator can act on: the database does not
answer, a table of django_taskmq is missing, or migrations of it are not applied.

Used where a command or a probe met a database error (:mod:`.management.operator_command`,
:mod:`.health`): the error itself says little (``no such table``, ``connection refused``), so the
database is asked again, on a fresh connection, what is wrong.
"""

from __future__ import annotations

from django.db import connections

from . import database
from .outage import cause


def explain(alias: str, exc: BaseException | None = None) -> str:
    """Return one line naming what is wrong with the database ``alias`` and the fix; ``exc`` is the
    error met, quoted when the database itself seems fine."""
    from . import get_broker

    try:
        where = get_broker().describe()
    except Exception:  # a broker that cannot even describe itself: name the alias
        where = repr(alias)
    close_quietly(alias)  # a failed connection may be left in a broken state
    problem = check(alias, where)  # "cannot reach database W: why" or "database W has no table T..."
    if problem is not None and problem.startswith("cannot reach"):
        why = problem.partition(": ")[2]
        return f"the database {where} does not answer: {why}; start it, or fix DATABASES[{alias!r}]"
    if problem is not None:
        return "the " + problem.replace(" has no table ", " answers but has no table ", 1)
    pending = unapplied_migrations(alias)
    if pending:
        return (f"the database {where} answers, but {len(pending)} migration(s) of django_taskmq are not applied "
                f"(first {pending[0]}): run manage.py migrate")
    return f"the database {where} failed: {cause(exc) if exc is not None else 'unknown error'}"


def unapplied_migrations(alias: str) -> list[str]:
    """The names of django_taskmq's migrations not applied on ``alias``, oldest first ([] when
    they cannot be read)."""
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connections[alias])
        targets = executor.loader.graph.leaf_nodes("django_taskmq")
        return [migration.name for migration, _backwards in executor.migration_plan(targets)
                if migration.app_label == "django_taskmq"]
    except Exception:
        return []
    finally:
        close_quietly(alias)


def check(alias: str, where: str) -> str | None:
    """Return None when the cluster can use the database ``alias``, else one line saying why not;
    ``where`` names it (``Broker.describe()``).

    Connects (within the connect timeout :func:`prepare` set), runs ``SELECT 1`` and checks that
    the tables of django_taskmq exist. The connection is closed afterwards.
    """
    from django.apps import apps

    conn = connections[alias]
    where = f"database {where}"
    if database.file_missing(alias):
        # sqlite3 would create an empty file; say what is wrong instead.
        return f"cannot reach {where}: the file does not exist (run manage.py migrate)"
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
            tables = set(conn.introspection.table_names(cursor))
    except Exception as exc:
        return f"cannot reach {where}: {cause(exc, kind=False)}"
    finally:
        close_quietly(alias)
    from ..models import Job

    models = apps.get_app_config("django_taskmq").get_models()
    missing = sorted((m is not Job, m._meta.db_table) for m in models if m._meta.db_table not in tables)
    if missing:
        others = f" and {len(missing) - 1} other table(s) of django_taskmq" if len(missing) > 1 else ""
        return f"{where} has no table {missing[0][1]}{others}: run manage.py migrate"
    return None


def close_quietly(alias: str) -> None:
    """Close the connection to ``alias`` so the next query reconnects; a broken one may fail to close."""
    try:
        connections[alias].close()
    except Exception:
        pass
