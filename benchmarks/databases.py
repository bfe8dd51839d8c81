"""Fresh databases for every workload, cloned from a migrated template.

Runs inside a system's venv, before ``django.setup()``. Migrating once per session and
copying the result (a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on
PostgreSQL, the template's ``SHOW CREATE TABLE`` and rows on MariaDB, which has no
template databases) keeps "each workload from a fresh database" cheap.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

from benchdb import mysql_params, pg_params
from systems import WORK_DIR, System

SQLITE_DIR = WORK_DIR / "db"


def _sqlite_paths(system: System):
    live = SQLITE_DIR / f"{system.sqlite_name}.sqlite3"
    return live, SQLITE_DIR / f"{system.sqlite_name}-template.sqlite3"


def _template_name(system: System) -> str:
    return f"{system.pg_database}_template"


def _redis(db: int):
    import redis

    return redis.Redis(host=os.environ.get("BENCH_REDIS_HOST", "127.0.0.1"),
                       port=int(os.environ.get("BENCH_REDIS_PORT", "6379")), db=db)


def _redis_dbs() -> tuple[int, int]:
    return (int(os.environ.get("BENCH_REDIS_BROKER_DB", "10")),
            int(os.environ.get("BENCH_REDIS_RESULT_DB", "11")))


def database_env(system: System, engine: str) -> dict[str, str]:
    """Return the BENCH_* variables that point the project at its live database."""
    env = {"BENCH_ENGINE": engine}
    if engine == "redis":
        return {}
    if engine == "sqlite":
        env["BENCH_SQLITE_PATH"] = str(_sqlite_paths(system)[0])
    elif engine == "mysql":
        env["BENCH_MYSQL_NAME"] = system.pg_database
    else:
        env["BENCH_PG_NAME"] = system.pg_database
    return env


def _pg_admin(*statements: str) -> list:
    """Run statements on the maintenance database in autocommit; return the last rows."""
    import psycopg

    rows: list = []
    with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as conn:
        for statement in statements:
            cur = conn.execute(statement)
            rows = cur.fetchall() if cur.description else []
    return rows


def _mysql_connect(database: str | None = None):
    """A mysqlclient connection to the benchmark's MariaDB server (autocommit)."""
    import MySQLdb

    params = mysql_params()
    kwargs = {"host": params["host"], "port": int(params["port"]), "user": params["user"],
              "passwd": params["password"], "charset": "utf8mb4", "autocommit": True}
    if database:
        kwargs["db"] = database
    return MySQLdb.connect(**kwargs)


def _mysql_admin(*statements: str) -> list:
    """Run statements without a default database in autocommit; return the last rows."""
    conn = _mysql_connect()
    try:
        rows: list = []
        cur = conn.cursor()
        for statement in statements:
            cur.execute(statement)
            rows = list(cur.fetchall()) if cur.description else []
        return rows
    finally:
        conn.close()


def _mysql_drop(conn, name: str) -> None:
    """Drop database ``name``, first killing the connections that use it (PostgreSQL's
    ``WITH (FORCE)``): a cluster that was stopped uncleanly must not block the next run."""
    cur = conn.cursor()
    cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
                (name,))
    for (thread_id,) in cur.fetchall():
        try:
            cur.execute(f"KILL {int(thread_id)}")
        except Exception:  # already gone
            pass
    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _mysql_clone(template: str, live: str) -> None:
    """Make ``live`` a copy of ``template``: every table's ``SHOW CREATE TABLE`` and its rows.

    MariaDB has no ``CREATE DATABASE ... TEMPLATE``. ``CREATE TABLE ... LIKE`` would drop the
    foreign keys, so the template's own DDL is replayed (foreign key checks off, so the
    order does not matter); generated (virtual) columns are computed, never copied.
    """
    conn = _mysql_connect()
    try:
        cur = conn.cursor()
        _mysql_drop(conn, live)
        cur.execute(f"CREATE DATABASE `{live}` CHARACTER SET utf8mb4")
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", (template,))
        tables = [row[0] for row in cur.fetchall()]
        cur.execute(f"USE `{live}`")
        cur.execute("SET SESSION foreign_key_checks = 0")
        for table in tables:
            cur.execute(f"SHOW CREATE TABLE `{template}`.`{table}`")
            cur.execute(cur.fetchone()[1])
        for table in tables:
            cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s AND EXTRA NOT LIKE '%%GENERATED%%' ORDER BY ORDINAL_POSITION",
                        (template, table))
            columns = ", ".join(f"`{row[0]}`" for row in cur.fetchall())
            cur.execute(f"INSERT INTO `{live}`.`{table}` ({columns}) "
                        f"SELECT {columns} FROM `{template}`.`{table}`")
    finally:
        conn.close()


