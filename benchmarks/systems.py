"""What is benchmarked: the virtual environments and the systems that run in them.

Stdlib only: imported by ``run.py`` (bare python3) and by ``workloads.py`` (inside a venv).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
WORK_DIR = BENCH_DIR / ".work"
PROJECTS_DIR = BENCH_DIR / "projects"
RESULTS_DIR = BENCH_DIR / "results"

# Same Django series on both sides, so the framework is not what differs.
DJANGO_REQUIREMENT = "Django>=5.2,<5.3"
PSYCOPG_REQUIREMENT = "psycopg[binary]>=3.1"
# Django's MySQL/MariaDB backend needs mysqlclient (built from source against Debian's
# libmariadb-dev, found through pkg-config); every system that runs on MariaDB gets it.
MYSQLCLIENT_REQUIREMENT = "mysqlclient>=2.2"


@dataclass(frozen=True)
class VenvSpec:
    """A virtual environment under ``.work/``, rebuilt when its fingerprint changes.

    ``fingerprint_files`` are files whose content decides what gets installed (the repo's
    packaging metadata for an editable install), so an edit to them triggers a reinstall.
    """

    name: str
    requirements: tuple[str, ...]
    fingerprint_files: tuple[Path, ...] = ()
    # The Python series the venv needs when the peer requires a newer one than run.py's
    # (oban and steady-queue need 3.12+); venvs.interpreter() finds one.
    min_python: tuple[int, int] | None = None

    @property
    def path(self) -> Path:
        return WORK_DIR / f"venv-{self.name}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


VENVS: dict[str, VenvSpec] = {
    "djangoq2": VenvSpec(
        name="djangoq2",
        # Latest django-q2 from PyPI, deliberately unpinned: the peer at its best today.
        # No psutil: django-q2 changes behaviour when it is importable, and /proc suffices.
        requirements=("django-q2", DJANGO_REQUIREMENT, PSYCOPG_REQUIREMENT, MYSQLCLIENT_REQUIREMENT),
    ),
    "taskmq": VenvSpec(
        name="taskmq",
        requirements=("-e", f"{REPO_ROOT}[postgres]", DJANGO_REQUIREMENT, MYSQLCLIENT_REQUIREMENT),
        fingerprint_files=(REPO_ROOT / "setup.cfg", REPO_ROOT / "pyproject.toml"),
    ),
    # Celery with the Redis broker and result backend (redis-py), prefork pool. No Django
    # app: the worker imports projects/celery_project/celeryapp.py. Django is installed
    # only so the driver can run with the same helpers as the others.
    "celery": VenvSpec(
        name="celery",
        requirements=("celery[redis]", DJANGO_REQUIREMENT),
    ),
    # django-tasks-db (the ORM backend of Django's tasks framework) with the django-tasks
    # backport on Django 5.2 (its [compat] extra).
    "dtdb": VenvSpec(
        name="dtdb",
        requirements=("django-tasks-db[compat]", DJANGO_REQUIREMENT, PSYCOPG_REQUIREMENT,
                      MYSQLCLIENT_REQUIREMENT),
    ),
    # Dramatiq with its Redis broker and Redis result backend (the [redis] extra). Django only
    # so the driver runs like the others; the worker (`dramatiq dramatiqapp`) imports none.
    "dramatiq": VenvSpec(
        name="dramatiq",
        requirements=("dramatiq[redis]", DJANGO_REQUIREMENT),
    ),
    # Procrastinate through its Django integration (procrastinate.contrib.django); PostgreSQL only.
    "procrastinate": VenvSpec(
        name="procrastinate",
        requirements=("procrastinate[django]", DJANGO_REQUIREMENT, PSYCOPG_REQUIREMENT),
    ),
    # oban-py (`oban` on PyPI), PostgreSQL only, Python 3.12+. Django only for the driver and
    # to install oban's schema as a migration (the way oban.schema's docs show).
    "oban": VenvSpec(
        name="oban",
        requirements=("oban", DJANGO_REQUIREMENT, PSYCOPG_REQUIREMENT),
        min_python=(3, 12),
    ),
    # Steady Queue, a backend of Django 6's django.tasks: Django 6.0 and so Python 3.12+.
    "steadyqueue": VenvSpec(
        name="steadyqueue",
        requirements=("steady-queue", "Django>=6.0,<6.1", PSYCOPG_REQUIREMENT, MYSQLCLIENT_REQUIREMENT),
        min_python=(3, 12),
    ),
    # Only for the PNG plot; kept apart so plotting never changes a measured environment.
    "tools": VenvSpec(name="tools", requirements=("matplotlib",)),
    # "taskmq-base" (an earlier commit of django_taskmq) is added by run.py --baseline:
    # its tree is only known at run time (see baseline_venv).
}

BASELINE_VENV = "taskmq-base"
BASELINE_MARKER = ".bench-baseline"  # in the exported tree: the full sha it was exported from


def baseline_tree(short_sha: str) -> Path:
    """Where ``run.py --baseline`` exports the baseline commit (``git archive``)."""
    return WORK_DIR / f"baseline-{short_sha}"


def baseline_venv(tree: Path) -> VenvSpec:
    """The venv of ``taskmq-base``: ``tree`` installed like the working tree in ``taskmq``.

    The tree's directory names the commit and its marker file holds the full sha, so
    another ``--baseline`` commit changes the fingerprint and reinstalls.
    """
    return VenvSpec(
        name=BASELINE_VENV,
        requirements=("-e", f"{tree}[postgres]", DJANGO_REQUIREMENT, MYSQLCLIENT_REQUIREMENT),
        fingerprint_files=(tree / BASELINE_MARKER, tree / "setup.cfg", tree / "pyproject.toml"),
    )


@dataclass(frozen=True)
class System:
    """One contestant: a venv, a Django project, an adapter and extra environment.

    ``env`` is added to the environment of the driver and of the cluster, which is how
    a variant (``djangoq2-tuned``) changes a setting without a second project.
    ``db_name`` names the SQLite files (``.work/db/<db_name>.sqlite3`` and its template;
    default: the project's name); ``pg_database`` names the server databases, on PostgreSQL
    and on MariaDB alike (``bench_*``); two systems share databases only if they share a schema.
    """

    name: str
    label: str
    venv: str
    project: str
    adapter: str
    pg_database: str
    env: dict[str, str] = field(default_factory=dict)
    db_name: str = ""
    # Engines the system runs on; None: the database engines (--engines). Celery runs on
    # Redis only, whatever --engines says.
    engines: tuple[str, ...] | None = None
    # How the "cluster" is started: "qcluster" (manage.py qcluster), "celery" (celery
    # worker) or "db_worker" (two manage.py db_worker processes under a tiny shell).
    launcher: str = "qcluster"

    @property
    def sqlite_name(self) -> str:
        return self.db_name or self.project

    @property
    def database_key(self) -> tuple[str, str]:
        """Systems with the same key share their live and template databases."""
        return (self.sqlite_name, self.pg_database)

    def engines_for(self, selected) -> list[str]:
        """Return the engines this system runs on, given the --engines selection.

        Redis (the Redis-only peers) runs whatever --engines says; a peer limited to some
        database engines (PostgreSQL-only ones) runs on those that are selected.
        """
        if self.engines is None:
            return [e for e in selected if e in DATABASE_ENGINES]
        return [e for e in self.engines if e == "redis" or e in selected]

    @property
    def project_dir(self) -> Path:
        return PROJECTS_DIR / self.project

    @property
    def settings_module(self) -> str:
        return f"{self.project}.settings"


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System(
            name="taskmq",
            label="django_taskmq",
            venv="taskmq",
            project="taskmq_project",
            adapter="taskmq",
            pg_database="bench_taskmq",
        ),
        System(
            # An earlier commit of django_taskmq (run.py --baseline <ref>): same project,
            # adapter and workloads, its own venv and databases (its own migrations).
            name="taskmq-base",
            label="django_taskmq (baseline commit)",
            venv=BASELINE_VENV,
            project="taskmq_project",
            adapter="taskmq",
            pg_database="bench_taskmq_base",
            db_name="taskmq_base",
        ),
        System(
            name="djangoq2",
            label="django-q2 (ORM broker)",
            venv="djangoq2",
            project="djangoq2_project",
            adapter="djangoq2",
            pg_database="bench_dq2",
        ),
        System(
            name="djangoq2-tuned",
            label="django-q2 (ORM broker, CONN_MAX_AGE=60)",
            venv="djangoq2",
            project="djangoq2_project",
            adapter="djangoq2",
            pg_database="bench_dq2",
            env={"BENCH_CONN_MAX_AGE": "60"},
        ),
        System(
            # django-tasks-db: Django's tasks framework, ORM backend, its db_worker command
            # (one process, one task at a time): two of them for "2 workers".
            name="dtdb",
            label="django-tasks-db (db_worker x2)",
            venv="dtdb",
            project="dtdb_project",
            adapter="dtdb",
            pg_database="bench_dtdb",
            launcher="db_worker",
        ),
        System(
            # Celery, Redis broker and result backend, prefork pool with concurrency 2.
            name="celery",
            label="Celery + Redis (prefork, concurrency 2)",
            venv="celery",
            project="celery_project",
            adapter="celery",
            pg_database="",
            engines=("redis",),
            launcher="celery",
        ),
        System(
            # The same Celery against a Redis that keeps every write on disk before it answers
            # (appendonly yes, appendfsync always): the durability of a database commit. A private
            # redis-server that durable_redis.py starts on DURABLE_REDIS_PORT, never the machine's.
            name="celery-durable",
            label="Celery + Redis with appendfsync always (prefork, concurrency 2)",
            venv="celery",
            project="celery_project",
            adapter="celery",
            pg_database="",
            env={"BENCH_REDIS_PORT": "6390"},
            engines=("redis",),
            launcher="celery",
        ),
        System(
            # django_taskmq with TASKMQ['durable_outcomes'] False: the cluster's own commits (claims,
            # outcomes) skip the disk flush; the enqueue's commit still flushes. Same project and
            # databases as "taskmq" (each run starts from a fresh copy anyway).
            name="taskmq-relaxed",
            label="django_taskmq, durable_outcomes False",
            venv="taskmq",
            project="taskmq_project",
            adapter="taskmq",
            pg_database="bench_taskmq",
            env={"BENCH_TASKMQ_DURABLE_OUTCOMES": "0"},
        ),
        System(
            # Dramatiq, Redis broker and Redis result backend; `dramatiq --processes 2 --threads 1`:
            # two worker processes of one thread each, like the others' 2 workers. Its own Redis
            # databases (12, 13), so it never meets Celery's keys.
            name="dramatiq",
            label="Dramatiq + Redis (2 processes x 1 thread)",
            venv="dramatiq",
            project="dramatiq_project",
            adapter="dramatiq",
            pg_database="",
            env={"BENCH_REDIS_BROKER_DB": "12", "BENCH_REDIS_RESULT_DB": "13"},
            engines=("redis",),
            launcher="dramatiq",
        ),
        System(
            # Procrastinate's Django integration: `manage.py procrastinate worker --concurrency 2`,
            # one asyncio worker process running up to 2 jobs at once (its unit of scaling).
            name="procrastinate",
            label="Procrastinate (Django integration, concurrency 2)",
            venv="procrastinate",
            project="procrastinate_project",
            adapter="procrastinate",
            pg_database="bench_procrastinate",
            engines=("postgresql",),
            launcher="procrastinate",
        ),
        System(
            # oban-py: `oban start --queues default:2`, one asyncio process with a queue limit of 2
            # (the open-source edition has no multi-process execution).
            name="oban",
            label="oban-py (oban start, queue limit 2)",
            venv="oban",
            project="oban_project",
            adapter="oban",
            pg_database="bench_oban",
            engines=("postgresql",),
            launcher="oban",
        ),
        System(
            # Steady Queue (Django 6 django.tasks backend): `manage.py steady_queue`, a supervisor
            # forking one dispatcher and a worker of `processes: 2, threads: 1`.
            name="steady-queue",
            label="Steady Queue (django.tasks, 2 worker processes x 1 thread)",
            venv="steadyqueue",
            project="steadyqueue_project",
            adapter="steadyqueue",
            pg_database="bench_steadyqueue",
            # Not SQLite: there its two worker processes and dispatcher fail most claims with
            # "database is locked" and FOREIGN KEY errors (0.8 jobs/s in a smoke run).
            engines=("postgresql", "mysql"),
            launcher="steady_queue",
        ),
        System(
            # Not a task queue: Job.objects.create(...) of the row async_task() would write (the
            # payload signed once, reused), the yardstick of round3.py's enqueue. Shares taskmq's
            # project and databases (each run starts from a fresh copy anyway).
            name="taskmq-orm",
            label="Django ORM: Job.objects.create (the same row)",
            venv="taskmq",
            project="taskmq_project",
            adapter="taskmq_orm",
            pg_database="bench_taskmq",
        ),
    )
}

# The private durable Redis of "celery-durable" (durable_redis.py starts and stops it).
DURABLE_REDIS_PORT = int(SYSTEMS["celery-durable"].env["BENCH_REDIS_PORT"])

# The system every ratio is computed against, and the systems it is compared with
# (a ratio column each, when both are in the results).
SUBJECT = "taskmq"
BASELINES = ("taskmq-base", "djangoq2", "djangoq2-tuned", "dtdb", "celery")
# The peers of issue 30 (every Python peer in one run); not in DEFAULT_SYSTEMS, so that
# --quick stays under its two minutes (see README.md).
PEERS = ("taskmq", "djangoq2", "djangoq2-tuned", "dtdb", "celery", "celery-durable", "dramatiq",
         "procrastinate", "oban", "steady-queue")

# What --systems means when not given (taskmq-base is added by --baseline).
DEFAULT_SYSTEMS = ("taskmq", "djangoq2", "djangoq2-tuned", "dtdb", "celery")

# --engines chooses among the database engines; "redis" is Celery's own and always added
# for it (its results form a column of their own in the report). "mysql" is MariaDB (or
# MySQL) through Django's MySQL backend.
DATABASE_ENGINES = ("sqlite", "postgresql", "mysql")
ENGINES = DATABASE_ENGINES
ALL_ENGINES = ("sqlite", "postgresql", "mysql", "redis")
# Engines whose databases live on a server (created and dropped by name, pg_database).
SERVER_ENGINES = ("postgresql", "mysql")

# Every workload; DEFAULT_WORKLOADS is what issue 12's figures need (mixed, idle_cpu and
# rss are the first round's, still available by name).
WORKLOADS = ("enqueue", "bulk", "drain", "drain_large", "latency", "startup", "burst", "scale",
             "mixed", "idle_cpu", "rss", "memory")
DEFAULT_WORKLOADS = ("enqueue", "bulk", "drain", "drain_large", "latency", "startup", "burst",
                     "scale")


def not_applicable(system: System, workload: str, large_skip=(), large_skip_reason: str = "") -> str | None:
    """Return why ``system`` has no figure for ``workload`` (reported "n/a"), or None.

    run.py records these without starting the workload at all; workloads.py says the same.
    """
    if workload == "bulk" and system.adapter == "djangoq2":
        return "django-q2 has no bulk enqueue API"
    if workload == "bulk" and system.adapter == "dtdb":
        return "django-tasks-db has no bulk enqueue API (one row per enqueue call)"
    if workload == "burst" and system.launcher == "celery":
        return "Celery has no burst mode (a worker runs until stopped)"
    if workload == "burst" and system.adapter == "djangoq2":
        return "django-q2 has no burst mode (qcluster's --run-once is accepted but unused)"
    if workload == "bulk" and system.adapter == "dramatiq":
        return "Dramatiq has no bulk enqueue API (group(...).run() sends one message per call)"
    if workload == "bulk" and system.adapter == "steadyqueue":
        return "Steady Queue has no bulk enqueue (django.tasks' enqueue writes one job per call)"
    if workload == "burst" and system.launcher in ("dramatiq", "oban", "steady_queue"):
        return f"{system.label.split(' (')[0]} has no burst mode (a worker runs until stopped)"
    if workload == "burst" and system.launcher == "procrastinate":
        return "not wired: procrastinate worker --wait=False exists but was not measured here"
    if workload == "scale" and system.adapter != "taskmq":
        return "run for django_taskmq only (the 1M-row fill is written for its table)"
    if workload == "drain_large" and system.name in large_skip:
        return f"not run for {system.name} (--large-skip: {large_skip_reason or 'no reason given'})"
    return None
