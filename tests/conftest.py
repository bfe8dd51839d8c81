"""Shared fixtures and helpers of the test suites.

Fixtures
--------
``broker``           the configured broker on a clean database (``db``; mark a test
                     ``pytest.mark.django_db(transaction=True)`` when other processes must see its rows).
                     tests/contract replaces it: there it is parametrised over the in-memory test
                     broker and the ORM broker (see tests/contract/conftest.py)
``taskmq_settings``  ``taskmq_settings(max_yields=2, ...)`` overrides ``TASKMQ`` keys for one test
``enqueue``          ``enqueue(n, func="tests.tasks.noop", **options) -> [job ids]`` (one ``async_task`` each)
``run_log``          a fresh path for ``tests.tasks.record_run``, also set as ``TASKMQ_RUN_LOG`` here

Helpers other suites import (``from tests.conftest import db_env, start_script``)
---------------------------------------------------------------------------
``db_env()``         environment for a subprocess that must use this test run's database
``start_script()``   start ``python -c <code>`` with ``db_env()`` (the code runs after ``django.setup()``)

PostgreSQL: the database tests skip only when nothing listens at the configured host and port
and ``CI`` is not ``"true"``; in CI a missing server fails the run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import hypothesis
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Tests assert orders, counts and states, never durations: Hypothesis's per-example deadline and its "input
# generation is slow" health check are timings, which a busy machine (a suite's parallel processes, other runs)
# fails at random. A test's own @settings still wins.
hypothesis.settings.register_profile(
    "taskmq", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("taskmq")


# -- database selection --------------------------------------------------------------------------

def _default_db() -> dict[str, Any]:
    from django.conf import settings

    return settings.DATABASES["default"]


def _is_postgresql() -> bool:
    try:
        return _default_db()["ENGINE"].endswith("postgresql")
    except Exception:  # settings not configured: no database tests to guard
        return False


def _is_mysql() -> bool:
    try:
        return _default_db()["ENGINE"].endswith("mysql")
    except Exception:  # settings not configured
        return False


def _server_absent(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return False
    except OSError:
        return True


def _mysql_address() -> tuple[str, int]:
    db = _default_db()
    return db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 3306)


def unreachable_database_env() -> dict[str, str]:
    """An environment (``db_env``) whose "default" database does not answer, on this run's engine."""
    from django.db import connection

    extra = {"sqlite": {"TASKMQ_DB_NAME": "/nonexistent/dir/db.sqlite3"}, "mysql": {"MYSQL_PORT": "1"}}
    return db_env(extra.get(connection.vendor, {"PGPORT": "1"}))


def _postgresql_address() -> tuple[str, int]:
    """Return the configured server's host (or socket directory) and port: PGHOST and PGPORT by default."""
    db = _default_db()
    host = db.get("HOST") or os.environ.get("PGHOST") or "127.0.0.1"
    return host, int(db.get("PORT") or os.environ.get("PGPORT") or 5432)


def _postgresql_absent() -> bool:
    """Return True when nothing accepts a connection at the configured server (TCP, or its Unix socket)."""
    host, port = _postgresql_address()
    if host.startswith("/"):
        return not Path(host, f".s.PGSQL.{port}").exists()
    return _server_absent(host, port)


def _through_pgbouncer() -> bool:
    """True under ``tests.settings_pgbouncer``: "default" goes through a PgBouncer the tests start."""
    from django.conf import settings

    try:
        return bool(getattr(settings, "PGBOUNCER", False))
    except Exception:  # settings not configured
        return False


