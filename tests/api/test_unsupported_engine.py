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
ORACLE = {"ENGINE": "django.db.backends.oracle", "NAME": "taskmq_refused", "HOST": "127.0.0.1", "USER": "taskmq"}

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


def refusal(settings, database: dict) -> list:
    settings.DATABASES = {**settings.DATABASES, "jobs": database}
    settings.TASKMQ = {**settings.TASKMQ, "database": "jobs"}
    return [m for m in check_settings() if m.id == "taskmq.E006"]


def test_the_check_refuses_oracle_saying_it_is_not_supported(settings):
    (error,) = refusal(settings, ORACLE)
    assert error.is_serious()
    assert "TASKMQ['database'] 'jobs'" in error.msg and "'django.db.backends.oracle'" in error.msg
    assert "Oracle is not supported" in error.msg
    assert "PostgreSQL" in error.hint and "MySQL/MariaDB" in error.hint and "SQLite" in error.hint


def test_the_check_refuses_an_engine_it_does_not_know_naming_it(settings):
    (error,) = refusal(settings, {"ENGINE": "acme.db.backends.fancydb", "NAME": "x"})
    assert "'acme.db.backends.fancydb'" in error.msg and "'fancydb' is not supported" in error.msg


def test_the_supported_engines_pass_the_check(settings):
    assert refusal(settings, {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}) == []
    assert refusal(settings, {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}) == []
    assert refusal(settings, {"ENGINE": "django.db.backends.mysql", "NAME": "x"}) == []
    assert engine_problem("default") is None


def test_the_broker_finds_no_dialect_for_an_unsupported_connection():
    class Connection:  # what dialect_for reads of Django's connection
        vendor, alias = "oracle", "jobs"

    with pytest.raises(ConfigError, match="'jobs': Oracle is not supported"):
        dialect_for(Connection())
    assert dialect_named("oracle") is None and dialect_named("broker") is None
    assert [dialect_named(v).vendor for v in ("sqlite", "postgresql", "mysql")] == ["sqlite", "postgresql", "mysql"]


# The checks qcluster runs (its own tag): Django 6.1's plain ``check`` also runs a backend's own
# database checks, which connect first.
@pytest.mark.slow
@pytest.mark.parametrize("command", [["check", "--tag", "taskmq"], ["qcluster"]])
def test_start_up_on_an_unsupported_engine_fails_with_the_check_not_a_loop_of_sql_errors(command):
    """The real ``manage.py`` on a working backend of an unknown engine: the error is the check's,
    before any connection."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_unsupported_engine", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "manage.py", *command], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "taskmq.E006" in done.stderr and "the database engine 'fancydb' is not supported" in done.stderr
    assert "Use PostgreSQL" in done.stderr
