"""A private redis-server that keeps every write on disk before it answers (stdlib, host side).

System ``celery-durable`` runs against it: ``appendonly yes`` with ``appendfsync always`` (each
write is in the append-only file and fsync'ed before the reply, as a database commit is), no RDB
snapshots (``save ""``, as the machine's Redis at 6379, so the append-only file is the only disk
work). Its port is ``systems.DURABLE_REDIS_PORT`` (6390) and its directory a fresh one under
``.work/``; the machine's Redis is never touched. ``run.py`` and ``round3.py`` start it when
``celery-durable`` is selected and stop it (this process's own child, by its pid) at the end.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager

from systems import DURABLE_REDIS_PORT, WORK_DIR


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def config(port: int) -> dict:
    """Return the server's persistence settings as it reports them (CONFIG GET)."""
    out = {}
    for key in ("appendonly", "appendfsync", "save"):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(f"CONFIG GET {key}\r\n".encode())
            reply = conn.recv(512).decode().split("\r\n")
        out[key] = reply[4] if len(reply) > 4 else "?"  # *2, $len, key, $len, value
    return out


@contextmanager
def running(port: int = DURABLE_REDIS_PORT, log=print):
    """Start the durable redis-server for the ``with`` block; yield its persistence settings."""
    if _ping(port):
        raise RuntimeError(f"something already answers on port {port}: not starting a durable Redis there")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="durable-redis-", dir=WORK_DIR)
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory,
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--databases", "16"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not _ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"durable redis-server did not start on port {port}: {' '.join(argv)}")
            time.sleep(0.05)
        settings = config(port)
        log(f"durable Redis on port {port} (pid {process.pid}, dir {directory}): {settings}")
        yield settings
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