# Every test of these folders starts real processes (qcluster, a virtualenv): they carry the "slow" marker, which
# the fast suite (./scripts/test --fast) leaves out. Elsewhere such tests are marked one by one.
SLOW_FOLDERS = ("cluster", "packaging")
# The suites run tests in parallel (pytest-xdist, scripts/suites); these modules carry the "serial" marker and
# run afterwards, alone: they restart (or crash) the shared PostgreSQL server, put a cluster in a network
# namespace, hold every table locked for a fixed stall, drive a browser whose timeouts a busy machine would eat,
# or run on SQLite's defaults (Django's 5 s busy timeout), which three busy neighbours can exhaust.
SERIAL_MODULES = {
    "cluster/test_database_restart.py", "cluster/test_host_cut_off.py", "cluster/test_database_stall.py",
    "cluster/test_operator_browser.py", "cluster/test_payload_browser.py", "cluster/test_durable_outcomes.py",
    "cluster/test_sqlite_defaults.py",
}
DATABASE_FIXTURES = {"db", "transactional_db", "live_server", "broker", "orm_broker", "cluster"}


def _uses_database(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.pgbouncer import pgbouncer_path

    tests = Path(__file__).resolve().parent
    for item in items:
        if not item.path.is_relative_to(tests):
            continue
        where = item.path.relative_to(tests)
        if where.parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
        if where.as_posix() in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
        # Pure logic cannot tell one engine from another: it runs in the SQLite suites only.
        if where.parts[0] == "unit" and not _uses_database(item):
            item.add_marker(pytest.mark.engine_free)

    if _through_pgbouncer() and pgbouncer_path() is None:
        if os.environ.get("CI") == "true":
            raise pytest.UsageError("pgbouncer is not installed and CI=true: the PgBouncer suite must run "
                                    "(scripts/test installs Debian's pgbouncer)")
        skip = pytest.mark.skip(reason="pgbouncer is not installed (set CI=true to make this an error)")
        for item in items:
            item.add_marker(skip)
        return
    if _is_postgresql() and _postgresql_absent():
        engine, where = "PostgreSQL", "{}:{}".format(*_postgresql_address())
    elif _is_mysql() and _server_absent(*_mysql_address()):
        engine, where = "MySQL/MariaDB", "{}:{}".format(*_mysql_address())
    else:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"{engine} at {where} is not reachable and CI=true: the {engine} suite must run")
    skip = pytest.mark.skip(reason=f"{engine} server at {where} not reachable (set CI=true to make this an error)")
    for item in items:
        if item.get_closest_marker("django_db") or {"db", "transactional_db", "broker"} & set(item.fixturenames):
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    """On a pytest-xdist worker, drop the COLUMNS and LINES (80 by 24) that execnet sets there: commands
    (qmonitor) would draw their frames that narrow, unlike in a one-process run."""
    if hasattr(config, "workerinput"):
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Under pytest-xdist, make the report's text UTF-8 encodable: a worker sends it to the controller as
    UTF-8, and a test of unstorable text (a lone surrogate) would otherwise crash the worker with its log."""
    outcome = yield
    if not hasattr(item.config, "workerinput"):
        return
    report = outcome.get_result()

    def clean(text: str) -> str:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

    report.sections = [(clean(title), clean(text)) for title, text in report.sections]
    if report.longrepr is not None and str(report.longrepr) != clean(str(report.longrepr)):
        report.longrepr = clean(str(report.longrepr))


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Give each PostgreSQL or MySQL test run its own database, so concurrent runs never share one.

    (SQLite runs already get their own file.) An explicit ``TASKMQ_DB_NAME`` is kept as is.
    """
    if (_is_postgresql() or _is_mysql()) and not os.environ.get("TASKMQ_DB_NAME"):
        db = _default_db()
        base = db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}"
        db.setdefault("TEST", {})["NAME"] = f"{base}_{os.getpid()}"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's, then under ``tests.settings_pgbouncer``: "default" through PgBouncer.

    The test database is created directly on the server (PgBouncer maps a name, it cannot drop a
    database it holds connections to); afterwards this process and every qcluster it starts
    (``TASKMQ_PGBOUNCER_PORT``) go through PgBouncer. At the end PgBouncer stops first, so the
    database can be dropped directly.
    """
    from django.db import connections

    from tests import pgbouncer

    if not _through_pgbouncer():
        try:
            yield
        finally:
            pgbouncer.stop()  # one a test started (the pgbouncer fixture), before the database is dropped
        return

    db = connections["default"].settings_dict
    host, direct_port = db.get("HOST") or "127.0.0.1", db.get("PORT") or "5432"
    bouncer = pgbouncer.running(host, int(direct_port))
    with django_db_blocker.unblock():
        connections["default"].close()
    db["PORT"] = str(bouncer.port)
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            connections.close_all()
        pgbouncer.stop()
        db["PORT"] = direct_port


@pytest.fixture
def pgbouncer(django_db_setup):
    """This run's PgBouncer (``tests.pgbouncer.PgBouncer``): the one "default" goes through under
    ``tests.settings_pgbouncer``, else one started now in front of the same server."""
    from django.db import connections

    from tests import pgbouncer

    db = connections["default"].settings_dict
    if _through_pgbouncer():
        return pgbouncer.running()
    return pgbouncer.running(db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432))


# -- helpers for subprocesses ---------------------------------------------------------------------

def db_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return an environment for a subprocess that uses this test run's database and settings.

    ``TASKMQ_DB_NAME`` is the *test* database of connection "default" (a file for SQLite, a
    database name for PostgreSQL), ``DJANGO_SETTINGS_MODULE`` the settings module of this run,
    and the repository root leads ``PYTHONPATH`` so ``tests.*`` and ``django_taskmq`` import.
    Call it from a test that holds the database (after the test database was created).
    """
    from django.conf import settings
    from django.db import connections

    env = dict(os.environ)
    env["TASKMQ_DB_NAME"] = str(connections["default"].settings_dict["NAME"])
    env["DJANGO_SETTINGS_MODULE"] = os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    if extra:
        env.update(extra)
    return env


