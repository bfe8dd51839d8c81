"""``qcluster --health-port PORT``: the cluster's health over HTTP, for probes that speak HTTP.

``GET /health/live`` answers 200 while the cluster's sentinel runs; ``GET /health/ready`` answers
200 while its heartbeat is fresh and the database answers (:func:`django_taskmq.observability.health.check`),
503 with one line why otherwise. It runs as a thread of the monitor process: the monitor never
forks (a thread in the sentinel would be copied into every worker it forks) and it is reborn by
the sentinel if it dies.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

logger = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.rstrip("/") == "/health/live":
            alive = os.getppid() == self.server.sentinel
            self._answer(alive, "the sentinel runs" if alive else "the sentinel is gone")
        elif self.path.rstrip("/") == "/health/ready":
            from ..observability import health

            answer = health.check(host=socket.gethostname(), pid=self.server.sentinel)
            self._answer(answer.ok, answer.reason)
        else:
            self.send_error(404, "try /health/live or /health/ready")

    def _answer(self, ok: bool, reason: str) -> None:
        body = f"{'ok' if ok else 'unhealthy'}: {reason}\n".encode()
        self.send_response(200 if ok else 503)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: not logged
        pass


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True  # a reborn monitor binds the port again at once
    daemon_threads = True

    def __init__(self, port: int, sentinel: int) -> None:
        super().__init__(("", port), _Handler)
        self.sentinel = sentinel


def serve(port: int) -> ThreadingHTTPServer | None:
    """Serve the health endpoints on ``port`` in a daemon thread of this process (the monitor,
    whose parent is the sentinel); return the server, or None when the port cannot be bound."""
    try:
        server = _Server(port, os.getppid())
    except OSError as exc:
        logger.error("health endpoint: cannot listen on port %d (%s); probes will fail", port, exc)
        return None
    threading.Thread(target=server.serve_forever, name="taskmq-health", daemon=True).start()
    return server
