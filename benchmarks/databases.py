"""Fresh databases for every workload, cloned from a migrated template.

Runs inside a system's venv, before ``django.setup()``. Migrating once per session and
copying the result (a file copy on SQLite, ``CREATE DATABASE ... TEMPLATE`` on
PostgreSQL) keeps "each workload from a fresh database" cheap.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time

from benchdb import pg_params
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
    rows = _pg_admin("SHOW server_version")
    return {"postgresql": rows[0][0]}


RAW_PAYLOAD = "x" * 200  # about the size of a small signed job package


def raw_commit_rate(system: System, engine: str, n: int) -> dict:
    """Single-row INSERT + COMMIT, ``n`` times, on the system's live database: the ceiling
    a single enqueue (one commit each) can approach on this machine, measured in the same
    workload run. No Django: the database's own driver, one connection, a new table.

    SQLite: the live file (WAL, the default ``synchronous``), ``BEGIN IMMEDIATE`` like a
    writer that wants the lock at once. PostgreSQL: psycopg, default ``synchronous_commit``.
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
