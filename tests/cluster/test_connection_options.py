"""The cluster's PostgreSQL and MySQL connections carry the keepalive options (read back from the socket).

``outage.prepare`` runs in a fresh process (it changes the settings of connection "default" for
the whole process, as in ``qcluster``), which connects and prints what the kernel holds for its
socket: keepalive on, its idle time, interval and count, and ``TCP_USER_TIMEOUT``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import db_env, finish, start_script

from .conftest import engine_is_postgresql, engine_is_server

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not engine_is_server(), reason="TCP options (SQLite has no connection)"),
]

SCRIPT = """
import json, os, socket, sys
from django.db import connections
from django_taskmq.cluster import outage
from django_taskmq.conf import get_settings

connections.settings["default"]["OPTIONS"] = json.loads(sys.argv[1])
outage.prepare("default", get_settings().dead_connection_timeout)
conn = connections["default"]
conn.ensure_connection()
sock = socket.socket(fileno=os.dup(conn.connection.fileno()))
print(json.dumps({
    "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
    "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
    "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
    "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
    "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
}))
"""


def socket_options(options: dict | None = None, **taskmq) -> dict:
    env = db_env({"TASKMQ_OVERRIDES": json.dumps(taskmq)})
    return json.loads(finish(start_script(SCRIPT, json.dumps(options or {}), env=env)))


def test_by_default_a_silent_connection_fails_within_30_seconds():
    assert socket_options() == {"keepalive": 1, "idle": 10, "interval": 5, "count": 3, "user_timeout": 30000}


def test_the_setting_changes_them():
    assert socket_options(dead_connection_timeout=120) == {"keepalive": 1, "idle": 40, "interval": 20, "count": 3,
                                                           "user_timeout": 120000}


@pytest.mark.skipif(not engine_is_postgresql(), reason="libpq's options (mysqlclient has none: they are set on its socket)")
def test_the_projects_own_options_win():
    found = socket_options({"keepalives_idle": 60, "tcp_user_timeout": 0})
    assert found == {"keepalive": 1, "idle": 60, "interval": 5, "count": 3, "user_timeout": 0}


def test_none_leaves_the_system_defaults():
    found = socket_options(dead_connection_timeout=None)
    assert found["user_timeout"] == 0
    assert found["idle"] == int(Path("/proc/sys/net/ipv4/tcp_keepalive_time").read_text())
