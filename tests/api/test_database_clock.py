"""The broker's clock: every time it stores for its own decisions is the database's on PostgreSQL,
whatever the clock of the host that asks (and the host's own on SQLite, one host).

:func:`tests.clock_probe.problems` brackets each stored time between two readings of the broker's
clock. Here it runs in the test process on both engines, and on PostgreSQL in processes whose wall
clock (Python's and libpq's) libfaketime moves two minutes ahead and behind.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from tests.clock_probe import problems
from tests.conftest import db_env, finish, start_script

LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)


@pytest.mark.django_db(transaction=True)
def test_every_time_the_broker_stores_is_its_clock_plus_the_duration_asked(broker):
    assert problems() == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("offset", [120, -120])
def test_a_host_two_minutes_off_stores_the_database_s_times(broker, offset):
    if broker.connection.vendor != "postgresql":
        pytest.skip("SQLite is one host: the host's clock is the queue's")
    if LIBFAKETIME is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Debian's libfaketime is not installed and CI is set (scripts/test installs it)")
        pytest.skip("Debian's libfaketime is not installed (apt-get install faketime)")
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{offset:+d}s", "DONT_FAKE_MONOTONIC": "1"}
    out = finish(start_script("""
        import json, time
        from tests.clock_probe import problems
        print(json.dumps({"host": time.time(), "problems": problems()}))
    """, env=db_env(env)))
    found = json.loads(out)
    assert abs(found["host"] - broker.now() - offset) < 30, "the probe's clock was not moved"
    assert found["problems"] == []
