"""``DATABASES`` for the benchmark projects, chosen by environment variables.

Both projects' settings call :func:`databases`, so the two systems always get the same
database configuration apart from what a system variant overrides on purpose.

BENCH_ENGINE        ``sqlite`` (default), ``postgresql`` or ``mysql`` (MariaDB or MySQL)
BENCH_SQLITE_PATH   SQLite file (default ``.work/db/<project>.sqlite3``)
BENCH_PG_NAME       PostgreSQL database (default: the project's own, e.g. ``bench_dq2``)
BENCH_PG_HOST/PORT/USER/PASSWORD   default 127.0.0.1 / 5432 / postgres / (none)
BENCH_MYSQL_NAME    MariaDB/MySQL database (default: the project's own, e.g. ``bench_dq2``)
BENCH_MYSQL_HOST/PORT/USER/PASSWORD   default 127.0.0.1 / 3306 / root / (none)
BENCH_CONN_MAX_AGE  Django's CONN_MAX_AGE; default 0, Django's own default
"""

from __future__ import annotations

import os
from pathlib import Path

WORK_DIR = Path(__file__).resolve().parent / ".work"


def pg_params() -> dict[str, str]:
    """Return libpq-style connection parameters for the benchmark's PostgreSQL server."""
    return {
        "host": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
        "port": os.environ.get("BENCH_PG_PORT", "5432"),
        "user": os.environ.get("BENCH_PG_USER", "postgres"),
        "password": os.environ.get("BENCH_PG_PASSWORD", ""),
    }


def mysql_params() -> dict[str, str]:
    """Return connection parameters for the benchmark's MariaDB (or MySQL) server."""
    return {
        "host": os.environ.get("BENCH_MYSQL_HOST", "127.0.0.1"),
        "port": os.environ.get("BENCH_MYSQL_PORT", "3306"),
        "user": os.environ.get("BENCH_MYSQL_USER", "root"),
        "password": os.environ.get("BENCH_MYSQL_PASSWORD", ""),
    }


def databases(project: str, pg_database: str, sqlite_options: dict | None = None) -> dict:
    """Return Django's ``DATABASES`` for the engine named by ``BENCH_ENGINE``."""
    engine = os.environ.get("BENCH_ENGINE", "sqlite")
    conn_max_age = int(os.environ.get("BENCH_CONN_MAX_AGE", "0"))
    if engine == "sqlite":
        # WAL is not set here: it is a property of the file, set once on the template
        # database (see workloads.py), so no system pays a PRAGMA per connection.
        path = os.environ.get("BENCH_SQLITE_PATH") or str(WORK_DIR / "db" / f"{project}.sqlite3")
        default = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            "CONN_MAX_AGE": conn_max_age,
            "OPTIONS": dict(sqlite_options or {}),
        }
    elif engine == "postgresql":
        params = pg_params()
        default = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("BENCH_PG_NAME", pg_database),
            "USER": params["user"],
            "PASSWORD": params["password"],
            "HOST": params["host"],
            "PORT": params["port"],
            "CONN_MAX_AGE": conn_max_age,
        }
    elif engine == "mysql":
        # Django's MySQL backend with its defaults (READ COMMITTED, Django's default isolation,
        # no init_command, the server's sql_mode); utf8mb4 as any current project sets it.
        params = mysql_params()
        default = {
            "ENGINE": "django.db.backends.mysql",
            "NAME": os.environ.get("BENCH_MYSQL_NAME", pg_database),
            "USER": params["user"],
            "PASSWORD": params["password"],
            "HOST": params["host"],
            "PORT": params["port"],
            "CONN_MAX_AGE": conn_max_age,
            "OPTIONS": {"charset": "utf8mb4"},
        }
    else:
        raise ValueError(f"BENCH_ENGINE must be 'sqlite', 'postgresql' or 'mysql', got {engine!r}")
    return {"default": default}
