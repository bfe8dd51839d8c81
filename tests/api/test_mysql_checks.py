"""MySQL/MariaDB: the start-up checks that ask the server (taskmq.E012-E014), on the real server of
the run (the MySQL suite), each naming what to change; and qcluster refusing to start on them."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core import checks
from django.db import connection, connections

from django_taskmq.brokers.orm.mysql import version_problem
from django_taskmq.checks import SERVER_TAG
from django_taskmq.models import QueuePause

from ..conftest import ROOT, db_env

on_mysql = pytest.mark.skipif(connection.vendor != "mysql", reason="asks a MySQL/MariaDB server")


@contextlib.contextmanager
def on_myisam(table: str) -> Iterator[str]:
    """Run the block with ``table`` on MyISAM (a real ALTER TABLE), then on InnoDB again."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ENGINE=MyISAM")
    try:
        yield table
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ENGINE=InnoDB")


def server_errors() -> list[checks.CheckMessage]:
    return checks.run_checks(tags=[SERVER_TAG], databases=["default"])


def test_the_oldest_servers_with_skip_locked_pass_and_older_ones_are_refused():
    assert version_problem((8, 0, 1), mariadb=False) is None
    assert version_problem((10, 6, 0), mariadb=True) is None
    assert version_problem((11, 4, 2), mariadb=True) is None
    check_id, problem, hint = version_problem((8, 0, 0), mariadb=False)
    assert check_id == "taskmq.E012" and "MySQL 8.0.0 is too old" in problem and "8.0.1 or later" in problem
    check_id, problem, _ = version_problem((10, 5, 22), mariadb=True)
    assert check_id == "taskmq.E012" and "MariaDB 10.5.22" in problem and "10.6.0 or later" in problem
    assert "Upgrade the server" in hint


@on_mysql
@pytest.mark.django_db
def test_the_server_of_this_run_passes():
    assert server_errors() == []


@on_mysql
@pytest.mark.django_db(transaction=True)
def test_a_table_that_is_not_innodb_is_refused_naming_it():
    with on_myisam(QueuePause._meta.db_table) as table:
        (error,) = server_errors()
        assert error.id == "taskmq.E013" and error.is_serious()
        assert f"{table} (MyISAM)" in error.msg and "ENGINE=InnoDB" in error.hint
    assert server_errors() == []


@on_mysql
@pytest.mark.django_db(transaction=True)  # a new connection, with the option
def test_repeatable_read_is_refused_naming_the_option():
    options = connections["default"].settings_dict.setdefault("OPTIONS", {})
    before = options.get("isolation_level")
    options["isolation_level"] = "repeatable read"
    connections["default"].close()
    try:
        (error,) = server_errors()
        assert error.id == "taskmq.E014" and "REPEATABLE READ" in error.msg and "READ COMMITTED" in error.msg
        assert "DATABASES['default']['OPTIONS']['isolation_level'] = 'read committed'" in error.hint
    finally:
        if before is None:
            options.pop("isolation_level")
        else:
            options["isolation_level"] = before
        connections["default"].close()
    assert server_errors() == []


@pytest.mark.slow
@on_mysql
@pytest.mark.django_db(transaction=True)
def test_qcluster_does_not_start_on_a_refused_server():
    with on_myisam(QueuePause._meta.db_table) as table:
        done = subprocess.run([sys.executable, "manage.py", "qcluster"], cwd=str(ROOT), env=db_env(),
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "taskmq.E013" in done.stderr and table in done.stderr, done.stderr
