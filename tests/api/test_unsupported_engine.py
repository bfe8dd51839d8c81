"""An engine without a dialect (``brokers/orm/``) is refused at start-up by a system check naming the
engine and what to use instead, without a connection: never a cluster looping on SQL errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from django_taskmq.brokers.orm.dialect import dialect_for, dialect_named, engine_problem
from django_taskmq.checks import check_settings
from django_taskmq.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[2]
MYSQL = {"ENGINE": "django.db.backends.mysql", "NAME": "taskmq_refused", "HOST": "127.0.0.1", "PORT": "3306",
         "USER": "root"}

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


def refusal(settings, database: dict) -> list:
    settings.DATABASES = {**settings.DATABASES, "jobs": database}
    settings.TASKMQ = {**settings.TASKMQ, "database": "jobs"}
    return [m for m in check_settings() if m.id == "taskmq.E006"]


def test_the_check_refuses_mysql_saying_it_is_not_supported_yet(settings):
    (error,) = refusal(settings, MYSQL)
    assert error.is_serious()
    assert "TASKMQ['database'] 'jobs'" in error.msg and "'django.db.backends.mysql'" in error.msg
    assert "MySQL and MariaDB are not supported yet" in error.msg
    assert "PostgreSQL" in error.hint and "SQLite" in error.hint


def test_the_check_refuses_an_engine_it_does_not_know_naming_it(settings):
    (error,) = refusal(settings, {"ENGINE": "acme.db.backends.fancydb", "NAME": "x"})
    assert "'acme.db.backends.fancydb'" in error.msg and "'fancydb' is not supported" in error.msg


def test_the_supported_engines_pass_the_check(settings):
    assert refusal(settings, {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}) == []
    assert refusal(settings, {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}) == []
    assert engine_problem("default") is None


def test_the_broker_finds_no_dialect_for_an_unsupported_connection():
    class Connection:  # what dialect_for reads of Django's connection
        vendor, alias = "mysql", "jobs"

    with pytest.raises(ConfigError, match="'jobs': MySQL and MariaDB are not supported yet"):
        dialect_for(Connection())
    assert dialect_named("mysql") is None and dialect_named("broker") is None
    assert (dialect_named("sqlite").vendor, dialect_named("postgresql").vendor) == ("sqlite", "postgresql")


def _has_mysqlclient() -> bool:
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_mysqlclient() and os.environ.get("CI") != "true",
                    reason="Django's MySQL backend needs mysqlclient (scripts/test installs it; CI=true requires it)")
# The checks qcluster runs (its own tag): Django 6.1's plain ``check`` also runs the MySQL backend's
# own database checks, which connect first.
@pytest.mark.parametrize("command", [["check", "--tag", "taskmq"], ["qcluster"]])
def test_start_up_on_mysql_fails_with_the_check_not_a_loop_of_sql_errors(command):
    """The real ``manage.py``: the error is the check's, whether or not the MySQL driver is installed,
    and it comes before any connection (the database named does not exist)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_unsupported_engine", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "manage.py", *command], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "taskmq.E006" in done.stderr and "MySQL and MariaDB are not supported yet" in done.stderr
    assert "Use PostgreSQL" in done.stderr
