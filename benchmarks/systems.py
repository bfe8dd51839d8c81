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

# Same Django series on both sides, so the framework is not what differs.
DJANGO_REQUIREMENT = "Django>=5.2,<5.3"
PSYCOPG_REQUIREMENT = "psycopg[binary]>=3.1"


@dataclass(frozen=True)
class VenvSpec:
    """A virtual environment under ``.work/``, rebuilt when its fingerprint changes.

    ``fingerprint_files`` are files whose content decides what gets installed (the repo's
    packaging metadata for an editable install), so an edit to them triggers a reinstall.
    """

    name: str
    requirements: tuple[str, ...]
    fingerprint_files: tuple[Path, ...] = ()

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
        requirements=("django-q2", DJANGO_REQUIREMENT, PSYCOPG_REQUIREMENT),
    ),
    "taskmq": VenvSpec(
        name="taskmq",
        requirements=("-e", f"{REPO_ROOT}[postgres]", DJANGO_REQUIREMENT),
        fingerprint_files=(REPO_ROOT / "setup.cfg", REPO_ROOT / "pyproject.toml"),
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
        requirements=("-e", f"{tree}[postgres]", DJANGO_REQUIREMENT),
        fingerprint_files=(tree / BASELINE_MARKER, tree / "setup.cfg", tree / "pyproject.toml"),
    )


@dataclass(frozen=True)
class System:
    """One contestant: a venv, a Django project, an adapter and extra environment.

    ``env`` is added to the environment of the driver and of the cluster, which is how
    a variant (``djangoq2-tuned``) changes a setting without a second project.
    ``db_name`` names the SQLite files (``.work/db/<db_name>.sqlite3`` and its template;
    default: the project's name); two systems share databases only if they share a schema.
    """

    name: str
    label: str
    venv: str
    project: str
    adapter: str
    pg_database: str
    env: dict[str, str] = field(default_factory=dict)
    db_name: str = ""

    @property
    def sqlite_name(self) -> str:
        return self.db_name or self.project

    @property
    def database_key(self) -> tuple[str, str]:
        """Systems with the same key share their live and template databases."""
        return (self.sqlite_name, self.pg_database)

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
    )
}

# The system every ratio is computed against, and the systems it is compared with
# (a ratio column each, when both are in the results).
SUBJECT = "taskmq"
BASELINES = ("taskmq-base", "djangoq2", "djangoq2-tuned")

# What --systems means when not given (taskmq-base is added by --baseline).
DEFAULT_SYSTEMS = ("taskmq", "djangoq2", "djangoq2-tuned")

ENGINES = ("sqlite", "postgresql")

# Run order inside one round; the cheap ones first so a broken setup fails fast.
WORKLOADS = ("enqueue", "bulk", "drain", "latency", "mixed", "idle_cpu", "rss")