SCRIPT_PRELUDE = "import django\ndjango.setup()\n"


def start_script(code: str, *args: str, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """Start ``python -c code args...`` on this run's test database; return the Popen.

    ``code`` is dedented and runs after ``django.setup()``; ``sys.argv[1:]`` holds ``args``.
    stdout and stderr are pipes (text) unless ``popen`` says otherwise.
    """
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    popen.setdefault("text", True)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT_PRELUDE + textwrap.dedent(code), *args],
        env=dict(env) if env is not None else db_env(), cwd=str(ROOT), **popen,
    )


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    """Wait for ``proc``; return its stdout, or fail the test with its stderr if it did not exit 0."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"subprocess {proc.args[:2]} did not finish within {timeout} s:\n{err}")
    if proc.returncode != 0:
        pytest.fail(f"subprocess exited with {proc.returncode}:\n{err}")
    return out


# -- fixtures --------------------------------------------------------------------------------------

@pytest.fixture
def taskmq_settings(settings) -> Callable[..., dict]:
    """Return ``override(**keys)``: replace ``TASKMQ`` keys for this test; return the new dict.

    Assigning ``settings.TASKMQ`` sends ``setting_changed``, which resets the cached settings
    (and the broker built from them); pytest-django restores the original after the test.
    """
    def override(**changes: Any) -> dict:
        settings.TASKMQ = {**settings.TASKMQ, **changes}
        return settings.TASKMQ

    return override


@pytest.fixture
def broker(db):
    """Return the configured broker (``get_broker()``) on a clean database.

    The broker cache is cleared first, so no state of an earlier test's broker object carries over.
    """
    from django_taskmq import brokers

    brokers._brokers.clear()
    yield brokers.get_broker()
    brokers._brokers.clear()


@pytest.fixture
def enqueue(db) -> Callable[..., list[str]]:
    """Return ``enqueue(n, func="tests.tasks.noop", **options)``: ``n`` async_task calls, ids in order.

    Each call gets its index as its only argument.
    """
    from django_taskmq import async_task

    def enqueue_n(n: int, func: Any = "tests.tasks.noop", **options: Any) -> list[str]:
        return [async_task(func, i, **options) for i in range(n)]

    return enqueue_n


@pytest.fixture
def run_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return a fresh run-log path, set as ``TASKMQ_RUN_LOG`` for this process (and ``db_env()``)."""
    path = tmp_path / "runs.log"
    monkeypatch.setenv("TASKMQ_RUN_LOG", str(path))
    return path