def _remove_sqlite(path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _migrate(system: System, env: dict[str, str]) -> None:
    # A subprocess, so this process never runs django.setup() against the template.
    result = subprocess.run(
        [sys.executable, str(system.project_dir / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env={**os.environ, **system.env, **env}, cwd=system.project_dir,
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"migrate failed for {system.name}:\n{result.stdout}\n{result.stderr}")


def template_exists(system: System, engine: str) -> bool:
    if engine == "redis":
        return True
    if engine == "sqlite":
        return _sqlite_paths(system)[1].exists()
    if engine == "mysql":
        return bool(_mysql_admin(f"SELECT 1 FROM information_schema.SCHEMATA "
                                 f"WHERE SCHEMA_NAME = '{_template_name(system)}'"))
    rows = _pg_admin(f"SELECT 1 FROM pg_database WHERE datname = '{_template_name(system)}'")
    return bool(rows)


def prepare_template(system: System, engine: str) -> None:
    """Create the template database from scratch and run the project's migrations."""
    if engine == "redis":
        return  # nothing to migrate: fresh_database flushes the two Redis databases
    if engine == "sqlite":
        SQLITE_DIR.mkdir(parents=True, exist_ok=True)
        template = _sqlite_paths(system)[1]
        _remove_sqlite(template)
        _migrate(system, {"BENCH_ENGINE": "sqlite", "BENCH_SQLITE_PATH": str(template)})
        # journal_mode=WAL is stored in the file and survives the copy; closing the
        # only connection checkpoints, so the template is one self-contained file.
        conn = sqlite3.connect(template)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.close()
        if mode != "wal":
            raise RuntimeError(f"could not set WAL on {template}: journal_mode={mode}")
    elif engine == "mysql":
        name = _template_name(system)
        conn = _mysql_connect()
        try:
            _mysql_drop(conn, name)
            conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
        _migrate(system, {"BENCH_ENGINE": "mysql", "BENCH_MYSQL_NAME": name})
    else:
        name = _template_name(system)
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        _migrate(system, {"BENCH_ENGINE": "postgresql", "BENCH_PG_NAME": name})


def fresh_database(system: System, engine: str) -> None:
    """Replace the live database with a copy of the template."""
    if engine == "redis":
        for db in _redis_dbs():
            _redis(db).flushdb()
        return
    if not template_exists(system, engine):
        prepare_template(system, engine)
    if engine == "sqlite":
        live, template = _sqlite_paths(system)
        _remove_sqlite(live)
        shutil.copyfile(template, live)
    elif engine == "mysql":
        _mysql_clone(_template_name(system), system.pg_database)
    else:
        _pg_admin(
            f'DROP DATABASE IF EXISTS "{system.pg_database}" WITH (FORCE)',
            f'CREATE DATABASE "{system.pg_database}" TEMPLATE "{_template_name(system)}"',
        )


def server_info(engine: str) -> dict:
    """Return the database engine's version as seen from this venv."""
    if engine == "sqlite":
        return {"sqlite": sqlite3.sqlite_version}
    if engine == "redis":
        return {"redis": _redis(_redis_dbs()[0]).info("server").get("redis_version")}
    if engine == "mysql":
        return {"mysql": _mysql_admin("SELECT VERSION()")[0][0]}
    rows = _pg_admin("SHOW server_version")
    return {"postgresql": rows[0][0]}


RAW_PAYLOAD = "x" * 200  # about the size of a small signed job package


def raw_commit_rate(system: System, engine: str, n: int) -> dict:
    """Single-row INSERT + COMMIT, ``n`` times, on the system's live database: the ceiling
    a single enqueue (one commit each) can approach on this machine, measured in the same
    workload run. No Django: the database's own driver, one connection, a new table.

    SQLite: the live file (WAL, the default ``synchronous``), ``BEGIN IMMEDIATE`` like a
    writer that wants the lock at once. PostgreSQL: psycopg, default ``synchronous_commit``.
    MariaDB: mysqlclient, an InnoDB table, the server's ``innodb_flush_log_at_trx_commit``.
    Redis (Celery): one ``RPUSH`` per call, the round trip a send costs at least.
    """
    warmup = 10
    if engine == "sqlite":
        conn = sqlite3.connect(_sqlite_paths(system)[0], isolation_level=None, timeout=20)
        conn.execute("CREATE TABLE bench_raw (id INTEGER PRIMARY KEY, payload TEXT)")

        def one():
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_raw (payload) VALUES (?)", (RAW_PAYLOAD,))
            conn.execute("COMMIT")
        close = conn.close
    elif engine == "postgresql":
        import psycopg

        conn = psycopg.connect(dbname=system.pg_database, **pg_params())
        conn.execute("CREATE TABLE bench_raw (id bigserial PRIMARY KEY, payload text)")
        conn.commit()

        def one():
            conn.execute("INSERT INTO bench_raw (payload) VALUES (%s)", (RAW_PAYLOAD,))
            conn.commit()
        close = conn.close
    elif engine == "mysql":
        conn = _mysql_connect(system.pg_database)
        conn.autocommit(False)
        cursor = conn.cursor()
        cursor.execute("CREATE TABLE bench_raw (id bigint AUTO_INCREMENT PRIMARY KEY, payload longtext) "
                       "ENGINE=InnoDB")

        def one():
            cursor.execute("INSERT INTO bench_raw (payload) VALUES (%s)", (RAW_PAYLOAD,))
            conn.commit()
        close = conn.close
    else:
        client = _redis(_redis_dbs()[0])

        def one():
            client.rpush("bench_raw", RAW_PAYLOAD)
        close = client.close
    try:
        for _ in range(warmup):
            one()
        t0 = time.perf_counter()
        for _ in range(n):
            one()
        seconds = time.perf_counter() - t0
    finally:
        close()
    return {"n": n, "seconds": seconds, "commits_per_s": n / seconds}
