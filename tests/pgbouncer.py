"""Debian's PgBouncer in transaction mode, started by the tests themselves, in front of the test server.

:func:`running` starts one per test run (its own ini, auth file and log in a temporary directory, a
free port on 127.0.0.1, every database name mapped to the PostgreSQL server of the settings, auth
``trust``); :func:`stop` ends it (its server connections with it, so the test database can be
dropped). PgBouncer refuses to run as root: as root it runs as ``postgres`` (or ``nobody``).

``tests.settings_pgbouncer`` points connection "default" at it through ``TASKMQ_PGBOUNCER_PORT``
(set by :func:`running`, so the qcluster subprocesses inherit it) and keeps "direct" on the server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PORT_VARIABLE = "TASKMQ_PGBOUNCER_PORT"
POOL_SIZE = 12  # server connections per database: the server's max_connections is shared


class PgBouncer:
    def __init__(self, server_host: str, server_port: int) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="taskmq-pgbouncer-"))
        self.port = _free_port()
        self.log = self.directory / "pgbouncer.log"
        user = _unprivileged_user()
        (self.directory / "users.txt").write_text('"postgres" ""\n')
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server_host} port={server_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\nmax_client_conn = 500\n"
        )
        if user is not None:
            shutil.chown(self.directory, user.pw_name)
            for path in self.directory.iterdir():
                shutil.chown(path, user.pw_name)
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [pgbouncer_path() or "pgbouncer", str(self.directory / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            user=user.pw_uid if user is not None else None, group=user.pw_gid if user is not None else None,
        )
        deadline = time.monotonic() + 30
        while not _accepts(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not start on port {self.port}:\n{self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
        shutil.rmtree(self.directory, ignore_errors=True)


_current: PgBouncer | None = None


def pgbouncer_path() -> str | None:
    """Where Debian's pgbouncer is (it lives in /usr/sbin, often not on a user's PATH), or None."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def running(server_host: str = "127.0.0.1", server_port: int = 5432) -> PgBouncer:
    """Return this run's PgBouncer, started on first use; its port is put in ``TASKMQ_PGBOUNCER_PORT``."""
    global _current
    if _current is None or _current.proc.poll() is not None:
        _current = PgBouncer(server_host, server_port)
        os.environ[PORT_VARIABLE] = str(_current.port)
    return _current


def stop() -> None:
    """Stop this run's PgBouncer, if one runs (closing its connections to the server)."""
    global _current
    if _current is not None:
        _current.stop()
        _current = None
        os.environ.pop(PORT_VARIABLE, None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _unprivileged_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("pgbouncer refuses to run as root, and there is no 'postgres' or 'nobody' user to run it as")
