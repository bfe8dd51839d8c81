"""Test settings on PostgreSQL through PgBouncer in transaction mode (``scripts/suites pgbouncer``).

Connection "default" goes through the PgBouncer the tests start (``tests/pgbouncer.py``), at the
port in ``TASKMQ_PGBOUNCER_PORT``; until that is set (while the test process creates the test
database, which PgBouncer cannot drop later) it reaches the server directly. "direct" always
reaches the server directly, on the same database (a test mirror of "default"): the alias for
``TASKMQ['listen_database']``. ``TASKMQ`` keeps the defaults of the PostgreSQL settings: nothing
here tells the cluster that a pooler is in front.
"""

import os

from tests.settings_postgresql import *  # noqa: F401,F403
from tests.settings_postgresql import DATABASES as _DIRECT

PGBOUNCER = True  # tests/conftest.py starts PgBouncer and routes "default" through it

_direct = _DIRECT["default"]
DATABASES = {
    "default": {**_direct, "PORT": os.environ.get("TASKMQ_PGBOUNCER_PORT") or _direct["PORT"],
                "TEST": dict(_direct["TEST"])},
    "direct": {**_direct, "TEST": {"MIRROR": "default"}},
}
